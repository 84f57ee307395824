"""Simulation back ends: Amaranth's Python simulator (pysim) and Yosys's CXXRTL compiled with
g++ (cxxrtl, with its C++ driver driver.cc), sharing one contract (memory_io)."""

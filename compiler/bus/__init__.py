"""An exported design behind a standard bus: the wrapper with its register map (wrapper:
AXI4-Lite, Wishbone B4), the C header and polling driver written beside it (c_driver), and the
plain-Verilog testbench that drives the bus (testbench)."""

"""Place and route with nextpnr: Fmax and fit (timing), bitstreams (bitstream), and the netlist
rewrites that move registers into block RAMs and DSPs before placement (bram_registers,
dsp_registers). The parts themselves are compiler.devices."""

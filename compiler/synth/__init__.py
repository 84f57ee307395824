"""Area from real synthesis with Yosys: the flow and its cache (area), per-unit synthesis
(units), where multipliers go (multipliers: DSP blocks or LUTs; lut_multiplier: the Yosys map
that builds them in LUTs), and the fast RTLIL writer (rtlil_text)."""

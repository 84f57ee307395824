"""An exported design behind a standard bus: the wrapper with its register map (wrapper:
AXI4-Lite, Wishbone B4), the C header and polling driver written beside it (c_driver), and the
plain-Verilog testbench that drives the bus (testbench); AXI-Stream for dataflow designs (stream).

    wrap(design, "axi-lite")   -> an Amaranth component (the top of the exported Verilog)
"""
from __future__ import annotations

from amaranth.lib import wiring

from ..design import Design
from .stream import StreamWrapper
from .wrapper import STREAM_BUSES, WRAPPERS, BusError, BusMap, check_wrappable


def wrap(design: Design, bus: str, bmap: BusMap | None = None) -> wiring.Component:
    """The wrapper component of `bus` around `design` (BusError for an unknown bus or one
    that cannot wrap it)."""
    check_wrappable(design, bus)
    if bus not in WRAPPERS:
        if bus in STREAM_BUSES:
            return StreamWrapper(design, bmap)
        raise BusError(f"bus {bus!r} is the design's own host bus: nothing to wrap")
    return WRAPPERS[bus](design, bmap)

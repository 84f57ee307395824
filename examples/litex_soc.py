"""A design exported with `--bus wishbone` as a Wishbone peripheral of a LiteX SoC.

    dse export results/<study> --trial N --out hw --bus wishbone
    python examples/litex_soc.py hw --out build        # build/gateware/litex_soc.v

`TinyHW` is the part to take into your own SoC: it instantiates `<top>.v`, adds it to the
platform's sources and gives a LiteX Wishbone interface and the `irq` line; `add_tinyhw` maps
it at a region of the SoC's bus (any origin aligned to the region's size, a power of two at
least the map's `size`, from interface.json). LiteX's Wishbone is word-addressed like the
wrapper's `wb_adr`, so the low address bits pass straight through. With a CPU, connect
`irq` to one of its interrupts and drive the accelerator with tinyhw.c at the region's origin.

The SoC built here has no CPU (none is installed with LiteX's PyPI package): its bus master is
a Wishbone port on the SoC's pins (`host_*`), which a testbench drives to poke the registers
through LiteX's interconnect (tests/test_litex.py does, in Icarus Verilog with cocotb).
The platform only writes Verilog (LiteX's simulation platform would also need Verilator and
its C++ modules, which its PyPI package does not bring); for a board, use its litex-boards
platform and `add_tinyhw` as below.
"""
from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

from migen import ClockSignal, Instance, ResetSignal, Signal
from migen.fhdl.structure import _Fragment
from litex.build.generic_platform import GenericPlatform, Pins, Subsignal
from litex.build.io import CRG
from litex.gen import LiteXModule
from litex.soc.integration.builder import Builder
from litex.soc.integration.soc import SoCRegion
from litex.soc.integration.soc_core import SoCCore
from litex.soc.interconnect import wishbone

TINYHW_ORIGIN = 0x3000_0000


class TinyHW(LiteXModule):
    """`<top>.v` of an export folder written with `--bus wishbone`, as a LiteX Wishbone slave."""

    def __init__(self, platform, export_dir: str | Path):
        export_dir = Path(export_dir)
        info = json.loads((export_dir / "interface.json").read_text())
        if info.get("bus", {}).get("kind") != "wishbone":
            raise ValueError(f"{export_dir}: exported with bus {info.get('bus', {}).get('kind', 'native')!r}; "
                             "export it with --bus wishbone")
        self.top = info["top"]
        self.size = 1 << (info["bus"]["map"]["size"] - 1).bit_length()     # the region: a power of two
        adr_bits = info["bus"]["map"]["addr_bits"] - 2                      # word address bits
        self.bus = wishbone.Interface(data_width=32, adr_width=30)
        self.irq = Signal()
        self.specials += Instance(
            self.top, i_clk=ClockSignal("sys"), i_rst=ResetSignal("sys"),
            i_wb_cyc=self.bus.cyc, i_wb_stb=self.bus.stb, i_wb_we=self.bus.we, i_wb_adr=self.bus.adr[:adr_bits],
            i_wb_dat_w=self.bus.dat_w, i_wb_sel=self.bus.sel, o_wb_dat_r=self.bus.dat_r, o_wb_ack=self.bus.ack,
            o_wb_err=self.bus.err, o_irq=self.irq)
        platform.add_source(str(export_dir / f"{self.top}.v"))


def add_tinyhw(soc: SoCCore, export_dir: str | Path, origin: int = TINYHW_ORIGIN) -> TinyHW:
    soc.tinyhw = tinyhw = TinyHW(soc.platform, export_dir)
    soc.bus.add_slave("tinyhw", tinyhw.bus, SoCRegion(origin=origin, size=tinyhw.size, cached=False))
    return tinyhw


_IO = [
    ("sys_clk", 0, Pins(1)),
    ("sys_rst", 0, Pins(1)),
    ("irq", 0, Pins(1)),
    ("host", 0,                          # a Wishbone master from outside (a testbench, a bridge)
     Subsignal("cyc", Pins(1)), Subsignal("stb", Pins(1)), Subsignal("we", Pins(1)), Subsignal("adr", Pins(30)),
     Subsignal("dat_w", Pins(32)), Subsignal("sel", Pins(4)), Subsignal("dat_r", Pins(32)),
     Subsignal("ack", Pins(1)), Subsignal("err", Pins(1))),
]


class VerilogPlatform(GenericPlatform):
    """A platform whose build writes the SoC's Verilog (<build_name>.v) and runs no toolchain."""

    def __init__(self):
        super().__init__("sim", _IO)

    def build(self, fragment, build_dir: str = "build", build_name: str = "litex_soc", run: bool = False, **_):
        if not isinstance(fragment, _Fragment):
            fragment = fragment.get_fragment()
        self.finalize(fragment)
        Path(build_dir).mkdir(parents=True, exist_ok=True)
        with contextlib.chdir(build_dir):           # memory .init files land beside the Verilog
            self.get_verilog(fragment, name=build_name).write(f"{build_name}.v")


class TinyHWSoC(SoCCore):
    """No CPU: a Wishbone master on the pins, the accelerator at TINYHW_ORIGIN."""

    def __init__(self, export_dir: str | Path, sys_clk_freq: float = 50e6):
        platform = VerilogPlatform()
        self.crg = CRG(platform.request("sys_clk"), platform.request("sys_rst"))
        SoCCore.__init__(self, platform, sys_clk_freq, cpu_type=None, with_uart=False, with_timer=False,
                         with_ctrl=False, integrated_sram_size=0, ident="tinyhw", ident_version=False)
        host, pads = wishbone.Interface(data_width=32, adr_width=30), platform.request("host")
        self.comb += [host.cyc.eq(pads.cyc), host.stb.eq(pads.stb), host.we.eq(pads.we), host.adr.eq(pads.adr),
                      host.dat_w.eq(pads.dat_w), host.sel.eq(pads.sel), pads.dat_r.eq(host.dat_r),
                      pads.ack.eq(host.ack), pads.err.eq(host.err)]
        self.bus.add_master("host", host)
        tinyhw = add_tinyhw(self, export_dir)
        self.comb += platform.request("irq").eq(tinyhw.irq)


def build(export_dir: str | Path, out: str | Path) -> Path:
    """The SoC's Verilog (out/gateware/litex_soc.v; `<top>.v` of the export is its other source)."""
    soc = TinyHWSoC(export_dir)
    builder = Builder(soc, output_dir=str(out), compile_software=False, compile_gateware=False)
    builder.build(run=False, build_name="litex_soc")
    return Path(out) / "gateware" / "litex_soc.v"


def main() -> None:
    p = argparse.ArgumentParser(description="the exported design in a LiteX SoC, built to Verilog")
    p.add_argument("export_dir", help="a folder written by `dse export ... --bus wishbone`")
    p.add_argument("--out", default="build", help="the build folder (default build/)")
    args = p.parse_args()
    print(build(args.export_dir, args.out))


if __name__ == "__main__":
    main()

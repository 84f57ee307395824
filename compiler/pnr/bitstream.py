"""An ECP5 bitstream of a design for a named part and package: Yosys `synth_ecp5`, nextpnr-ecp5
(`--textcfg`), then Project Trellis' ecppack, all from the yowasp packages.

    bit = write_bitstream(design=design, out_dir="hw", device="LFE5U-25F", package="CABGA381")
    bit.path, bit.fmax_mhz

Pins: with `lpf` (a Lattice preference file mapping the top's ports to the board's pins) the
ports go where the board needs them; without it nextpnr places every port on any free IO
(`--lpf-allow-unconstrained`), which proves the design builds and closes timing on that part
but is not a bitstream to load on a board. The design's top has ~50-100 ports (the host bus),
so in a real project the Verilog (compiler.export) is usually instantiated inside the user's
own top instead.

Unlike compiler.pnr.timing (which chooses the smallest device that holds a design and caches its
runs), this runs exactly the part asked for, uncached, and keeps its files: a bitstream is
an artefact, not a measurement.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..design import Design
from ..devices import dsp_blocks, find_device
from .timing import (DEFAULT_FREQ_MHZ, DEFAULT_PLACER, DEFAULT_ROUTER, DEFAULT_SEED, netlist_summary, nextpnr_argv,
                     nextpnr_version, prepare, read_report, regrouped, write_clock_lpf)
from ..synth.area import synthesize
from ..tools import ToolError, find_tool, run_tool


@dataclass(frozen=True)
class Bitstream:
    path: Path                      # the .bit file
    device: str                     # the part, e.g. "LFE5U-25F"
    package: str
    fmax_mhz: float | None          # the slowest clock's achieved Fmax after routing
    freq_mhz: float                 # the target frequency given to nextpnr
    constrained: bool               # pins from an LPF (False: placed anywhere by nextpnr)
    log_dir: Path                   # synth/, nextpnr.log, ecppack.log
    argv: tuple[str, ...] = ()      # the nextpnr command (router, placer, seed among it)


def write_bitstream(*, design: Design, out_dir: str | Path, device: str, package: str | None = None,
                    lpf: str | Path | None = None, freq_mhz: float = DEFAULT_FREQ_MHZ, seed: int = DEFAULT_SEED,
                    router: str = DEFAULT_ROUTER, placer: str = DEFAULT_PLACER, regroup: bool = False,
                    ripup: bool = False, name: str = "tinyhw_top", timeout: float | None = 1800, bus: str = "native") -> Bitstream:
    """`out_dir/<name>_<device>_<package>.bit`; the tools' files go to `out_dir/.bitstream/`.
    `package` defaults to the part's first package with enough pins. Raises ValueError for an
    unknown part or package or a missing LPF, ToolError when a tool fails (nextpnr also when
    the design does not fit the part: its log says which resource ran out). `freq_mhz`, `seed`,
    `router`, `placer`, `regroup`, `ripup`: nextpnr's settings and the copies dealt by a first placement
    (compiler.pnr.timing.place_and_route's); the Fmax an explorer's sweep measured is
    reproduced by giving the settings it ran with. `bus`: the
    design behind that bus wrapper (compiler.bus.wrapper), as `export_design(bus=...)` writes it."""
    dev = find_device("ecp5", device)
    if lpf is not None and not Path(lpf).is_file():
        raise ValueError(f"lpf: no such file {str(lpf)!r}")
    known = dict(dev.packages)
    if package is not None and package.upper() not in known:
        raise ValueError(f"unknown package {package!r} for {dev.name}; known: {', '.join(known)}")
    work = Path(out_dir) / ".bitstream"
    blocks = dsp_blocks(dev.family, dev)        # `mul: auto` fills this part's DSP blocks, no more
    if bus == "native":
        area = synthesize(design, "ecp5", work / "synth", timeout=timeout, netlist=True, exact_init=True,
                          dsp_blocks=blocks)
    else:
        from amaranth.back import rtlil
        from ..bus import wrap
        from ..synth.area import synthesize_rtlil
        area = synthesize_rtlil(rtlil.convert(wrap(design, bus), name="top"), "ecp5", work / "synth", timeout=timeout,
                                netlist=True, mul=design.config.mul, dsp_blocks=blocks)
    netlist = json.loads(Path(area.netlist_path).read_text())
    top, _cells, pins = netlist_summary(netlist)
    package = (package or dev.package_for(pins) or "").upper()
    if not package:
        raise ValueError(f"the design's top has {pins} port bits, more than any {dev.name} package has pins "
                         f"({', '.join(f'{p}: {n}' for p, n in dev.packages)}): instantiate {name}.v in a top "
                         "of your own")
    top, clock, _ = prepare(netlist, "ecp5")               # as place_and_route does
    # the clock on the package's clock pin, as the explorer's timing assumes, unless the user's
    # LPF places the pins
    argv = nextpnr_argv(dev, package, top=top, freq_mhz=freq_mhz, seed=seed, router=router, placer=placer,
                        ripup=ripup, clock=clock and lpf is None)
    argv += ["--textcfg", "design.config"]
    write_clock_lpf(work, argv, package)
    if lpf is not None:
        shutil.copyfile(lpf, work / "pins.lpf")
        argv = [a for a in argv if a != "--lpf-allow-unconstrained"] + ["--lpf", "pins.lpf"]
    body = json.dumps(netlist).encode()
    if regroup:        # placed first with the same pins (not cached: the pins file is not in its key)
        (work / "first").mkdir(parents=True, exist_ok=True)
        if lpf is not None:
            shutil.copyfile(lpf, work / "first" / "pins.lpf")
        body, _, _, _ = regrouped(body, top, work / "first", argv=argv, version=nextpnr_version("ecp5"), use_cache=False,
                                  timeout=timeout)
    (work / "netlist.json").write_bytes(body)
    (work / "design.config").unlink(missing_ok=True)
    run_tool([find_tool(argv[0]), *argv[1:]], cwd=work, log_name="nextpnr.log", timeout=timeout)
    if not (work / "design.config").is_file():
        raise ToolError(argv[0], "wrote no design.config", "", work / "nextpnr.log")
    run_tool([find_tool("yowasp-ecppack"), "--input", "design.config", "--bit", "design.bit"], cwd=work,
             log_name="ecppack.log", timeout=timeout)
    path = Path(out_dir) / f"{name}_{dev.name}_{package}.bit"
    (work / "design.bit").replace(path)
    report = read_report(work / "report.json")
    fmax = min(report[0].values()) if report and report[0] else None
    return Bitstream(path, dev.name, package, fmax, freq_mhz, lpf is not None, work, tuple(argv))

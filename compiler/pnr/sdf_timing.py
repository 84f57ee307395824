"""Every register-to-register path of a routed ECP5 design, from the SDF nextpnr writes (`--sdf`):
nextpnr's report names only the slowest path, which does not say whether a design misses its
clock by one outlier or by thousands of endpoints (place_and_route's `failing_endpoints` and
`tns_ns`; bench/sdf_paths.py lists the paths).

    edges, launch, setup, kind = read_sdf(path)
    arrive, came = arrivals(edges, launch)                # latest arrival at every pin, and from where
    ends = endpoints(arrive, launch, setup, kind)         # [(ns, pin)], slowest first
    summary = slack(ends, period_ns)                      # Slack(endpoints, failing, worst_ns, tns_ns)

The SDF holds every cell's delays (IOPATH: a LUT's input to its output, a flip-flop's, block
RAM's or DSP block's clock to its output) and every routed connection's (INTERCONNECT). The
longest arrival at every pin is propagated from the clocked outputs through the combinational
cells; an endpoint is an input with a setup check or a clocked cell's input, its setup added.
Input pins are not sources (a path from a pin is nextpnr's cross-domain `<async>` report, not
in its Fmax), so the slowest endpoint is the path nextpnr reports (the int8 GEMV 8x56: 7.34 ns
both; the GEMV 16x64, whose slowest path ends at a LUT RAM's write data: 15.50 ns both).
"""
from __future__ import annotations

import collections
import re
from dataclasses import dataclass
from pathlib import Path

CLOCKED = {"TRELLIS_FF", "DP16KD", "MULT18X18D", "ALU54B"}     # cells with a clock-to-out
_IOPATH = re.compile(r"\(IOPATH (\S+) (\S+) \(([\d:]+)\)")
_INTERCONNECT = re.compile(r"\(INTERCONNECT (\S+) (\S+) \(([\d:]+)\)")
_SETUP = re.compile(r"\(SETUPHOLD \((?:posedge|negedge) (\S+)\) \((?:posedge|negedge) \S+\) \(([\d:]+)\)")

Pin = tuple[str, str]           # (cell instance, port)


@dataclass(frozen=True)
class Slack:
    """A routed design against a clock period: its register endpoints, how many arrive after the
    period, the slowest arrival, and the total of their lateness (TNS, ns; 0 when none is late)."""
    endpoints: int
    failing: int
    worst_ns: float | None
    tns_ns: float


def _ns(triple: str) -> float:
    """The max of an SDF (min:typ:max) triple in ps, as ns."""
    return int(triple.split(":")[2]) / 1000.0


def _pin(text: str) -> Pin:
    cell, port = text.replace("\\", "").rsplit("/", 1)
    return cell, port


def read_sdf(path: Path) -> tuple[dict[Pin, list[tuple[Pin, float]]], dict[Pin, float], dict[Pin, float], dict[str, str]]:
    """(edges pin -> [(pin, ns)], launch pin -> clock-to-out ns, setup pin -> ns, cell -> type),
    read line by line (nextpnr writes one statement a line)."""
    edges: dict[Pin, list[tuple[Pin, float]]] = collections.defaultdict(list)
    launch: dict[Pin, float] = {}
    setup: dict[Pin, float] = {}
    kind: dict[str, str] = {}
    cell_type = cell = ""
    with open(path) as f:
        for line in f:
            s = line.strip()
            if s.startswith("(CELLTYPE"):
                cell_type = s.split('"')[1]
            elif s.startswith("(INSTANCE"):
                cell = s[len("(INSTANCE"):-1].strip().replace("\\", "")
                kind[cell] = cell_type
            elif s.startswith("(INTERCONNECT"):
                a, b, d = _INTERCONNECT.match(s).groups()
                edges[_pin(a)].append((_pin(b), _ns(d)))
            elif s.startswith("(IOPATH"):
                a, b, d = _IOPATH.match(s).groups()
                if a.startswith("CLK") and cell_type in CLOCKED:
                    launch[(cell, b)] = max(launch.get((cell, b), 0.0), _ns(d))
                else:
                    edges[(cell, a)].append(((cell, b), _ns(d)))
            elif s.startswith("(SETUPHOLD") and (m := _SETUP.match(s)):
                setup[(cell, m.group(1))] = max(setup.get((cell, m.group(1)), 0.0), _ns(m.group(2)))
    return edges, launch, setup, kind


def arrivals(edges, launch) -> tuple[dict[Pin, float], dict[Pin, Pin | None]]:
    """The latest arrival at every pin reachable from a clocked output, and the pin it came from."""
    indegree: collections.Counter = collections.Counter(q for es in edges.values() for q, _ in es)
    arrive: dict[Pin, float] = dict(launch)
    came: dict[Pin, Pin | None] = dict.fromkeys(launch)
    ready = [p for p in set(edges) | set(launch) if indegree[p] == 0]
    while ready:
        p = ready.pop()
        t = arrive.get(p)
        for q, d in edges.get(p, ()):
            if t is not None and (q not in arrive or t + d > arrive[q]):
                arrive[q], came[q] = t + d, p
            indegree[q] -= 1
            if indegree[q] == 0:
                ready.append(q)
    return arrive, came


def endpoints(arrive: dict[Pin, float], launch: dict[Pin, float], setup: dict[Pin, float],
              kind: dict[str, str]) -> list[tuple[float, Pin]]:
    """(arrival + setup ns, pin) of every input a register reaches that is checked against the
    clock, slowest first: a pin with a setup time (a LUT RAM's write data and address are
    TRELLIS_COMB pins with one), or any input of a clocked cell (a DSP block's registered
    operands have none in the SDF)."""
    return sorted(((t + setup.get(p, 0.0), p) for p, t in arrive.items()
                   if p in setup or (kind.get(p[0]) in CLOCKED and p not in launch and not p[1].startswith("CLK"))),
                  reverse=True)


def slack(ends: list[tuple[float, Pin]], period_ns: float) -> Slack:
    """`ends` (endpoints: slowest first) against a clock period."""
    late = [t - period_ns for t, _ in ends if t > period_ns]
    return Slack(len(ends), len(late), ends[0][0] if ends else None, round(sum(late), 3))


def sdf_slack(path: Path, period_ns: float) -> Slack:
    """The SDF at `path` against a clock period (module docstring)."""
    edges, launch, setup, kind = read_sdf(path)
    arrive, _ = arrivals(edges, launch)
    return slack(endpoints(arrive, launch, setup, kind), period_ns)


def register_name(cell: str) -> str:
    """A flip-flop cell's register as the RTL names it (Yosys's and nextpnr's suffixes dropped)."""
    return re.sub(r"_TRELLIS_FF_Q(_\d+)?$|\$CCU2.*$", "", cell)

"""Every register-to-register path of a routed ECP5 design slower than a period, from the SDF
nextpnr writes (`--sdf routed.sdf`): nextpnr's log names only the single slowest path, which
does not say whether a design misses its clock by one outlier or by thousands of endpoints.

The SDF holds every cell's delays (IOPATH: a LUT's input to its output, a flip-flop's, block
RAM's or DSP block's clock to its output) and every routed connection's (INTERCONNECT). The
longest arrival at every pin is propagated from the clocked outputs through the combinational
cells; an endpoint is a clocked cell's input (its setup added). Input pins are not sources (a
path from `start` is nextpnr's cross-domain `<async>` report, not in its Fmax), so the slowest
path found is the one nextpnr reports (the int8 GEMV 8x56: 7.34 ns both).

Usage: python bench/sdf_paths.py routed.sdf --period-ns 6.667 [--show 20]
To get the SDF of a design placed by `dse` or the benches, run nextpnr again in its folder
with the argv its report holds (compiler/pnr/timing.py `TimingReport.argv`) and `--sdf
routed.sdf`: placement and routing are seeded, so the run is the same one.
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

CLOCKED = {"TRELLIS_FF", "DP16KD", "MULT18X18D", "ALU54B", "TRELLIS_RAMW"}
_IOPATH = re.compile(r"\(IOPATH (\S+) (\S+) \(([\d:]+)\)")
_INTERCONNECT = re.compile(r"\(INTERCONNECT (\S+) (\S+) \(([\d:]+)\)")
_SETUP = re.compile(r"\(SETUPHOLD \((?:posedge|negedge) (\S+)\) \((?:posedge|negedge) \S+\) \(([\d:]+)\)")

Pin = tuple[str, str]           # (cell instance, port)


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


def register_name(cell: str) -> str:
    """A flip-flop cell's register as the RTL names it (Yosys's and nextpnr's suffixes dropped)."""
    return re.sub(r"_TRELLIS_FF_Q(_\d+)?$|\$CCU2.*$", "", cell)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sdf", type=Path)
    ap.add_argument("--period-ns", type=float, required=True)
    ap.add_argument("--show", type=int, default=20, help="slowest endpoints to list")
    args = ap.parse_args()
    if not args.sdf.is_file():
        print(f"sdf_paths: {args.sdf}: no such file", file=sys.stderr)
        return 2
    edges, launch, setup, kind = read_sdf(args.sdf)
    arrive, came = arrivals(edges, launch)
    ends = sorted(((t + setup.get(p, 0.0), p) for p, t in arrive.items()
                   if kind.get(p[0]) in CLOCKED and p not in launch and not p[1].startswith("CLK")), reverse=True)
    over = [(t, p) for t, p in ends if t > args.period_ns]

    def source(p: Pin) -> Pin:
        while came.get(p) is not None:
            p = came[p]
        return p
    print(f"{len(ends):,} endpoints; slowest {ends[0][0]:.2f} ns ({1000 / ends[0][0]:.1f} MHz)" if ends else "no endpoints")
    print(f"{len(over):,} over {args.period_ns:g} ns ({1000 / args.period_ns:.1f} MHz)")
    for t, p in over[:args.show]:
        s = source(p)
        print(f"  {t:6.2f} ns  {s[0]}.{s[1]} -> {p[0]}.{p[1]}")
    starts = collections.Counter(register_name(source(p)[0]) for _, p in over)
    if starts:
        print("their sources, by endpoints:")
        for name, n in starts.most_common(20):
            print(f"  {n:5d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every register-to-register path of a routed ECP5 design slower than a period, listed with its
source, from the SDF nextpnr writes (compiler/pnr/sdf_timing.py reads it; place_and_route keeps
only the count of such endpoints and their total lateness, `failing_endpoints`, `tns_ns`).

Usage: python bench/sdf_paths.py routed.sdf --period-ns 6.667 [--show 20]
place_and_route leaves `routed.sdf` in its run folder (`<workdir>/pnr/<device>/`, ECP5). A run
served from the cache has none: run nextpnr again in that folder with the argv its report holds
(compiler/pnr/timing.py `TimingReport.argv`); placement and routing are seeded, so the run is
the same one.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from compiler.pnr.sdf_timing import Pin, arrivals, endpoints, read_sdf, register_name  # noqa: E402


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
    ends = endpoints(arrive, launch, setup, kind)
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

"""Placing and routing a bench's design once per nextpnr seed (bench_timing, bench_bandwidth,
bench_dataflow, bench_constant): the command-line options they share and the median seed's
report, with every seed's figures beside it. Placement noise moves one seed's Fmax by +-10% on
the large designs, so a row is a median, never one seed's luck."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from compiler.pnr.timing import PLACERS, TimingReport, place_and_route


def add_pnr_arguments(ap: argparse.ArgumentParser, *, placer: str = "static") -> None:
    """--placer, --seeds, --freq, --regroup and --repair (place_and_route's arguments)."""
    ap.add_argument("--placer", choices=PLACERS, default=placer,
                    help=f"nextpnr's placer (default {placer}; compiler/pnr/timing.py)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1],
                    help="nextpnr's seeds: each design placed and routed once per seed, the median seed's row")
    ap.add_argument("--freq", type=float, default=100.0,
                    help="the clock nextpnr's timing-driven placement and routing aim at (MHz)")
    ap.add_argument("--regroup", action="store_true",
                    help="place once, deal each family of copies' loads by position, then place and route "
                         "(compiler/pnr/replicas.py)")
    ap.add_argument("--repair", action="store_true",
                    help="a route missing --freq routed again with nextpnr's timing-driven ripup, aimed 10%% above "
                         "the Fmax reached; the faster route kept (compiler/pnr/timing.py REPAIR_MARGIN)")


def place_and_route_seeds(netlist: Path, workdir: Path, args: argparse.Namespace, *,
                          router: str = "router2", **kw: Any) -> list[TimingReport]:
    """One place_and_route per seed of `args.seeds` on `args.device`, in workdir/seedN when there
    are several (workdir itself for one). A tool's time-out or crash raises ToolError."""
    seeds = list(args.seeds)
    return [place_and_route(netlist, "ecp5", workdir / (f"seed{seed}" if len(seeds) > 1 else ""),
                            timeout=args.timeout, device=args.device, seed=seed, router=router,
                            placer=args.placer, freq_mhz=args.freq, regroup=args.regroup, repair=args.repair,
                            **kw)
            for seed in seeds]


def median_seed(reports: Sequence[TimingReport]) -> TimingReport:
    """The median seed's report (the lower middle one of an even count; a seed that did not
    route ranks lowest)."""
    ranked = sorted(reports, key=lambda r: (r.fmax_mhz is not None, r.fmax_mhz or 0.0))
    return ranked[(len(ranked) - 1) // 2]


def seed_fields(reports: Sequence[TimingReport]) -> dict[str, list]:
    """Every seed's figures for a row: Fmax, the clock its kept route aimed at (a repaired route's
    is the repair's aim), its endpoints later than that clock's period and their total lateness,
    the Fmax before a repair, and what regrouping did."""
    return dict(seeds=[r.seed for r in reports], fmax_seeds=[r.fmax_mhz for r in reports],
                aim_mhz=[r.freq_mhz for r in reports], failing_endpoints=[r.failing_endpoints for r in reports],
                tns_ns=[r.tns_ns for r in reports], unrepaired_fmax_seeds=[r.unrepaired_fmax_mhz for r in reports],
                regrouped=[r.regrouped for r in reports], twins=[r.twins for r in reports])


def seeds_text(row: dict) -> str:
    """Every seed's Fmax in a row, with the first route's beside a repaired one: "seeds 1, 2, 3:
    137.9 (134.4 before the repair), 125.0, 131.7 MHz"; "" for one seed not repaired (the row's
    Fmax says it all)."""
    fmax = row.get("fmax_seeds") or []
    first = row.get("unrepaired_fmax_seeds") or [None] * len(fmax)
    repaired = [u is not None and u != f for f, u in zip(fmax, first)]
    if len(fmax) < 2 and not any(repaired):
        return ""
    mhz = lambda f: "-" if f is None else f"{f:.1f}"  # noqa: E731
    each = [mhz(f) + (f" ({mhz(u)} before the repair)" if r else "") for f, u, r in zip(fmax, first, repaired)]
    return f"seed{'s' * (len(fmax) > 1)} {', '.join(map(str, row['seeds']))}: {', '.join(each)} MHz"

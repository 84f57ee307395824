"""`dse`: the design-space explorer's command line.

Exit codes scripts can trust: 0 success, 1 a gate failed, 2 bad usage or bad input (one
`error: <path>: <message>` line on stderr, no traceback).

To add a subcommand, write `add_<name>(parser)` and `run_<name>(args) -> int` and append a
`Command` to COMMANDS.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

EXIT_OK, EXIT_GATE_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class CliError(Exception):
    """Bad usage or input found by a subcommand: printed as `error: <message>`, exit code 2."""


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# ---------------------------------------------------------------------------------------------
# dse validate SPEC

def add_validate(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="path of the YAML spec")


def run_validate(args: argparse.Namespace) -> int:
    from dse.spec import load_spec
    s = load_spec(args.spec)
    models = ", ".join(m.name for m in s.models)
    knobs = " x ".join(f"{k.name}:{len(k.values)}" for k in s.knobs) or "defaults only"
    objectives = ", ".join(f"{'max' if o.direction == 'maximize' else 'min'} {o.metric}" for o in s.objectives)
    illegal = _illegal_knob_combinations(s)
    print(f"ok: study {s.study!r}: {len(s.models)} model{'s' * (len(s.models) != 1)} ({models}), "
          f"{len(s.dtypes)} dtype{'s' * (len(s.dtypes) != 1)} ({', '.join(s.dtypes)}), "
          f"{s.knob_space_size} knob setting{'s' * (s.knob_space_size != 1)} ({knobs}) -> {s.space_size} design points"
          f"{f' ({illegal} illegal knob combinations)' if illegal else ''}; "
          f"target {s.target}; {objectives}; {s.search.sampler} sampler, {s.search.trials} trials, seed {s.search.seed}")
    return EXIT_OK


def _illegal_knob_combinations(s, limit: int = 100_000) -> int:
    """How many knob combinations HardwareConfig rejects (0 when the space is too large to check)."""
    if s.knob_space_size > limit:
        return 0
    from compiler.config import HardwareConfig
    bad = 0
    for combo in s.knob_combinations():
        try:
            HardwareConfig.from_dict(dict(combo))
        except (ValueError, TypeError):
            bad += 1
    return bad


# ---------------------------------------------------------------------------------------------
# dse models

def add_models(p: argparse.ArgumentParser) -> None:
    pass


def run_models(args: argparse.Namespace) -> int:
    from dse.zoo import DTYPES, ZOO
    width = max(len(n) for n in ZOO)
    for m in ZOO.values():
        params = " ".join(f"{p.name}={p.default}" for p in m.params)
        print(f"{m.name:<{width}}  {params}")
        print(f"{'':<{width}}  {m.doc}")
    print(f"\ndtypes: {', '.join(DTYPES)}. Use in a spec as `builtin: NAME` with `params: {{...}}`.")
    return EXIT_OK


COMMANDS: list[Command] = [
    Command("validate", "check a spec and print a one-line summary", add_validate, run_validate),
    Command("models", "list the model zoo with its parameters and defaults", add_models, run_models),
]


# ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dse", description="Explore FPGA designs compiled from tinygrad models.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for c in COMMANDS:
        p = sub.add_parser(c.name, help=c.help, description=c.help)
        c.add_arguments(p)
        p.set_defaults(run=c.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from dse.spec import SpecError
    args = build_parser().parse_args(argv)      # argparse itself exits 2 on bad usage
    try:
        return args.run(args)
    except (SpecError, CliError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())

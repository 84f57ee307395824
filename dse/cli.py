"""`dse`: the design-space explorer's command line.

Exit codes scripts can trust: 0 success, 1 a gate failed (`dse eval`: the point's status is
FAIL; its row is still printed), 2 bad usage or bad input (one `error: <path>: <message>` line
on stderr, no traceback).

To add a subcommand, write `add_<name>(parser)` and `run_<name>(args) -> int` and append a
`Command` to COMMANDS.

One module (~670 lines): every subcommand's parser and runner, each short, sharing one error
path and the exit codes above; a module per subcommand would scatter that contract.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

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
    from dse.spec import load_spec, objectives_label
    s = load_spec(args.spec)
    models = ", ".join(m.name for m in s.models)
    knobs = " x ".join(f"{k.name}:{len(k.values)}" for k in s.knobs) or "defaults only"
    objectives = objectives_label(s.objectives)
    illegal = _illegal_knob_combinations(s)
    print(f"ok: study {s.study!r}: {len(s.models)} model{'s' * (len(s.models) != 1)} ({models}), "
          f"{len(s.dtypes)} dtype{'s' * (len(s.dtypes) != 1)} ({', '.join(s.dtypes)}), "
          f"{s.knob_space_size} knob setting{'s' * (s.knob_space_size != 1)} ({knobs}) -> {s.space_size} design points"
          f"{f' ({illegal} illegal knob combinations)' if illegal else ''}; "
          f"target {s.target}; {objectives}; {s.search.sampler} sampler, {s.search.trials} trials, seed {s.search.seed}"
          + ("; multi-fidelity" if s.search.fidelity == "multi" else "")
          + (f", hv_tolerance {s.search.hv_tolerance:g}" if s.search.hv_tolerance else "")
          + ("; per-unit synthesis (float units synthesised once each)" if s.synthesis == "units" else "")
          + ("; per-kernel synthesis (each kernel on its own, in parallel)" if s.synthesis == "kernels" else ""))
    for line in not_applicable_lines(s):
        print(line)
    return EXIT_OK


def not_applicable_lines(s) -> list[str]:
    """One line per reason a spec's points were left out of its search space, with a count
    and an example (Spec.not_applicable), and per format knob some points run without
    (Spec.format_notes): said once per sweep, not as a FAIL row each."""
    reasons: dict[str, list] = {}
    for point, why in s.not_applicable_points():
        reasons.setdefault(why, []).append(point)
    return [f"not applicable, left out of the search space: {len(points)} point{'s' * (len(points) != 1)} "
            f"(e.g. {points[0].model} {points[0].dtype}): {why}" for why, points in reasons.items()] + [
        f"not applied: {line}" for line in s.format_notes()]


def _illegal_knob_combinations(s, limit: int = 100_000) -> int:
    """How many knob combinations HardwareConfig rejects (0 when the space is too large to check)."""
    if s.knob_space_size > limit:
        return 0
    from compiler.config import HardwareConfig
    from dse.spec import hardware_knobs
    bad = 0
    for combo in s.knob_combinations():
        try:     # format knobs are the model's (dse.models.widths), not the hardware's
            HardwareConfig.from_dict(hardware_knobs(combo))
        except (ValueError, TypeError):
            bad += 1
    return bad


# ---------------------------------------------------------------------------------------------
# dse models

def add_layers(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="path of the YAML spec")
    p.add_argument("--model", help="only this model")
    p.add_argument("--dtype", help="only this dtype")


def run_layers(args: argparse.Namespace) -> int:
    """Each model's layers (kernels) per dtype: the indices and names `<knob>@<layer>` takes; a
    conv/dense layer of a network the tool quantises has two names, its kernel's and its
    weights', each good for either kind of per-layer knob."""
    from dse.models.model import layer_kernels, model_layer_limits, quantised_layers
    from dse.spec import load_spec
    s = load_spec(args.spec)
    models = [m for m in s.models if args.model in (None, m.name)]
    if not models:
        raise CliError(f"--model: no model {args.model!r} in study {s.study!r}; models: "
                       + ", ".join(m.name for m in s.models))
    if args.dtype is not None and args.dtype not in s.dtypes:
        raise CliError(f"--dtype: {args.dtype!r} is not a dtype of study {s.study!r}; dtypes: {', '.join(s.dtypes)}")
    for m in models:
        by_names: dict[tuple, list[str]] = {}
        for dtype in (s.model_dtypes(m.name) if args.dtype is None else (args.dtype,)):
            try:
                layers = tuple(model_layer_limits(m, dtype))
                weights = {k: name for name, k in layer_kernels(m, dtype).items()}
            except Exception as e:          # noqa: BLE001 - the model's own error, said per dtype
                print(f"{m.name} {dtype}: does not build: {type(e).__name__}: {e}")
                continue
            by_names.setdefault((layers, tuple(sorted(weights.items()))), []).append(dtype)
        for (layers, weights), dtypes in by_names.items():
            named = dict(weights)
            print(f"{m.name} ({', '.join(dtypes)}): {len(layers)} layer{'s' * (len(layers) != 1)}")
            for i, (name, lanes, unroll) in enumerate(layers):
                print(f"  {i}  {name}{f' = {named[i]}' if i in named else ''}  (lanes up to {lanes}, "
                      f"reduce_unroll up to {unroll})")
        if m.trained is not None:
            quantised = quantised_layers(m)
            kernels = {name: layers[k][0] for (layers, weights), _ in by_names.items() for k, name in weights}
            print(f"{m.name}: {len(quantised)} conv/dense layer{'s' * (len(quantised) != 1)} for weight_bits@, "
                  f"act_bits@ and scale_digits@")
            for i, name in enumerate(quantised):
                print(f"  {i}  {name}{f' = {kernels[name]}' if name in kernels else ''}")
    print("Per-layer knobs in a spec: <knob>@<index or name>, e.g. lanes@0: [1, 4] (docs/knobs.md). A conv/dense "
          "layer's two names (its kernel's = its weights') name it for either kind of knob; an index counts the "
          "layers (kernels) for lanes@, reduce_unroll@ and weights@, the conv/dense layers for the format knobs.")
    return EXIT_OK


def add_models(p: argparse.ArgumentParser) -> None:
    pass


def run_models(args: argparse.Namespace) -> int:
    from dse.models.formats import DESCRIPTION
    from dse.models.zoo import MAX_ELEMENTS, ZOO
    width = max(len(n) for n in ZOO)
    for m in ZOO.values():
        params = " ".join(f"{p.name}={p.default}" + ("" if (p.minimum, p.maximum) == (1, MAX_ELEMENTS)
                                                         else f" [{p.minimum}..{p.maximum:,}]") for p in m.params)
        print(f"{m.name:<{width}}  {params}")
        print(f"{'':<{width}}  {m.doc}")
    print(f"\ndtypes: {DESCRIPTION}. Use in a spec as `builtin: NAME` with `params: {{...}}`.\n"
          f"Parameters range over 1..{MAX_ELEMENTS:,} unless [min..max] says otherwise, and no input may "
          f"exceed {MAX_ELEMENTS:,} elements (more than any FPGA target here holds).")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# dse eval SPEC --model NAME --dtype DT [--set KNOB=VALUE ...] [--target T] [--json] [--workdir DIR]

def add_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="path of the YAML spec")
    p.add_argument("--model", required=True, help="a model name from the spec's `models:`")
    p.add_argument("--dtype", required=True, help="one of the spec's `dtypes:`")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KNOB=VALUE",
                   help="a hardware knob value, parsed as a YAML scalar (repeatable); knobs not set "
                        "take the spec's first candidate value, else HardwareConfig's default")
    p.add_argument("--target", choices=["ecp5", "ice40", "xilinx"], help="synthesis target (default: the spec's)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object (the metrics row) on stdout")
    p.add_argument("--workdir", type=Path,
                   help="where logs and metrics.json go (default: results/<study>/points/<model>-<dtype>-<hash>/)")
    p.add_argument("--sim", choices=["auto", "cxxrtl", "pysim"], default="auto",
                   help="simulator (default auto: CXXRTL, or pysim when CXXRTL cannot run)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input data (default 0)")
    p.add_argument("--no-synth", action="store_true", help="skip Yosys synthesis (area fields stay null)")
    p.add_argument("--estimate", action="store_true",
                   help="compile only and print the area estimate of the shipped calibration with its measured "
                        "error (no simulation, no Yosys; docs/estimator.md)")
    p.add_argument("--export", type=Path, metavar="DIR",
                   help="also write the point's Verilog, memory files, testbench and interface to DIR "
                        "(docs/export.md); only when the point evaluates OK")
    add_bus(p)


def add_bus(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bus", default="native", metavar="BUS",
                   help="the exported top's bus: native (the design's host bus), axi-lite or wishbone (a "
                        "wrapper with a register map, an interrupt and a C driver; docs/export.md)")


def checked_bus(args: argparse.Namespace) -> str:
    """--bus, checked before any work (an unknown name: one line naming the closest)."""
    from compiler.bus.wrapper import BusError, check_bus
    try:
        return check_bus(args.bus)
    except BusError as e:
        raise CliError(f"--bus: {e}") from None


def parse_sets(sets: Sequence[str], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """`--set KNOB=VALUE` items -> knob values, each VALUE parsed as a YAML scalar and checked
    like a spec's knob values; raises CliError."""
    import difflib

    from compiler.config import HardwareConfig
    from dse.models.widths import FORMAT_KNOBS, format_range, is_format_knob
    from dse.spec import OFF_KNOBS, PRUNE_KNOB, SpecError, check_knob_value, hardware_knobs, load_yaml
    known = HardwareConfig.knob_names() + FORMAT_KNOBS
    out: dict[str, Any] = {}
    for item in sets:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise CliError(f"--set expects KNOB=VALUE, got {item!r}")
        if not HardwareConfig.is_knob(name) and not is_format_knob(name) and name != PRUNE_KNOB:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise CliError(f"--set {item}: unknown knob {name!r}{hint}; hardware knobs: "
                           f"{HardwareConfig.known_knobs_text()}; format knobs: {', '.join(FORMAT_KNOBS)} "
                           f"(and per layer: <knob>@<layer>)")
        if name in out:
            raise CliError(f"--set {item}: knob {name!r} is set twice")
        try:
            value = load_yaml(raw, f"--set {item}")
        except SpecError as e:
            if "YAML syntax error" not in e.message:     # too deep or too large: say so
                raise CliError(str(e)) from None
            value = raw
        if value is None and name.partition("@")[0] in OFF_KNOBS:
            pass                            # `null`: the knob off, as a spec's `null` says it
        elif not isinstance(value, (str, int, float, bool)):
            raise CliError(f"--set {item}: expected a number, string or boolean, got {value!r}"
                           + (f" ({name} cannot be off)" if value is None else ""))
        if name == PRUNE_KNOB:              # the model's sparsity (dse.models.prune), not the hardware's
            from dse.models.prune import check_sparsity
            try:
                out[name] = check_sparsity(value)
            except ValueError as e:
                raise CliError(f"--set {item}: {e}") from None
            continue
        if is_format_knob(name):            # the quantiser's widths (dse.models.widths), not the hardware's
            lo, hi, what = format_range(name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise CliError(f"--set {item}: expected {what} from {lo} to {hi}, got {value!r}")
            out[name] = value
            continue
        try:
            check_knob_value(name, value)
        except (ValueError, TypeError) as e:
            raise CliError(f"--set {item}: {e}") from None
        out[name] = value
    combined = _combined_knobs(base or {}, out, sets)
    try:
        HardwareConfig.from_dict(hardware_knobs(combined))
    except (ValueError, TypeError) as e:
        raise CliError(f"illegal knob combination {hardware_knobs(combined)}: {e}") from None
    return out


def _combined_knobs(base: dict[str, Any], given: dict[str, Any], sets: Sequence[str]) -> dict[str, Any]:
    """The spec's first values with the --set ones over them, the fold knobs checked together
    (dse.spec.fold_conflict), in either order of --set: a knob given with --set that the fold
    setting would leave unused is an error naming both; one of the spec's is dropped. So is
    stage_overlap=true given where the schedule is not dataflow (dse.spec.DATAFLOW_ONLY)."""
    from dse.spec import DATAFLOW_ONLY, FOLD_AIMS, fold_conflict, unused_knobs
    combined = {**base, **given}
    for name in DATAFLOW_ONLY:
        if given.get(name, False) is not False and combined.get("schedule") != "dataflow":
            item = next((s for s in sets if s.partition("=")[0].strip() == name), name)
            raise CliError(f"--set {item}: {name}=True is how schedule='dataflow' runs its stages, and schedule is "
                           f"{combined.get('schedule', 'sequential')!r} (--set schedule=dataflow)")
    if any(a in given for a in FOLD_AIMS):     # a target given replaces the spec's other one
        combined = {k: v for k, v in combined.items() if k in given or k not in FOLD_AIMS}
    unused = set(unused_knobs(combined)) - set(given)
    at, why = fold_conflict([k for k in combined if k not in unused], [combined.get("fold", "manual")])
    if why:
        item = next((s for s in sets if s.partition("=")[0].strip() == at), None) or next(
            (s for s in sets if s.partition("=")[0].strip() == "fold"), None)
        hint = (" (--set target_interval=N or --set fold_budget=N)" if at == "fold"
                else " (--set fold=auto)" if why.endswith("set fold to auto with it") else "")
        raise CliError(f"--set {item}: {why}{hint}" if item else f"the spec's knobs with --set: {why}")
    return combined


def _check_formats(spec, model: str, dtype: str, knobs: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """A format knob given with --set applies to the point (an integer dtype of a network the tool
    quantises), and every format knob's width fits the dtype; raises CliError naming the knob,
    its value and the range."""
    from dse.models.widths import is_format_knob
    from dse.models.model import quantised_layers
    from dse.spec import FORMATS_APPLY, format_misfit, kernel_layer_names, missing_format_layer
    applies = spec.formats_apply(model, dtype)
    for name, value in knobs.items():
        if not is_format_knob(name):
            continue
        layer = name.partition("@")[2]
        missing = ""
        if applies and layer and name in given:
            m = spec.model(model)
            named = not (layer.isdigit() or layer in quantised_layers(m))    # a kernel's name: trace it
            missing = missing_format_layer(m, layer, kernel_layer_names(m, [dtype]) if named else {})
        if missing:
            raise CliError(f"--set {name}={value}: {missing}")
        if not applies and name in given:
            raise CliError(f"--set {name}={value}: {name.partition('@')[0]} {FORMATS_APPLY}; {model} {dtype} is "
                           "not one")
        why = format_misfit(name, value, dtype) if applies else ""
        if why and name in given:
            raise CliError(f"--set {name}={value}: {why}")
        if why:
            raise CliError(f"{name}={value}, the spec's first value, {why}; give one with --set {name}=N")


def run_eval(args: argparse.Namespace) -> int:
    """Exit code 0: the point evaluated OK; 1: it FAILed (the row says where and why, and is
    still printed); 2: bad usage or input (nothing evaluated)."""
    import contextlib
    import json
    from compiler.tools import cores
    from dse.evaluate import EvalContext, evaluate, json_safe
    from dse.paths import point_dir
    from dse.spec import DesignPoint, load_spec
    from dse.frozen import FrozenMap
    from dse.models.zoo import DTYPES
    spec = load_spec(args.spec)
    bus = checked_bus(args)
    if bus != "native" and not args.export:
        raise CliError("--bus goes with --export DIR")
    try:
        spec.model(args.model)
    except KeyError as e:
        raise CliError(f"--model: {e.args[0]}") from None
    if args.dtype not in spec.dtypes:
        extra = (f"; {args.dtype} is a known dtype: add it to the spec's `dtypes:` to evaluate it"
                 if args.dtype in DTYPES else "")
        raise CliError(f"--dtype: unknown dtype {args.dtype!r} for study {spec.study!r}; "
                       f"the spec's dtypes: {', '.join(spec.dtypes)}{extra}")
    if args.dtype not in spec.model_dtypes(args.model):
        raise CliError(f"--dtype: model {args.model!r} runs {', '.join(spec.model_dtypes(args.model))} only (its "
                       f"dtypes: in the spec)")
    if spec.refused_dtype(args.model, args.dtype):
        raise CliError(f"--dtype: {spec.refused_dtype(args.model, args.dtype)}")
    base = {k.name: k.values[0] for k in spec.knobs}
    given = parse_sets(args.sets, base)
    knobs = {**base, **given}
    _check_formats(spec, args.model, args.dtype, knobs, given)
    target = args.target or str(spec.target)
    point = DesignPoint(args.model, args.dtype, FrozenMap(knobs))
    workdir = args.workdir or point_dir(spec=spec, point=point, target=target, seed=args.seed)
    ctx = EvalContext.from_spec(spec, target=target, data_seed=args.seed, sim_backend=args.sim,
                                synthesize=not args.no_synth, overlap=cores() > 1)

    if args.estimate:
        return _print_estimate(ctx, point, args)

    def log(line: str) -> None:
        if not args.json:
            print(f"[{args.model} {args.dtype}] {line}", file=sys.stderr, flush=True)

    with contextlib.redirect_stdout(sys.stderr):      # stdout carries only the result
        metrics = evaluate(ctx, point, workdir, log=log)
    row = metrics.as_row()
    if args.json:
        print(json.dumps(json_safe(row)))
    else:
        print(format_metrics(row))
    if not metrics.ok:
        if args.export:
            print(f"error: not exported to {args.export}: the point FAILed in {metrics.stage}", file=sys.stderr)
        return EXIT_GATE_FAILED
    if args.export:
        from dse.export import export_point
        exp = _guarded(lambda: export_point(model=spec.model(args.model), point=point, out_dir=args.export,
                                            data_seed=args.seed, sim_backend=args.sim, measured=row, bus=bus))
        if exp is None:
            return EXIT_GATE_FAILED
        print(_exported(exp), file=sys.stderr if args.json else sys.stdout)   # stdout: only the JSON row
    return EXIT_OK


def _print_estimate(ctx, point, args: argparse.Namespace) -> int:
    """`dse eval --estimate`: the point compiled and its area estimated (dse.fidelity.estimate_point)."""
    import contextlib
    import json
    from dse.fidelity import estimate_point
    if args.export:
        raise CliError("--export needs the evaluated point: leave out --estimate")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            est = estimate_point(ctx, point)
    except ValueError as e:
        raise CliError(f"--estimate: {e}") from None
    except Exception as e:                       # noqa: BLE001 - the point does not compile: say why
        print(f"error: {point.model} {point.dtype}: does not compile: {type(e).__name__}: {e}".splitlines()[0],
              file=sys.stderr)
        return EXIT_GATE_FAILED
    if args.json:
        print(json.dumps(est.as_row()))
    else:
        print("\n".join(est.lines()))
    return EXIT_OK


def format_metrics(row: dict[str, Any]) -> str:
    """A readable table of one metrics row."""
    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.2f}" if abs(v) >= 0.01 or v == 0 else f"{v:.3g}"
        if isinstance(v, dict):
            return ", ".join(f"{k}={x}" for k, x in v.items()) or "-"
        return str(v)
    groups = [
        ("point", ["model", "dtype", "params", "knobs", "target", "status", "stage", "error", "log_path"]),
        ("cycles", ["cycles", "cycles_model", "correct", "max_abs_err", "check_rule"]),
        ("area", ["luts", "ffs", "bram", "lutram", "dsp"]),
        ("timing", ["fmax_estimate_mhz", "fmax_estimate_path", "fmax_mhz", "latency_us", "samples_per_s",
                    "pnr_device", "pnr_speed_grade", "pnr_critical_path", "pnr_failing_endpoints", "pnr_tns_ns"]),
        ("overflow", ["acc_bits_required", "overflow_safe", "max_magnitude", "overflow_confirmed", "saturated"]),
        ("accuracy", ["accuracy", "accuracy_float", "agreement", "logit_mean_err", "logit_max_err", "samples",
                      "quantization"]),
        ("seconds", ["compile_s", "simulate_s", "overflow_s", "accuracy_s", "synth_s", "total_s"]),
        ("provenance", ["sim_backend", "yosys_version", "synth_script", "tinygrad_version", "data_seed",
                        "workdir", "notes"]),
    ]
    width = max(len(k) for _, keys in groups for k in keys)
    lines = []
    for title, keys in groups:
        if title == "accuracy" and row.get("samples") is None:
            continue                # no data: the point has no accuracy to show
        lines.append(f"{title}:")
        for k in keys:
            if k in ("stage", "error", "log_path", "notes") and not row.get(k):
                continue
            lines.append(f"  {k:<{width}}  {fmt(row.get(k))}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# dse export RESULTS_DIR --trial N --out DIR [--spec SPEC] [--sim B] [--top NAME]

def add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, help="a sweep's results folder, results/<study>/")
    p.add_argument("--trial", type=int, required=True, metavar="N", help="the trial number (trials.csv `number`)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="the folder to write (created)")
    p.add_argument("--spec", metavar="SPEC",
                   help="the spec the sweep ran (default: the models recorded in the folder's study.journal)")
    p.add_argument("--sim", choices=["auto", "cxxrtl", "pysim"], default="auto",
                   help="simulator giving the testbench's expected outputs (default auto: CXXRTL, else pysim)")
    p.add_argument("--top", default="tinyhw_top", help="the Verilog top module's name (default tinyhw_top)")
    add_bus(p)
    p.add_argument("--bitstream", metavar="PART",
                   help="also build an ECP5 bitstream for PART (e.g. LFE5U-25F, 45k, 85k; target ecp5 only)")
    p.add_argument("--package", metavar="PKG", help="the bitstream's package (default: the part's first with enough pins)")
    p.add_argument("--lpf", type=Path, metavar="FILE",
                   help="pin constraints for the bitstream (default: nextpnr places the ports on any IO)")
    recorded = " (default: the one the trial's Fmax was measured with, else nextpnr's)"
    p.add_argument("--router", metavar="R", help="the bitstream's nextpnr router, router1 or router2" + recorded)
    p.add_argument("--placer", metavar="P", help="the bitstream's nextpnr placer, heap or static" + recorded)
    p.add_argument("--pnr-seed", type=int, metavar="N", help="the bitstream's nextpnr seed" + recorded)
    p.add_argument("--freq-mhz", type=_positive_float, metavar="MHZ",
                   help="the target clock nextpnr aims at for the bitstream" + recorded)


BITSTREAM_SETTINGS = {"router": "router", "placer": "placer", "pnr_seed": "seed", "freq_mhz": "freq_mhz"}
"""`dse export` flag (argparse dest) -> the nextpnr setting it overrides (TimingSpec's field)."""


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def bitstream_settings(args: argparse.Namespace, row: Mapping[str, Any]) -> dict[str, Any]:
    """nextpnr's settings for `--bitstream`: each given flag, else what the trial's Fmax was
    measured with (its row's pnr_router ... pnr_freq_mhz), else nextpnr's default; so the
    bitstream closes timing as the sweep found it would."""
    from compiler.pnr.timing import check_options
    from dse.export import recorded_pnr_settings, row_flag
    from dse.spec import TimingSpec
    given = {k: getattr(args, flag) for flag, k in BITSTREAM_SETTINGS.items() if getattr(args, flag) is not None}
    out = {**TimingSpec().options(), **recorded_pnr_settings(row), **given}
    # the route the row kept: a repair's is one nextpnr run with the ripup at the clock it aimed at
    del out["repair"]
    out["ripup"] = row_flag(row.get("pnr_ripup"))
    try:
        check_options(out["router"], out["placer"])
    except ValueError as e:
        raise CliError(f"--bitstream: {e}") from None
    return out


def run_export(args: argparse.Namespace) -> int:
    """Exit code 0: exported; 1: a tool failed (the message names it and its log); 2: bad input."""
    from dse.export import ExportError, export_point, find_trial
    from dse.spec import load_spec
    spec = load_spec(args.spec) if args.spec else None
    bus = checked_bus(args)
    settings_given = any(getattr(args, flag) is not None for flag in BITSTREAM_SETTINGS)
    if not args.bitstream and (args.package or args.lpf or settings_given):
        raise CliError("--package, --lpf, --router, --placer, --pnr-seed and --freq-mhz go with --bitstream PART")
    try:
        trial = find_trial(args.results, number=args.trial, spec=spec)
    except ExportError as e:
        raise CliError(str(e)) from None
    if args.bitstream:
        from compiler.devices import find_device
        if trial.measured.get("target") != "ecp5":
            raise CliError(f"--bitstream: trial {args.trial} targets {trial.measured.get('target')}; "
                           "bitstreams are built for target ecp5 only")
        try:
            find_device("ecp5", args.bitstream)
        except ValueError as e:
            raise CliError(f"--bitstream: {e}") from None
        pnr = bitstream_settings(args, trial.measured)          # bad settings: refused before any work
    exp = _guarded(lambda: export_point(model=trial.model, point=trial.point, out_dir=args.out,
                                        data_seed=trial.data_seed, sim_backend=args.sim, measured=trial.measured,
                                        top=args.top, source={"results": str(args.results), "trial": trial.number},
                                        bus=bus))
    if exp is None:
        return EXIT_GATE_FAILED
    print(_exported(exp))
    if args.bitstream:
        from compiler.pnr.bitstream import write_bitstream
        bit = _guarded(lambda: write_bitstream(design=exp.design, out_dir=args.out, device=args.bitstream,
                                               package=args.package, lpf=args.lpf, name=args.top, bus=bus, **pnr))
        if bit is None:
            return EXIT_GATE_FAILED
        fmax = f"{bit.fmax_mhz:.1f} MHz" if bit.fmax_mhz else "Fmax not reported"
        pins = "pins from the LPF" if bit.constrained else "pins unconstrained: give --lpf for a board"
        how = (f"nextpnr {pnr['router']}, {pnr['placer']} placer, seed {pnr['seed']}, target {pnr['freq_mhz']:g} MHz"
               + (", copies regrouped by a first placement" if pnr.get("regroup") else "")
               + (", timing-driven ripup" if pnr.get("ripup") else ""))
        print(f"bitstream {bit.path} ({bit.device} {bit.package}, {fmax}; {how}; {pins})")
    return EXIT_OK


def _guarded(run: Callable[[], Any]) -> Any:
    """Run an export step: bad input raises CliError (exit 2); a failing tool is reported on
    stderr and gives None (exit 1)."""
    from compiler.tools import ToolError
    from dse.export import ExportError
    try:
        return run()
    except (ExportError, ValueError) as e:
        raise CliError(f"export: {e}") from None
    except ToolError as e:
        print(f"error: export: {e.tool}: {e.reason}" + (f" (log: {e.log_path})" if e.log_path else ""), file=sys.stderr)
        return None


def _exported(exp) -> str:
    bus = f" behind {exp.bus}" if exp.bus != "native" else ""
    c = "".join(f", {p.name}" for p in exp.c_files)
    return (f"exported to {exp.out_dir}{bus}: {exp.verilog.name}, {exp.testbench.name}, {exp.interface_md.name}, "
            f"{exp.interface_json.name}{c}, {len(exp.ports)} memory files in mem/ ({exp.cycles} cycles); "
            f"check it with: cd {exp.out_dir} && iverilog -g2012 -o tb.vvp {exp.verilog.name} tb.v && vvp tb.vvp")


# ---------------------------------------------------------------------------------------------
# dse sweep SPEC [--n-jobs N] [--storage URL] [--trials N] [--fresh] [--no-cache] ...

def add_study_options(p: argparse.ArgumentParser, *, cache_help: str) -> None:
    """The options `dse sweep` and `dse worker` share (both fill a SweepOptions from them)."""
    p.add_argument("--trials", type=int, metavar="N", help="trial budget (default: the spec's search.trials)")
    p.add_argument("--no-cache", action="store_true", help="evaluate every point, ignoring the evaluation cache")
    p.add_argument("--cache-dir", type=Path, metavar="DIR", help=cache_help)
    p.add_argument("--sim", choices=["auto", "cxxrtl", "pysim"], default="auto",
                   help="simulator (default auto: CXXRTL, or pysim when CXXRTL cannot run)")
    p.add_argument("--data-seed", type=int, default=0, metavar="N", help="seed of the random input data (default 0)")


def add_sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="path of the YAML spec")
    p.add_argument("--n-jobs", type=int, default=1, metavar="N",
                   help="worker processes sharing the study (default 1)")
    p.add_argument("--storage", metavar="URL",
                   help="an Optuna storage URL (sqlite:///x.db, postgresql://...) or a journal file path "
                        "(default: a journal file, results/<study>/study.journal)")
    p.add_argument("--results", type=Path, default=Path("results"), metavar="DIR",
                   help="outputs go to DIR/<study>/ (default: results)")
    p.add_argument("--fresh", action="store_true", help="delete the study from the storage and start over")
    add_study_options(p, cache_help="the evaluation cache (default: $TINYHW_CACHE/evals, TINYHW_CACHE "
                                    "defaulting to ~/.cache/tinyhw)")
    p.add_argument("--progress", choices=["auto", "bar", "lines", "off"], default="auto",
                   help="a bar on a terminal, a line per trial otherwise (default auto)")


def run_sweep(args: argparse.Namespace) -> int:
    """Exit code 0: the study is complete; 1: it is complete but has no feasible point, or a
    worker crashed; 2: bad input; 130: interrupted (what finished is kept: re-run to resume)."""
    from dse.spec import load_spec
    from dse.sweep import SweepError, SweepOptions, sweep
    spec = load_spec(args.spec)
    if args.n_jobs < 1:
        raise CliError(f"--n-jobs: expected a positive integer, got {args.n_jobs}")
    if args.trials is not None and args.trials < 1:
        raise CliError(f"--trials: expected a positive integer, got {args.trials}")
    options = SweepOptions(results_root=args.results, storage=args.storage, n_jobs=args.n_jobs,
                           trials=args.trials, fresh=args.fresh, use_cache=not args.no_cache,
                           cache_dir=args.cache_dir, sim_backend=args.sim, data_seed=args.data_seed,
                           progress=args.progress)
    try:
        r = sweep(spec, options)
    except SweepError as e:
        raise CliError(str(e)) from None
    print(f"study {r.study!r}: {r.evaluated}/{r.budget} trials; this run {r.ran} in {r.seconds:.1f} s "
          f"({r.cached} from the cache, {r.failed} failed); {r.feasible} feasible, "
          f"{r.pareto} Pareto-optimal points")
    if r.fidelity_report:
        print(r.fidelity_report)
    if spec.synthesis == "units":
        print("area by per-unit synthesis (synthesis: units): each distinct float unit synthesised once and "
              "counted per instance; LUTs are those of a synthesis keeping the units as modules, not a flat one "
              "(docs/synthesis.md)")
    if spec.synthesis == "kernels":
        print("area by per-kernel synthesis (synthesis: kernels): each kernel synthesised on its own and the "
              "counts summed; LUTs are those of a synthesis keeping the kernels as modules, not a flat one "
              "(docs/synthesis.md)")
    for f in r.files:
        print(f"  {f}")
    for line in not_applicable_lines(spec):
        print(line)
    for e in r.worker_errors:
        print(f"error: a worker stopped: {e.strip().splitlines()[-1]}", file=sys.stderr)
    if r.interrupted:
        print("interrupted: finished trials are kept; run the same command again to resume", file=sys.stderr)
        return 130
    return EXIT_GATE_FAILED if r.worker_errors or r.feasible == 0 else EXIT_OK


# ---------------------------------------------------------------------------------------------
# dse worker SPEC --storage URL [--trials N] [--no-cache] [--cache-dir DIR] ...

def add_worker(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="path of the YAML spec")
    p.add_argument("--storage", metavar="URL", required=True,
                   help="the Optuna storage every worker shares, e.g. postgresql://user:pw@host/db")
    p.add_argument("--results", type=Path, default=Path("results"), metavar="DIR",
                   help="outputs go to DIR/<study>/ when the worker finishes (default: results)")
    add_study_options(p, cache_help="the evaluation cache; a directory on a shared filesystem shares it "
                                    "between machines (default: $TINYHW_CACHE/evals)")
    p.add_argument("--heartbeat", type=int, metavar="S",
                   help="seconds between a running trial's heartbeats (default $TINYHW_HEARTBEAT_S or 10)")
    p.add_argument("--grace", type=int, metavar="S",
                   help="a running trial without a heartbeat for S seconds is failed and retried "
                        "(default $TINYHW_GRACE_S or 60; at least twice --heartbeat)")
    p.add_argument("--poll", type=float, default=2.0, metavar="S",
                   help="seconds between looks while the last trials run elsewhere (default 2)")


def run_worker(args: argparse.Namespace) -> int:
    """Exit code 0: the study is complete; 1: it is complete but has no feasible point; 2: bad
    input; 130: interrupted (the trial being evaluated is FAIL and runs again later)."""
    import os
    from dse.spec import load_spec
    from dse.sweep import SweepError, SweepOptions
    from dse.worker import GRACE_ENV, HEARTBEAT_ENV, WorkerOptions, run_worker as work
    spec = load_spec(args.spec)
    for flag, value in (("--trials", args.trials), ("--heartbeat", args.heartbeat), ("--grace", args.grace)):
        if value is not None and value < 1:
            raise CliError(f"{flag}: expected a positive integer, got {value}")
    if args.poll <= 0:
        raise CliError(f"--poll: expected a positive number of seconds, got {args.poll}")
    if args.heartbeat is not None:
        os.environ[HEARTBEAT_ENV] = str(args.heartbeat)
    if args.grace is not None:
        os.environ[GRACE_ENV] = str(args.grace)
    options = WorkerOptions(sweep=SweepOptions(results_root=args.results, storage=args.storage, trials=args.trials,
                                         use_cache=not args.no_cache, cache_dir=args.cache_dir,
                                         sim_backend=args.sim, data_seed=args.data_seed, progress="off"),
                            poll_s=args.poll)

    def line(ev: dict) -> None:
        print(f"trial {ev['number']}: {ev['model']} {ev['dtype']} {ev['knobs']} {ev['status']}"
              f"{' (cached)' if ev.get('cached') else ''} {ev['seconds']:.1f} s", file=sys.stderr, flush=True)

    try:
        r = work(spec, options, emit=line)
    except (SweepError, ValueError) as e:
        raise CliError(str(e)) from None
    print(f"study {r.study!r}: {r.evaluated}/{r.budget} trials; this worker {r.ran} in {r.seconds:.1f} s "
          f"({r.cached} from the cache, {r.failed} failed); {r.feasible} feasible, {r.pareto} Pareto-optimal points")
    for f in r.files:
        print(f"  {f}")
    if r.interrupted:
        print("interrupted: finished trials are kept; the trial cut short runs again", file=sys.stderr)
        return 130
    return EXIT_GATE_FAILED if r.feasible == 0 else EXIT_OK


# ---------------------------------------------------------------------------------------------
# dse report RESULTS_DIR / dse check RESULTS_DIR [--gate FILE] [--baseline DIR] [--tolerance PCT]

def add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, help="a sweep's results folder, results/<study>/")
    p.add_argument("--accuracy-loss", type=float, default=1.0, metavar="POINTS",
                   help="name the smallest number format whose accuracy is at most this many percentage points "
                        "below the float model's (default 1)")


def run_report(args: argparse.Namespace) -> int:
    from dse.report import ReportError, load_study_results, write_report
    if not 0 <= args.accuracy_loss <= 100:
        raise CliError(f"--accuracy-loss: expected percentage points from 0 to 100, got {args.accuracy_loss:g}")
    try:
        results = load_study_results(args.results)
        files = write_report(results, accuracy_loss=args.accuracy_loss / 100)
    except ReportError as e:
        raise CliError(str(e)) from None
    if results.mixed_code:
        print(f"warning: {results.mixed_code}", file=sys.stderr)
    print(f"{files[-1]} ({len(files)} files in {files[-1].parent})")
    return EXIT_OK


def add_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, help="a sweep's results folder, results/<study>/")
    p.add_argument("--gate", type=Path, metavar="FILE",
                   help="thresholds: a spec with a `gate:` section, or a file with that section's syntax")
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="an earlier results folder (its trials.csv or pareto.csv): its Pareto points must "
                        "still be matched and the hypervolume must not shrink")
    p.add_argument("--tolerance", type=float, default=0.0, metavar="PCT",
                   help="how much worse (percent) a point or the hypervolume may get against the baseline (default 0)")


def run_check(args: argparse.Namespace) -> int:
    """Exit code 0: every check holds; 1: a regression (the Markdown table says which); 2: bad input."""
    from dse.check import CheckError, check
    from dse.report import ReportError
    try:
        outcome = check(args.results, gate=args.gate, baseline=args.baseline, tolerance=args.tolerance)
    except (CheckError, ReportError) as e:
        raise CliError(str(e)) from None
    print(outcome.markdown)
    if not outcome.passed:
        n = len(outcome.regressions)
        print(f"dse check: {n} regression{'s' * (n != 1)} (table in {args.results / 'check.md'})", file=sys.stderr)
        return EXIT_GATE_FAILED
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# dse dashboard RESULTS [--host H] [--port P]

def add_dashboard(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", help="a sweep's results folder (results/<study>/), its study.journal, or a storage "
                                   "URL (postgresql://...)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")


def run_dashboard(args: argparse.Namespace) -> int:
    from dse.dashboard import DashboardError, serve, storage_location
    from dse.study.options import SweepError
    if not 0 < args.port < 65536:
        raise CliError(f"--port: expected 1 to 65535, got {args.port}")
    try:
        location = storage_location(args.results)
        print(f"optuna-dashboard on http://{args.host}:{args.port}/ (Ctrl-C stops it)", file=sys.stderr)
        serve(location, host=args.host, port=args.port)
    except (DashboardError, SweepError) as e:
        raise CliError(str(e)) from None
    except KeyboardInterrupt:
        pass
    return EXIT_OK


COMMANDS: list[Command] = [
    Command("validate", "check a spec and print a one-line summary", add_validate, run_validate),
    Command("models", "list the model zoo with its parameters and defaults", add_models, run_models),
    Command("layers", "list each model's layers (kernels), the names per-layer knobs take", add_layers, run_layers),
    Command("eval", "evaluate one design point (model x dtype x knob values) and print its metrics", add_eval, run_eval),
    Command("sweep", "explore a spec's design space with Optuna (cached, resumable, parallel) and write "
                     "trials.csv, pareto.csv, pareto.md", add_sweep, run_sweep),
    Command("worker", "join a study in a shared database (--storage postgresql://...) and evaluate its "
                      "trials until the budget is spent; run one per machine", add_worker, run_worker),
    Command("export", "write a sweep trial's Verilog, memory files, self-checking testbench and interface "
                      "description into a folder (docs/export.md)", add_export, run_export),
    Command("report", "write Pareto tables, cycles-vs-LUTs plots, cycle breakdowns and an HTML page "
                      "into results/<study>/report/", add_report, run_report),
    Command("check", "gate a sweep's results on thresholds and a baseline (exit 1 on a regression) "
                     "and print a Markdown table of the regressions", add_check, run_check),
    Command("dashboard", "serve optuna-dashboard on a study's storage (the journal opened with the sweep's "
                         "lock, so it may stay open while the study runs)", add_dashboard, run_dashboard),
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
    except BrokenPipeError:                     # `dse ... | head`: the reader left; not an error of ours
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

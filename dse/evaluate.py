"""Evaluate one design point: model x dtype x knob values -> one honest row of metrics.

Long, and one thing: the stages of one evaluation, in order, with the checks each makes
(compare against the reference, the overflow proof, the simulator choice).

    metrics = evaluate(spec, DesignPoint("gemv_128x784", "int8", FrozenMap({"mem_read": "sync"})), workdir)
    metrics.status, metrics.cycles, metrics.luts, metrics.as_row()

`evaluate` is the unit of work the explorer repeats. It never raises for a problem with the
point itself: a failure in any stage gives `Metrics` with status FAIL, the stage, the
exception type and a one-line reason (with the log path when a tool failed), and keeps every
metric computed before the failure (cycles survive a synthesis timeout). The stages, in order:

    config      the knob values -> HardwareConfig (an illegal combination fails here)
    build       the model for the dtype, seeded inputs in the spec's range, tinygrad forward
    compile     compile_model; `cycles_model` = design.cycle_model().total (analytic), and
                `cycle_breakdown` its parts as JSON (cycles per kernel run, cycles in copies);
                `features`: what dse.estimate's area model reads (JSON, no hardware built)
    overflow    compiler.overflow's static range analysis over the design, for the inputs'
                ranges -> `acc_bits_required`, `overflow_safe`, `max_magnitude` (floats)
    simulate    CXXRTL when it works (else the Python simulator; `sim_backend` says which ran).
                With EvalContext.simulate off (multi-fidelity's cheap tier) the evaluation
                ends before this stage: no simulation, checks, accuracy or synthesis
    check       outputs against the reference -> `correct`, `max_abs_err`; simulated
                `cycles` must equal `cycles_model` exactly (a difference is a compiler bug)
    confirm     the worst-case inputs of the analysis, simulated and checked against the
                reference -> `overflow_confirmed` (see `_Proof`)
    synthesize  Yosys for the target (`stat -json`) -> luts, ffs, bram, lutram, dsp (`fidelity`
                "synth", or "synth_units" with the spec's `synthesis: units`, which synthesises
                each distinct float unit once and counts it per instance: `synth_units` says how
                many instances; "synth_kernels" with `synthesis: kernels`, each kernel on its own,
                in parallel; dse.fidelity fills "estimate" rows of points it does not
                synthesise); limited to `stage_timeout_s` (a timeout is a ToolError, so a FAIL
                with the log tail). With EvalContext.overlap it starts before `simulate`, in a
                thread, and this stage reads its result (`_EarlySynthesis`)

Every stage runs under `stage_timeout_s`: the tool stages through the tools' own timeout, the
others (the user's model code, the compiler, the simulators) through dse.limits.time_limit. A
stage past its limit is a FAIL naming the stage, and is not cached (a later run may allow more).
    netlist     only with `timing: {check_netlist: true}`: the netlist the timing stage places
                (after compiler/pnr's packers) runs the design's exported testbench in Icarus
                Verilog (compiler.pnr.gate_sim) -> netlist_check, its PASS line; a FAIL line
                fails the point here (its Fmax would be a wrong design's); so does a netlist the
                cell models cannot check (named), or Icarus missing
    timing      only with `timing: true` in the spec (EvalContext.timing): nextpnr places and
                routes the netlist of the same Yosys run (compiler.pnr.timing) on a device chosen for
                its size -> fmax_mhz, latency_us = cycles / fmax_mhz, pnr_device, pnr_package.
                A design that no device can hold is *not* a failure: `fits` is false, fmax_mhz
                and latency_us stay None, and `error` says which resource ran out (status OK,
                stage "timing"), so an explorer treats it as an infeasible point.

A wrong output, a cycle count that differs from the model, or worst-case outputs that differ
from the reference make the point FAIL (stage "check" or "confirm") but the later stages
still run, so the row is complete for debugging. An exception stops the evaluation.
`overflow_safe` false is *not* a failure: it is a metric (and a constraint for the explorer).
Where the dtype itself wraps (int32) or a float overflows to inf, the hardware still computes
what the reference computes. Where a knob makes an accumulator register narrower than its
dtype and the proof says it can overflow, outputs may differ from the reference: `correct` is
then false, the point stays OK and `notes` say why.

The correctness rule (`check_rule` in the row):
  * integers: bit-exact against the numpy golden model of the zoo (`zoo.reference`) or, for a
    user model, tinygrad's own result (`zoo.tinygrad_result`; integers are exact there).
  * floats from zoo models with IEEE float units (knobs fp_rounding=rne, fp_subnormals=keep,
    the defaults): bit-exact against the numpy golden model in KERNEL arithmetic (every op
    rounds to its dtype, as the lowered kernel is written). Bit-exact means equal values with
    equal signs (so -0.0 != +0.0); any NaN equals any NaN.
  * floats otherwise (user models, whose only reference is tinygrad's PYTHON device, which
    fuses multiply-adds and emulates fp16; or fp_rounding=rtz / fp_subnormals=flush, which the
    golden models do not follow): every output
    within `(n + 2) * 2**-man_bits * max(1, max|reference|)` of the reference, with n the
    most terms one accumulator sums (`reduction_length`); with fp_rounding=rtz a reference
    overflow to inf counts as the format's largest finite value (what rtz gives). This is a
    tolerance, and the row says so.
`max_abs_err` is max |hardware - reference| over the outputs (0 when bit-exact; inf for a
NaN where the reference has a number).

Input data: seeded (`EvalContext.data_seed`, default 0, independent of the sampler's seed so
every trial of a study is checked on the same data) and drawn from the spec's `input_range`
for the dtype, else each input's dtype default (`zoo.default_input_range`). The same ranges
feed the overflow analysis.

Files under `workdir`: synth/ (design.il, Yosys script, yosys.log, stat.json, netlist.json
with timing), pnr/<device>/ (nextpnr.log, report.json), error.log
(the full traceback or tool log tail of a failure) and metrics.json (the row).

One module (~830 lines): the stages of one evaluation in the order they run, sharing the
point's context and its row; the stage bodies call into compiler/ and dse/models/ for the work.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import threading
import time
import traceback
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from compiler.cache import EVALS
from compiler.tools import package_version
from dse.models import zoo
from dse.estimate import design_features, fmax_estimate, too_large
from dse.limits import time_limit
from dse.spec import SYNTH_FIDELITY, DesignPoint, Spec, TimingSpec
from dse.frozen import FrozenMap
from dse.models.classes import predicted
from dse.models.model import ModelSpec, kernel_config
from dse.models.widths import quantisable

SIM_BACKENDS = ("auto", "cxxrtl", "pysim")


class Status(StrEnum):
    OK = "OK"
    FAIL = "FAIL"


STAGES = ("config", "build", "compile", "overflow", "simulate", "check", "confirm", "accuracy", "synthesize",
          "netlist", "timing")
TOOL_STAGES = ("synthesize", "netlist", "timing")


@dataclass(frozen=True)
class EvalContext:
    """What `evaluate` needs from a spec, plus how to run (`EvalContext.from_spec`)."""
    study: str
    models: FrozenMap[str, ModelSpec]
    target: str
    stage_timeout_s: float
    data_seed: int = 0
    sim_backend: str = "auto"       # auto: CXXRTL, falling back to pysim when it cannot run
    synthesize: bool = True         # False: skip Yosys (area fields stay None)
    simulate: bool = True           # False: stop after compile, cycle model and overflow proof
                                    # (multi-fidelity's cheap tier: no simulation, check, accuracy
                                    # nor synthesis)
    # place-and-route after synthesis (fmax_mhz, latency_us) with these settings; True is
    # TimingSpec()'s defaults, False or None none
    timing: TimingSpec | bool | None = None
    synthesis: str = "flat"         # "units": float units synthesised once each (spec key `synthesis`)
    golden_accuracy: bool = False   # without simulation, a trained integer network's accuracy from its
                                    # golden model (multi-fidelity's cheap tier; dse.models.accuracy)
    # synthesis started beside the simulation (in a thread: Yosys and g++ are both subprocesses) when
    # this process has a core to spare; the row is the same, its synth_s Yosys' own time
    overlap: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.timing, (TimingSpec, type(None))):
            object.__setattr__(self, "timing", TimingSpec() if self.timing else None)
        if self.sim_backend not in SIM_BACKENDS:
            raise ValueError(f"sim_backend: expected one of {', '.join(SIM_BACKENDS)}, got {self.sim_backend!r}")

    @classmethod
    def from_spec(cls, spec: Spec, *, target: str | None = None, **options: Any) -> "EvalContext":
        """The context of `spec`; `target` overrides the spec's, `options` set the other fields."""
        options.setdefault("timing", spec.timing)
        options.setdefault("synthesis", spec.synthesis)
        return cls(spec.study, FrozenMap((m.name, m) for m in spec.models), str(target or spec.target),
                   spec.stage_timeout_s, **options)

    def model(self, name: str) -> ModelSpec:
        if name not in self.models:
            raise KeyError(f"no model {name!r} in study {self.study!r}; models: {', '.join(self.models)}")
        return self.models[name]


@dataclass(frozen=True)
class Metrics:
    """Everything measured for one design point (None: not measured, e.g. after a failure)."""
    model: str
    dtype: str
    knobs: FrozenMap[str, Any]              # the full HardwareConfig when it could be built
    target: str
    status: Status = Status.OK
    stage: str | None = None                # the stage that failed
    error: str | None = None                # one line: what failed and why (+ log path)
    error_type: str | None = None           # the exception's class name, e.g. "UnsupportedError"
    log_path: str | None = None             # the failing tool's log, or workdir/error.log
    # simulation and correctness
    cycles: int | None = None
    cycles_model: int | None = None
    cycle_breakdown: str | None = None      # JSON of the cycle model: {"kernels": [[name, cycles], ...], "copies": n}
    schedule_built: str | None = None       # "sequential" or "dataflow" as built (the knob `schedule` asks; a graph
                                            # that cannot be pipelined is sequential, and a note says why)
    interval_cycles: int | None = None      # cycles between samples in steady state, measured (dataflow: a stream
                                            # of samples back to back; sequential: = cycles)
    interval_model: int | None = None       # the same from the cycle model
    stage_cycles: str | None = None         # dataflow: JSON [[stage, cycles], ...]: every kernel's run and copy,
                                            # the slowest is the interval (with fold=auto: what the fold chose for)
    correct: bool | None = None
    max_abs_err: float | None = None
    ulp_vs_sequential: int | None = None    # fp_sum=tree: max ULP from tinygrad's sequential sum
    check_rule: str | None = None
    # area
    luts: int | None = None
    ffs: int | None = None
    bram: int | None = None
    lutram: int | None = None
    dsp: int | None = None
    # timing (place-and-route; only with EvalContext.timing)
    fmax_mhz: float | None = None
    latency_us: float | None = None         # cycles / fmax_mhz
    samples_per_s: float | None = None      # fmax_mhz * 1e6 / interval_cycles
    fits: bool | None = None                # False: no device holds the design (error says why)
    pnr_device: str | None = None
    pnr_package: str | None = None
    pnr_router: str | None = None           # the nextpnr settings the Fmax was measured with
    pnr_placer: str | None = None           # (spec `timing:`; `dse export --bitstream` reuses them)
    pnr_seed: int | None = None
    pnr_freq_mhz: float | None = None       # the target clock given to nextpnr
    pnr_regroup: bool | None = None         # copies' loads dealt by a first placement (compiler/pnr/replicas.py)
    pnr_repair: bool | None = None          # a route missing the clock routed again (spec timing: {repair: true})
    pnr_ripup: bool | None = None           # the row's route used nextpnr's timing-driven ripup (the repair's)
    pnr_unrepaired_fmax_mhz: float | None = None  # with a repair: the first route's Fmax (fmax_mhz: the faster)
    pnr_speed_grade: int | None = None      # the part's speed grade it was timed at (ECP5: 6, 7, 8)
    pnr_critical_path: str | None = None    # nextpnr's slowest path: ends, ns (clk-to-q, logic, routing)
    pnr_failing_endpoints: int | None = None  # ECP5: register inputs reached later than 1000 / pnr_freq_mhz ns
    pnr_tns_ns: float | None = None         # and the total of their lateness (compiler/pnr/sdf_timing.py)
    netlist_check: str | None = None        # the placed netlist's testbench run (timing: {check_netlist: true}):
                                            # its PASS or FAIL line (compiler.pnr.gate_sim)
    fmax_estimate_mhz: float | None = None  # the delay model's Fmax (compiler/timing_model.py), before synthesis
    fmax_estimate_path: str | None = None   # and its slowest path
    # overflow
    acc_bits_required: int | None = None
    overflow_safe: bool | None = None
    max_magnitude: float | None = None
    overflow_confirmed: bool | None = None
    saturated: int | None = None            # fp8 outputs at the format's largest magnitude (+-448 E4M3, +-57,344
                                            # E5M2), where every saturated value lands (and values rounding to it)
    # accuracy on real samples (trained networks with `data:` only; dse.models.accuracy)
    accuracy: float | None = None           # top-1 against the labels (no labels: argmax agreement with the float model)
    accuracy_float: float | None = None     # the float64 network on the same samples
    agreement: float | None = None          # fraction of samples whose argmax equals the float model's
    logit_mean_err: float | None = None     # |hardware logits (dequantised) - float logits|, mean and max
    logit_max_err: float | None = None
    samples: int | None = None              # how many samples ran (each bit-exact vs the golden model)
    quantization: str | None = None         # the int8/int16 scheme (dse.models.quantize.SCHEME)
    mean_weight_bits: float | None = None   # the quantiser's widths, mean over the conv/dense layers
    mean_act_bits: float | None = None      # (activations: the input and each requantised output)
    qat: bool | None = None                 # a trained network's point fine-tuned at its format (the model's `qat:`)
    qat_s: float | None = None              # how long the fine-tuning took (when it trained, also for a cached one)
    qat_epochs: int | None = None
    accuracy_ptq: float | None = None       # the point's accuracy before fine-tuning (post-training quantisation)
    # wall time per stage (seconds)
    compile_s: float | None = None
    simulate_s: float | None = None
    overflow_s: float | None = None
    accuracy_s: float | None = None
    synth_s: float | None = None
    pnr_s: float | None = None
    netlist_check_s: float | None = None    # the netlist's check: the export (its simulation), Yosys, Icarus
    total_s: float | None = None
    # provenance
    params: FrozenMap[str, Any] = field(default_factory=FrozenMap)
    data_seed: int = 0
    sim_backend: str | None = None
    yosys_version: str | None = None
    synth_script: str | None = None
    nextpnr_version: str | None = None
    tinygrad_version: str | None = None
    code_digest: str | None = None          # SHA-256 of every file of compiler/ and dse/ (compiler.cache.EVALS)
    cached: bool = False                    # served from the evaluation cache (dse.cache), not computed now
    workdir: str | None = None
    notes: tuple[str, ...] = ()             # e.g. why CXXRTL was not used
    # multi-fidelity search (dse.fidelity, dse.estimate)
    features: str | None = None             # JSON of dse.estimate.design_features: what the area estimate reads
    fidelity: str | None = None             # where luts/ffs/bram/lutram/dsp (and fmax) came from:
                                            # synth | synth_units | synth_kernels | estimate
    synth_units: int | None = None          # float unit (or kernel) instances counted from their own synthesis (0: flat)
    estimate_error: str | None = None       # fidelity "estimate": JSON metric -> measured relative error bound
    hv_share: float | None = None           # skipped under search.hv_tolerance: the most it could add to the front's hypervolume, relative

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def as_row(self, flat: bool = False) -> dict[str, Any]:
        """A dict of plain values for JSON or pandas. `knobs` and `params` are dicts unless
        `flat`, which spreads them into `knobs.<name>` / `params.<name>` columns (the names
        pandas.json_normalize gives). `notes` are joined with "; "."""
        row: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Mapping):
                if flat:
                    row.update({f"{f.name}.{k}": x for k, x in v.items()})
                    continue
                v = dict(v)
            elif isinstance(v, StrEnum):
                v = str(v)
            elif f.name == "notes":
                v = "; ".join(v)
            row[f.name] = v
        return row


def tinygrad_version() -> str:
    return package_version("tinygrad")


# ---------------------------------------------------------------------------------------------
# the evaluation

class NetlistMismatch(Exception):
    """The netlist synthesis made (as nextpnr gets it) does not compute what the design does."""


class _Failed(Exception):
    """A stage raised: the evaluation stops (the reason is already recorded)."""


class _Run:
    """Collects the fields of one evaluation, stage by stage."""

    def __init__(self, point: DesignPoint, target: str, workdir: Path, log: Callable[[str], None] | None,
                 time_limit_s: float | None = None):
        self.workdir, self.log = workdir, log or (lambda _msg: None)
        self.time_limit_s = time_limit_s
        self.fields: dict[str, Any] = {"model": point.model, "dtype": point.dtype, "knobs": point.knobs,
                                       "target": target, "workdir": str(workdir),
                                       "tinygrad_version": tinygrad_version(),
                                       "code_digest": EVALS.code_digest()}
        self.notes: list[str] = []

    def set(self, **values: Any) -> None:
        self.fields.update(values)

    def fail(self, stage: str, reason: str, error_type: str | None = None, log_path: str | None = None) -> None:
        """Record a failure; the first one is the one reported (later ones become notes)."""
        if self.fields.get("status") is Status.FAIL:
            self.notes.append(f"also failed in {stage}: {reason}")
            return
        self.set(status=Status.FAIL, stage=stage, error=reason, error_type=error_type, log_path=log_path)
        self.log(f"{stage}: FAIL: {reason}")

    @contextlib.contextmanager
    def stage(self, name: str, timer: str | None = None) -> Iterator[None]:
        """Run a stage: an exception becomes a FAIL with a one-line reason; the full story
        (traceback or tool log tail) goes to workdir/error.log."""
        t0 = time.perf_counter()
        self.log(f"{name} ...")
        # Yosys and nextpnr get the same limit as their own timeout (their log tail is kept)
        limit = None if name in TOOL_STAGES else self.time_limit_s
        try:
            with time_limit(limit, f"stage {name} (stage_timeout_s)"):
                yield
        except Exception as exc:              # noqa: BLE001 - every failure becomes a failed point
            if timer:
                self.set(**{timer: time.perf_counter() - t0})
            self.fail(name, _one_line(exc), type(exc).__name__, self._error_log(name, exc))
            raise _Failed from exc
        if timer:
            self.set(**{timer: time.perf_counter() - t0})

    def _error_log(self, stage: str, exc: Exception) -> str:
        tool_log = getattr(exc, "log_path", None)
        path = self.workdir / "error.log"
        try:
            path.write_text(f"stage {stage}: {type(exc).__name__}\n\n"
                            + "".join(traceback.format_exception(exc)))
        except OSError:
            return str(tool_log) if tool_log else ""
        return str(tool_log) if tool_log else str(path)

    def metrics(self, t_start: float) -> Metrics:
        self.set(total_s=time.perf_counter() - t_start, notes=tuple(self.notes))
        return Metrics(**self.fields)


def _one_line(exc: Exception) -> str:
    """The reason on one line: a ToolError's tool, reason and log; otherwise the message's
    first line."""
    from compiler.tools import ToolError
    if isinstance(exc, ToolError):
        where = f" (log: {exc.log_path})" if exc.log_path else ""
        return f"{exc.tool}: {exc.reason}{where}"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def evaluate(spec_or_context: Spec | EvalContext, point: DesignPoint, workdir: str | Path,
             log: Callable[[str], None] | None = None, *, checked: Mapping[str, Any] | None = None) -> Metrics:
    """Compile, simulate, check, analyse and synthesise one design point (see the module
    docstring); `log` receives one line per stage as it starts or fails.

    `checked`: the OK row of this point's evaluation without synthesis (the cheap fidelity of
    dse.fidelity: the same context with synthesis and timing off). Its checks are not run again:
    the design is compiled (milliseconds, needed for the netlist) and only synthesis (and place-
    and-route) run, their fields added to `checked`'s; `total_s` counts both evaluations."""
    if checked is not None and checked.get("status") != str(Status.OK):
        raise ValueError(f"checked: the row of an OK evaluation is needed, got status {checked.get('status')!r}")
    ctx = (spec_or_context if isinstance(spec_or_context, EvalContext)
           else EvalContext.from_spec(spec_or_context))
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    run = _Run(point, ctx.target, workdir, log, ctx.stage_timeout_s)
    run.set(status=Status.OK, data_seed=ctx.data_seed)
    try:
        _evaluate(ctx, point, run, checked)
    except _Failed:
        pass
    if checked is not None:
        t_start -= float(checked.get("total_s") or 0.0)
    metrics = run.metrics(t_start)
    with contextlib.suppress(OSError):
        (workdir / "metrics.json").write_text(json.dumps(json_safe(metrics.as_row()), indent=2) + "\n")
    return metrics


# fields of a `checked` row that this evaluation sets itself
_OWN_FIELDS = frozenset({"knobs", "params", "notes", "total_s", "workdir", "model", "dtype", "target", "status",
                         "compile_s"})


def _evaluate(ctx: EvalContext, point: DesignPoint, run: _Run, checked: Mapping[str, Any] | None = None) -> None:
    with run.stage("config"):
        model = point.model_of(ctx.model(point.model))
        run.set(params=model.params)
        config = point.hardware_config()
        formats = point.formats().as_dict()
        if model.trained is None or not quantisable(point.dtype):     # the point runs without them: no value
            formats = dict.fromkeys(formats)
        run.set(knobs=FrozenMap({**config.as_dict(), **formats}))
        config = kernel_config(model, point.dtype, config)     # lanes@W1: the kernel computing W1

    with run.stage("build"):
        bp = built_point(ctx, point)        # a network with `qat` is fine-tuned here (or read from its cache)
        built, arrays, real, tensors = bp.built, bp.arrays, bp.real, bp.tensors
        if model.trained is not None:
            _fine_tuning(model, point.dtype, run)
        fixed: dict[str, np.ndarray] = {}
        sample_ranges: dict[str, zoo.InputRange] = {}
        if real is not None:          # trained weights are constants; the proof covers the data as it is
            fixed = real.weights
            if real.samples is not None:
                values = real.samples.astype(np.float64)
                sample_ranges[real.data_input] = zoo.InputRange(float(values.min()), float(values.max()))

    with run.stage("compile", "compile_s"):
        # the data streams (through a dataflow design); the weights are loaded once, or built in
        design = bp.design(config)
        cm = design.cycle_model()
        run.set(cycles_model=cm.total, cycle_breakdown=json.dumps({"kernels": [list(k) for k in cm.kernels],
                                                                   "copies": cm.copies}),
                schedule_built=design.schedule, interval_model=cm.interval,
                stage_cycles=json.dumps([list(s) for s in design.flow.stage_cycles]) if design.flow else None)
        if design.schedule_note:
            run.notes.append(design.schedule_note)
        if design.mul_note:
            run.notes.append(design.mul_note)
        if design.flow is not None and any(design.flow.spills):
            spilled = [f"{k.name} {n}" for k, n in zip(design.kernels, design.flow.spills) if n]
            run.notes.append(f"stage_overlap: stages take their next sample while their pipelines drain; the stores "
                             f"of {', '.join(spilled)} beat(s) late, so a sample takes {design.flow.depth} beats of "
                             f"{design.flow.beat} cycles")
        if design.constants and design.config.adder_graph == "auto":
            # what `auto` built depends on whether da4ml is installed: the row says which
            from compiler.passes.adder_graph import resolve_style
            run.notes.append(f"adder_graph auto: {resolve_style('auto')} (constant layers)")
        features = design_features(design, target=ctx.target)
        run.set(features=json.dumps(features))
        estimate = fmax_estimate(design, features, ctx.target)
        run.set(fmax_estimate_mhz=round(estimate.fmax_mhz, 1), fmax_estimate_path=estimate.where)
        if config.target_mhz and estimate.fmax_mhz < 0.9 * config.target_mhz:
            if estimate.placement:
                run.notes.append(f"target_mhz {config.target_mhz:g} is above what placement allows a design of this "
                                 f"size (~{estimate.fmax_mhz:.0f} MHz, docs/timing.md): the registers placed for it "
                                 f"past that cost cycles without buying clock; a lower target_mhz may give less latency")
            else:
                # a path registers cannot cut further (a float unit at its most stages, a block's
                # own delay): said before any synthesis, not found after place-and-route
                run.notes.append(f"target_mhz {config.target_mhz:g} is above what the design's slowest path allows "
                                 f"(~{estimate.fmax_mhz:.0f} MHz: {estimate.where}): no register the compiler places "
                                 f"cuts it further, so the model expects the design to close below the target "
                                 f"(it can err either way: docs/timing.md)")

    if checked is not None:         # checked at the cheap fidelity: synthesis only
        names = {f.name for f in dataclasses.fields(Metrics)} - _OWN_FIELDS
        run.set(**{k: v for k, v in checked.items() if k in names})
        run.notes.extend(n for n in (checked.get("notes") or "").split("; ") if n)
        _synthesis(ctx, run, design)
        return

    proof = _Proof(run, design, built, tensors, model.input_range(point.dtype), fixed, sample_ranges, arrays)
    proof.analyze()
    if ctx.golden_accuracy and model.trained is not None and quantisable(point.dtype):
        # the accuracy run_samples would report, since it fails the point unless the hardware
        # equals the golden model on every sample; the point is simulated and checked if it is
        # ever synthesised (dse.fidelity)
        with run.stage("accuracy", "accuracy_s"):
            from dse.models.accuracy import golden_samples
            r = golden_samples(trained=model.trained, dtype=point.dtype)
            run.set(accuracy=r.accuracy, accuracy_float=r.accuracy_float, agreement=r.agreement,
                    logit_mean_err=r.mean_abs_err, logit_max_err=r.max_abs_err, samples=r.samples,
                    quantization=r.quantization, mean_weight_bits=r.mean_bits[0], mean_act_bits=r.mean_bits[1])
        run.notes.append("not simulated (the cheap fidelity): cycles from the cycle model, accuracy from the golden "
                         "model (the hardware is checked against it on every sample when synthesised)")
        return
    if not ctx.simulate:            # and so never synthesised either: no unchecked design gets area
        run.notes.append("not simulated (the cheap fidelity): cycles from the cycle model, outputs not checked")
        return

    early = _EarlySynthesis.start(ctx, run, design) if ctx.overlap else None
    try:
        _check(ctx, model, point, run, design, config, built, arrays, tensors, proof)
        _synthesis(ctx, run, design, early)
    finally:
        if early is not None:       # read by then unless a stage raised
            early.cancel()


def _check(ctx: EvalContext, model: ModelSpec, point: DesignPoint, run: _Run, design, config, built, arrays,
           tensors, proof: "_Proof") -> None:
    """The simulate, check, confirm and accuracy stages."""
    def fell_back(why: str) -> None:
        run.notes.append(f"CXXRTL unavailable, simulated with pysim: {why}")
        run.log(f"simulate: CXXRTL unavailable ({why}); using pysim")
    sim = Simulator(ctx.sim_backend, fell_back)
    with run.stage("simulate", "simulate_s"):
        result = sim.run(design, None)
        run.set(cycles=result.cycles, sim_backend=sim.backend, interval_cycles=result.cycles)
        if design.flow is not None:       # the interval as measured: three samples back to back
            from compiler import simulate_many
            stream = simulate_many(design, [{}] * 3, backend=sim.backend)
            run.set(interval_cycles=stream[-1].interval)
            if any(not all(np.array_equal(a, b) for a, b in zip(r.outputs, result.outputs)) for r in stream):
                run.fail("simulate", "compiler bug: a sample streamed behind others gave other outputs than alone")

    with run.stage("check"):
        checker = _Checker(model, built, point.dtype, design, config)
        run.set(check_rule=checker.rule)
        correct, err = checker.compare(result.outputs[0], checker.reference(arrays))
        run.set(correct=correct, max_abs_err=err, saturated=saturated_outputs(result.outputs[0], point.dtype))
        if checker.tree > 1:        # fp_sum=tree: how far the tree order lands from tinygrad's
            run.set(ulp_vs_sequential=ulp_distance(result.outputs[0], checker.sequential(arrays), point.dtype))
    if not correct and proof.narrowed_unsafe:
        run.notes.append(f"outputs differ from the reference (max abs error {err:g}): {proof.narrowed_unsafe}")
    elif not correct:
        run.fail("check", f"outputs differ from the reference ({checker.rule}); max abs error {err:g}")
    if result.cycles != run.fields["cycles_model"]:
        run.fail("check", f"compiler bug: simulated {result.cycles} cycles but the cycle model says "
                          f"{run.fields['cycles_model']}")
    if run.fields.get("interval_cycles") != run.fields["interval_model"]:
        run.fail("check", f"compiler bug: a stream of samples came {run.fields.get('interval_cycles')} cycles "
                          f"apart but the cycle model says {run.fields['interval_model']}")

    proof.confirm(sim, checker)

    has_data = model.trained is not None or (model.files is not None and model.files.data is not None)
    if has_data and run.fields.get("status") is Status.OK:
        with run.stage("accuracy", "accuracy_s"):
            _accuracy(model, point=point, config=config, sim=sim, run=run, design=design, tensors=tensors, checker=checker)


def _too_large(ctx: EvalContext, run: _Run) -> str:
    """Why the point is too large to synthesise for the target by its features ('' if it is not)."""
    return too_large(json.loads(run.fields.get("features") or "{}"), ctx.target) if ctx.synthesize else ""


def _synthesis_mode(ctx: EvalContext) -> str:
    return "flat" if ctx.timing else ctx.synthesis           # place-and-route needs a flat netlist


def _synthesize(ctx: EvalContext, run: _Run, design):
    from compiler.synth.area import synthesize
    mode = _synthesis_mode(ctx)
    return synthesize(design, ctx.target, run.workdir / "synth", timeout=ctx.stage_timeout_s,
                      netlist=ctx.timing is not None, units=mode == "units", kernels=mode == "kernels")


class _EarlySynthesis:
    """A point's synthesis in a thread while the main thread simulates and checks it
    (EvalContext.overlap): Yosys is a subprocess, as the simulator's g++ is, so on a core the
    sweep leaves idle the two overlap and a point takes about the longer of them, not their sum.
    The main thread converts the design to RTLIL first: the thread finds the text in
    compiler.synth.rtlil_text's memo and never elaborates Amaranth itself. Its result is read
    by the synthesize stage, in order, so the row is the one a sequential run writes."""

    def __init__(self, ctx: EvalContext, run: _Run, design):
        self.area, self.error, self.seconds = None, None, 0.0
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._work, args=(ctx, run, design), daemon=True,
                                        name="early-synthesis")
        self._thread.start()
        run.log("synthesize: started beside the simulation")

    @classmethod
    def start(cls, ctx: EvalContext, run: _Run, design) -> "_EarlySynthesis | None":
        """The synthesis started, or None where the point is not synthesised or its design does
        not convert (the stage that converts it next reports that, as without overlap)."""
        from compiler.synth import rtlil_text
        if not ctx.synthesize or _too_large(ctx, run):
            return None
        try:
            rtlil_text.convert(design.top, name="top")
        except Exception:       # noqa: BLE001 - reported by the stage that converts it next
            return None
        return cls(ctx, run, design)

    def _work(self, ctx: EvalContext, run: _Run, design) -> None:
        from compiler.tools import CANCEL
        CANCEL.set(self._cancel)        # this thread's own context: cancel() kills its Yosys
        t0 = time.perf_counter()
        try:
            self.area = _synthesize(ctx, run, design)
        except Exception as exc:     # noqa: BLE001 - re-raised in the synthesize stage
            self.error = exc
        self.seconds = time.perf_counter() - t0

    def cancel(self) -> None:
        """Stop the synthesis if it still runs (a stage before it raised: nothing will read it)."""
        self._cancel.set()
        self._thread.join()

    def result(self):
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.area


def _synthesis(ctx: EvalContext, run: _Run, design, early: _EarlySynthesis | None = None) -> None:
    """The synthesize stage (of `early` if it started beside the simulation), then timing (if asked)."""
    if why := _too_large(ctx, run):
        run.set(fits=False, stage="synthesize", error=why)      # an infeasible point, not hours of Yosys
        run.log(f"synthesize: {why}")
        return
    if ctx.synthesize:
        mode = _synthesis_mode(ctx)
        try:
            with run.stage("synthesize", "synth_s"):
                area = early.result() if early is not None else _synthesize(ctx, run, design)
                run.set(luts=area.luts, ffs=area.ffs, bram=area.bram, lutram=area.lutram, dsp=area.dsp,
                        fidelity=SYNTH_FIDELITY[mode], synth_units=area.units,
                        yosys_version=area.yosys_version, synth_script=area.script.strip().replace("\n", "; "))
        finally:
            if early is not None:   # Yosys' own time (failed or not), not the wait after the simulation
                run.set(synth_s=early.seconds)
        if area.cached:
            run.notes.append("synthesis from the synthesis cache (this netlist was synthesised before)")
        if area.fallback:
            run.notes.append(area.fallback)
        if ctx.timing:
            _timing(ctx, run, area.netlist_path, design)
    elif ctx.timing:
        run.notes.append("timing skipped: it needs synthesis, which is off")


class BuiltPoint:
    """A point's model built for its dtype and formats, its seeded inputs and its trace: what
    every hardware-knob setting of it shares (the build stage's work and compiler.trace_model),
    kept per process by `built_point` so a sweep traces a model once for all its lanes,
    reduce_unroll, pipelining ... settings, and a point's cache key and its evaluation share
    one compile (`design`)."""

    def __init__(self, model: ModelSpec, dtype: str, data_seed: int):
        self.model, self.dtype = model, dtype
        self.built = model.build(dtype)
        self.arrays, self.real = point_arrays(model, dtype, self.built, data_seed)
        self.tensors = zoo.input_tensors(self.built, self.arrays)
        self._traced = None
        self._designs: dict[str, Any] = {}

    def traced(self):
        from compiler import trace_model
        if self._traced is None:
            b = self.built
            self._traced = trace_model(b.forward(*self.tensors),
                                       stream=streamed_inputs(self.model, self.dtype, b, self.tensors),
                                       input_ranges=declared_input_ranges(self.model, self.dtype, b, self.tensors,
                                                                          self.real))
        return self._traced

    def design(self, config):
        """The Design for `config` (the last two kept: a point's key, then its evaluation)."""
        from compiler import compile_traced
        key = repr(sorted(config.as_dict().items())) + repr(config.layers)
        if key not in self._designs:
            design = compile_traced(self.traced(), config)
            self._designs = {**dict(list(self._designs.items())[-1:]), key: design}
        return self._designs[key]


_BUILT: dict[tuple, BuiltPoint] = {}
_BUILT_BUDGET = 512 << 20
"""Bytes of BuiltPoints a process keeps (`_footprint` each, least recently used dropped first).
A space of per-layer formats has hundreds of quantised variants of one model, each shared by
every fold of it (configs/jet_space.yaml: 324 variants x 36 folds). A grid's cheap pass takes
them a build at a time (dse.study.order), but a sampler's trials and the synthesis of the
points the gate lets through visit them in any order, and a build and trace cost a second or
more (jet_space under load: 2.2 s a point uncached, 0.46 s with its build kept). A jet variant
is about 1 MB; a GEMV 128x784's arrays some 0.3 MB."""


def _footprint(bp: BuiltPoint) -> int:
    """A BuiltPoint's bytes, roughly: its arrays (held twice: numpy and the tinygrad tensors) and
    1 MB for its trace and designs (measured with tracemalloc on the jet MLP's variants)."""
    return 2 * sum(int(getattr(a, "nbytes", 0)) for a in bp.arrays.values()) + (1 << 20)


def built_point(ctx: EvalContext, point: DesignPoint) -> BuiltPoint:
    """The point's BuiltPoint, shared with the other points of the same model, dtype, formats
    and data seed in this process (while they fit _BUILT_BUDGET)."""
    model = point.model_of(ctx.model(point.model))
    key = (point.model, point.dtype, ctx.data_seed, model)
    try:
        hash(key)
    except TypeError:
        key = None
    # a user's own code is built afresh for each point: the files it reads while building are
    # what the evaluation cache keys it on (dse.models.user_model.recording_reads); the point's
    # key and its evaluation share that build (one_build)
    if key is None or model.source is not None:
        if _ONE_BUILD is None or key is None:
            return BuiltPoint(model, point.dtype, ctx.data_seed)
        if key not in _ONE_BUILD:
            _ONE_BUILD[key] = BuiltPoint(model, point.dtype, ctx.data_seed)
        return _ONE_BUILD[key]
    bp = _BUILT.pop(key, None) or BuiltPoint(model, point.dtype, ctx.data_seed)
    _BUILT[key] = bp                  # the most recently used last
    total = sum(_footprint(b) for b in _BUILT.values())
    while len(_BUILT) > 1 and total > _BUILT_BUDGET:
        total -= _footprint(_BUILT.pop(next(iter(_BUILT))))
    return bp


_ONE_BUILD: dict[tuple, BuiltPoint] | None = None


@contextlib.contextmanager
def one_build():
    """Within it, a user's own model (`source:`) is built and compiled once for one point's cache
    key and its evaluation (dse.cache.cached_evaluate), where each built it again: a user's
    builder ran four times a point (twice each for the build and its inputs)."""
    global _ONE_BUILD
    outer, _ONE_BUILD = _ONE_BUILD, {}
    try:
        yield
    finally:
        _ONE_BUILD = outer


def forget_built() -> None:
    """Drop every kept BuiltPoint (tests that replace compiler functions start from nothing)."""
    _BUILT.clear()


def compile_point(ctx: EvalContext, point: DesignPoint):
    """The point's compiled Design, as the config, build and compile stages make it (no stage
    wrappers, no checks: the cache key, `dse eval --estimate` and the estimator's calibration).
    Raises what those stages would report."""
    bp = built_point(ctx, point)
    return bp.design(kernel_config(bp.model, point.dtype, point.hardware_config()))


def streamed_inputs(model: ModelSpec, dtype: str, built: zoo.Built, tensors: list) -> list | None:
    """compile_model's `stream` for a point: the input Tensors that change from sample to sample,
    the data (ModelSpec.runtime_inputs: the data set's input of a trained model, a builtin's data
    inputs, a user's function's `x`). A dataflow design streams them and loads the other inputs,
    the weights, once; weights="constant" builds in those of the others that hold data. None:
    every input (a model with no data input)."""
    names = set(model.runtime_inputs(dtype, built.inputs))
    return [t for name, t in zip(built.inputs, tensors) if name in names] or None


def point_arrays(model: ModelSpec, dtype: str, built: zoo.Built, data_seed: int):
    """The data a point's design is compiled and checked with: seeded random data in the inputs'
    range, with the model's trained weights and its first test sample where it has them (so an
    exported design holds the real weights). Returns (arrays, dse.models.data.RealInputs or None)."""
    arrays = zoo.make_inputs(built, data_seed, model.input_range(dtype))
    real = model.real_inputs(dtype, built.inputs)
    if real is not None:
        arrays.update(real.weights)
        if real.samples is not None:
            arrays[real.data_input] = real.samples[0]
    return arrays, real


def declared_input_ranges(model: ModelSpec, dtype: str, built: zoo.Built, tensors: list, real) -> dict:
    """compile_model's `input_ranges` for a point (zoo.declared_ranges): inputs drawn at random
    in the spec's `input_range` (else their type's), inputs filled from files (`real`, the
    dse.models.data.RealInputs of point_arrays) in their type's."""
    fixed = set()
    if real is not None:
        fixed = set(real.weights) | ({real.data_input} if real.samples is not None else set())
    return zoo.declared_ranges(built, tensors, model.input_range(dtype), frozenset(fixed))


def _accuracy(model: ModelSpec, *, point: DesignPoint, config, sim: "Simulator", run: _Run, design, tensors: list,
              checker: "_Checker") -> None:
    """Every sample of the model's data through the same hardware (one simulator process),
    each checked against its reference (the point's rule) and against the cycle model."""
    from dse.models.accuracy import run_model_samples, run_samples
    if model.runs_trained(point.dtype):   # its own build: quantised for integers, dense ones in floats too
        trained = model.trained
        quantized = trained.quantized(point.dtype) if quantisable(point.dtype) else None
        r = run_samples(net=trained.net(), dtype=point.dtype, data=trained.dataset(), config=config,
                        backend=sim.backend, formats=trained.kernel_formats(point.dtype), quantized=quantized)
        if trained.fine_tuned(point.dtype) is not None:
            run.set(accuracy_ptq=ptq_accuracy(trained, point.dtype))
    else:
        r = run_model_samples(model=model, dtype=point.dtype, design=design, tensors=tensors, checker=checker,
                              backend=sim.backend)
    run.set(accuracy=r.accuracy, accuracy_float=r.accuracy_float, agreement=r.agreement,
            logit_mean_err=r.mean_abs_err, logit_max_err=r.max_abs_err, samples=r.samples,
            quantization=r.quantization)
    if r.mean_bits is not None:
        run.set(mean_weight_bits=r.mean_bits[0], mean_act_bits=r.mean_bits[1])
    if model.runs_trained(point.dtype) and point.dtype in ("fp8e4m3", "fp8e5m2"):
        run.notes.append(f"{point.dtype}: {r.quantization}")
    if model.runs_trained(point.dtype) and model.trained.kind == "onnx":
        from dse.models.chain import output_function
        if last := output_function(model.trained.path):
            run.notes.append(f"the graph's last {last} is left to the host: the outputs are the scores before it "
                             "(the same class)")


def _fine_tuning(model: ModelSpec, dtype: str, run: _Run) -> None:
    """The row's `qat` (whether a trained network's point was fine-tuned at its format), `qat_s`
    and `qat_epochs` (how long)."""
    tuned = model.trained.fine_tuned(dtype)
    run.set(qat=tuned is not None)
    if tuned is not None:
        run.set(qat_s=tuned.seconds, qat_epochs=tuned.epochs)
        if tuned.cached:
            run.notes.append(f"fine-tuned network from the qat cache (it trained in {tuned.seconds:.1f} s)")


def ptq_accuracy(trained, dtype: str) -> float:
    """The accuracy of `dtype`'s point before fine-tuning (post-training quantisation of the same
    network at the same format), by its numpy integer model (which the hardware equals bit for
    bit) on the test samples."""
    data = trained.dataset()
    q = trained.untuned().quantized(dtype)
    x = data.x_test.reshape(len(data.x_test), -1)
    pred = predicted(q.dequantize(q.reference(q.quantize_input(x))))
    truth = data.y_test if data.y_test is not None else predicted(trained.net().float_logits(x))
    return float((pred == truth).mean())


def _timing(ctx: EvalContext, run: _Run, netlist_path: str, design) -> None:
    """Place and route (compiler.pnr.timing); a design no device holds gives fits=False, not a FAIL.
    With `check_netlist` the netlist it places is first simulated with the design's exported
    testbench (compiler.pnr.gate_sim): one that fails it is a FAIL in stage `netlist` (its Fmax
    would be a wrong design's).
    A point with `device` is placed on that part; one with `target_mhz` has nextpnr's
    timing-driven placement aim at that clock when it is above the spec's freq_mhz. With several
    placers or seeds (TimingSpec.more) each run has its own folder and time limit, and the
    fastest run that fits is the row's (its placer and seed with it); a note lists every run."""
    from compiler.pnr.timing import place_and_route
    config = design.config
    if ctx.timing.check_netlist:
        from compiler.pnr.gate_sim import check_netlist
        with run.stage("netlist", "netlist_check_s"):
            check = check_netlist(design, netlist_path, run.workdir / "gate", backend=run.fields.get("sim_backend")
                                  or "cxxrtl", timeout=ctx.stage_timeout_s)
            run.set(netlist_check=check.message)
            if not check.passed:
                raise NetlistMismatch(f"the netlist to be placed fails the design's testbench ({check.folder}): "
                                      f"{check.message}")
    runs = ctx.timing.runs(config.target_mhz)
    for options in runs:
        if config.target_mhz is not None:
            options["freq_mhz"] = max(options["freq_mhz"], float(config.target_mhz))
    with run.stage("timing", "pnr_s"):
        reports = []
        for i, options in enumerate(runs):
            where = run.workdir / "pnr" / ("" if i == 0 else f"{options['placer']}-seed{options['seed']}")
            reports.append(place_and_route(netlist_path, ctx.target, where, timeout=ctx.stage_timeout_s,
                                           device=config.device, **options))
        best = max(range(len(runs)), key=lambda i: (reports[i].fits, reports[i].fmax_mhz or 0.0, -i))
        rep, options = reports[best], runs[best]
        if len(runs) > 1:
            run.notes.append("place-and-route, the fastest of " + ", ".join(
                f"{r.placer} seed {o['seed']}: " + (f"{r.fmax_mhz:.1f} MHz" if r.fmax_mhz else "no Fmax")
                for o, r in zip(runs, reports)))
        cycles = run.fields.get("cycles") or run.fields.get("cycles_model")
        interval = run.fields.get("interval_cycles") or run.fields.get("interval_model")
        run.set(samples_per_s=rep.fmax_mhz * 1e6 / interval if rep.fmax_mhz and interval else None)
        run.set(fits=rep.fits, fmax_mhz=rep.fmax_mhz, latency_us=rep.latency_us(cycles) if cycles else None,
                pnr_device=rep.device, pnr_package=rep.package or None, nextpnr_version=rep.nextpnr_version,
                pnr_speed_grade=rep.speed_grade, pnr_critical_path=rep.critical_path or None,
                pnr_failing_endpoints=rep.failing_endpoints, pnr_tns_ns=rep.tns_ns,
                **{f"pnr_{k}": v for k, v in options.items()} | {
                    # the route kept, as it ran (`dse export --bitstream` reuses them): the static placer where
                    # heap's gave up, a repair's own clock and ripup
                    "pnr_placer": rep.placer, "pnr_freq_mhz": rep.freq_mhz, "pnr_ripup": rep.ripup,
                    "pnr_unrepaired_fmax_mhz": rep.unrepaired_fmax_mhz})
        for o, r in zip(runs, reports):
            if r.placer_reason:      # the placer asked for stalled or gave up: the run says which it kept
                run.notes.append(f"seed {o['seed']}: {r.placer_reason}")
        if rep.repair_aim_mhz is not None:
            reached = (f"{rep.repair_fmax_mhz:.1f} MHz" if rep.repair_fmax_mhz
                       else f"no route ({rep.repair_reason or 'stopped or failed'})")
            run.notes.append(f"timing repair (nextpnr --tmg-ripup at {rep.repair_aim_mhz:g} MHz): {reached} against "
                             f"the first route's {rep.unrepaired_fmax_mhz:.1f} MHz; "
                             + ("the repair's route kept" if rep.ripup else "the first route kept"))
        if config.target_mhz and rep.fmax_mhz and rep.fmax_mhz < config.target_mhz:
            # the knob places registers for the clock; whether placement reaches it is this run's answer
            run.notes.append(f"placed and routed at {rep.fmax_mhz:.1f} MHz, below target_mhz {config.target_mhz:g}"
                             + (f" (critical path {rep.critical_path})" if rep.critical_path else ""))
    if not rep.fits:
        if run.fields.get("error"):
            run.notes.append(rep.reason)
        else:
            run.set(stage="timing", error=rep.reason, log_path=rep.log_path or None)
        run.log(f"timing: {rep.reason}")


class Simulator:
    """Runs simulations with one back end: CXXRTL if asked or if "auto" and it works, else pysim
    (the first CXXRTL failure in "auto" goes to `on_fallback` and later runs use pysim)."""

    def __init__(self, preference: str, on_fallback: Callable[[str], None] | None = None):
        self.backend = "pysim" if preference == "pysim" else "cxxrtl"
        self.fallback = preference == "auto"
        self.on_fallback = on_fallback or (lambda _why: None)

    def run(self, design, inputs):
        from compiler import simulate
        from compiler.tools import ToolError
        if self.backend == "cxxrtl":
            try:
                return simulate(design, inputs, backend="cxxrtl")
            except (ImportError, ToolError, ValueError) as exc:
                from compiler.errors import CompileError
                if not self.fallback or isinstance(exc, CompileError):
                    raise
                self.backend = "pysim"
                self.on_fallback(_one_line(exc))
        return simulate(design, inputs, backend="pysim")


class _Checker:
    """The reference for a point and the rule outputs are compared by."""

    def __init__(self, model: ModelSpec, built: zoo.Built, dtype: str, design, config):
        self.model, self.built, self.dtype = model, built, dtype
        out_dt = design.graph.buffers[design.graph.outputs[0]].dtype
        self.is_float = out_dt.is_float
        rounding, subnormals = _float_mode(config)
        ieee = rounding == "rne" and subnormals == "keep"
        self.exact = not self.is_float or (model.golden and ieee)
        self.tree = tree_terms(config) if self.is_float else 1
        semantics = getattr(config, "fp_semantics", "op")
        self.arith = dataclasses.replace(zoo.arith_for(dtype, semantics) if self.is_float else zoo.KERNEL,
                                         sum_tree=self.tree)
        # fp_semantics=tinygrad: the golden model rounds as tinygrad's PYTHON device (fp32 per op)
        kind = "PYTHON-device" if self.is_float and semantics == "tinygrad" and dtype != "fp32" else "KERNEL"
        trees = f", sums in trees of {self.tree}" if self.tree > 1 else ""
        source = "tinygrad's result" if not model.golden else f"numpy golden model ({kind} arithmetic{trees})"
        if self.exact:
            self.rule = f"bit-exact vs {source}"
            self.clamp = None
        else:
            n = reduction_length(design)
            self.rel = (n + 2) * 2.0 ** -out_dt.man_bits
            # round toward zero turns an overflow into the largest finite value, not inf
            self.clamp = zoo.DTYPES[out_dt.name].highest if rounding == "rtz" else None
            why = (f"fp_rounding={rounding}, fp_subnormals={subnormals}" if not ieee
                   else "no numpy golden model")
            self.rule = f"|err| <= {n + 2} * 2^-{out_dt.man_bits} * max(1, max|ref|) vs {source} ({why})"

    def reference(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        if self.model.golden:
            ref = zoo.reference(self.model.builtin, self.dtype, self.model.params, arrays, self.arith)
        else:
            ref = zoo.tinygrad_result(self.built, arrays)
        return self.finish(ref)

    def finish(self, ref: np.ndarray) -> np.ndarray:
        """A reference as the rule compares it (rtz: overflows clamped to the largest finite value)."""
        if self.clamp is not None:
            ref = np.where(np.isnan(ref), ref, np.clip(ref, -self.clamp, self.clamp)).astype(ref.dtype)
        return ref

    def sequential(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        """tinygrad's own (sequential) result: for zoo models its numpy model in the PYTHON
        device's arithmetic (zoo.python_device_arith; tests/test_zoo.py checks they agree),
        seconds faster than running tinygrad."""
        if self.model.golden:
            return zoo.reference(self.model.builtin, self.dtype, self.model.params, arrays,
                                 zoo.python_device_arith(self.dtype))
        return zoo.tinygrad_result(self.built, arrays)

    def compare(self, got: np.ndarray, want: np.ndarray) -> tuple[bool, float]:
        return compare(got, want, is_float=self.is_float, rel_tol=None if self.exact else self.rel)


def tree_terms(config) -> int:
    """Products a float sum adds as one tree per step (fp_sum="tree"), 1 when sequential."""
    return config.reduce_unroll if getattr(config, "fp_sum", "sequential") == "tree" else 1


def ulp_distance(got: np.ndarray, want: np.ndarray, dtype: str) -> int:
    """The most units in the last place of `dtype` between two float outputs (held in their
    storage dtypes): how many representable values lie between them. 0 when equal (and
    -0.0 vs +0.0); a NaN on one side only counts as the whole range."""
    width = zoo.DTYPES[dtype].bits

    def ordered(a: np.ndarray) -> np.ndarray:       # bit patterns on one monotonic integer line
        u = zoo.bits(a, dtype).reshape(-1).astype(np.int64)
        mag = u & ((1 << (width - 1)) - 1)
        return np.where(u >> (width - 1), -mag, mag)
    nan_g = np.isnan(np.asarray(got, np.float32).reshape(-1))
    nan_w = np.isnan(np.asarray(want, np.float32).reshape(-1))
    d = np.abs(ordered(got) - ordered(want))
    d = np.where(nan_g & nan_w, 0, np.where(nan_g | nan_w, 1 << width, d))
    return int(d.max()) if d.size else 0


def saturated_outputs(out: np.ndarray, dtype: str) -> int | None:
    """How many outputs sit at a saturating format's largest finite magnitude (fp8, as
    tinygrad computes it: every finite value beyond it lands there; one that rounds to it from
    below counts too); None for a dtype that does not saturate."""
    from compiler.fp import FORMATS
    fmt = FORMATS.get(dtype)
    if fmt is None or not fmt.saturate:
        return None
    return int(np.count_nonzero(np.abs(np.asarray(out, np.float64)) == fmt.max_finite))


def reduction_length(design) -> int:
    """The most terms any accumulator sums: over every store, the product of the bounds of
    the REDUCE loops around it (1 without reductions)."""
    n = 1
    for k in design.kernels:
        for _, loops in k.stores():
            n = max(n, math.prod(lp.bound for lp in loops if lp.axis.value == "reduce"))
    return n


def compare(got: np.ndarray, want: np.ndarray, *, is_float: bool, rel_tol: float | None = None) -> tuple[bool, float]:
    """(equal under the rule, max |got - want|). Integers and floats with `rel_tol` None:
    bit-exact (floats: equal values and signs, any NaN equals any NaN). Floats with `rel_tol`:
    max error <= rel_tol * max(1, max |finite want|)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.size != want.size:
        raise ValueError(f"the hardware output has {got.size} elements, the reference {want.size}")
    got, want = got.reshape(-1), want.reshape(-1)
    if not is_float:
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        err = float(diff.max()) if diff.size else 0.0
        return err == 0, err
    g, w = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(g - w)
        diff = np.where(np.isnan(g) | np.isnan(w) | np.isnan(diff), np.inf, diff)   # one NaN, or inf - inf
        diff = np.where(both_nan | (g == w), 0.0, diff)
    err = float(diff.max()) if diff.size else 0.0
    if rel_tol is None:
        same = both_nan | ((g == w) & (np.signbit(g) == np.signbit(w)))
        return bool(same.all()), err
    finite = np.abs(w[np.isfinite(w)])
    scale = max(1.0, float(finite.max()) if finite.size else 1.0)
    return bool(err <= rel_tol * scale), err


def _float_mode(config) -> tuple[str, str]:
    """The float units' (rounding, subnormals) knobs; IEEE defaults when the config lacks them."""
    return getattr(config, "fp_rounding", "rne"), getattr(config, "fp_subnormals", "keep")


class _Proof:
    """The overflow proof of a design (compiler.overflow) and its confirmation in simulation.

    `analyze` (stage "overflow", static, before simulating) records acc_bits_required,
    overflow_safe and max_magnitude. Where an accumulator register is narrower than its dtype
    (a knob such as acc_width) and the proof says it can overflow, the hardware legitimately
    differs from the reference, which wraps at the dtype's width: `narrowed_unsafe` says so,
    and a wrong output is then a consequence of the knob, not a failure. Everywhere else
    (the dtype itself wraps, or a float overflows to inf) hardware and reference agree.

    Ranges: weights from the spec's file (`fixed`) and tensors the model made from numpy data
    are constants (their range is their values); the input the real samples fill ranges over the
    samples (`ranges`); any other input, the spec's input_range or its dtype's default.

    `confirm` (stage "confirm") simulates the worst-case inputs of the analysis:
    `overflow_confirmed` is true when the simulation shows what the proof predicts, i.e. the
    outputs equal the reference unless `narrowed_unsafe`, and differ from it if so. A
    mismatch the proof did not predict is a FAIL; an overflow it predicted that the
    worst case does not show (a loose bound) is noted."""

    def __init__(self, run: _Run, design, built: zoo.Built, tensors: list, rng: zoo.InputRange | None,
                 fixed: Mapping[str, np.ndarray] | None = None, ranges: Mapping[str, zoo.InputRange] | None = None,
                 arrays: Mapping[str, np.ndarray] | None = None):
        self.run, self.design, self.built = run, design, built
        fixed, ranges = dict(fixed or {}), ranges or {}
        self.narrowed_unsafe = ""            # why outputs may differ from the reference ("": they may not)
        self.buffers: dict[str, int] = {}    # input name -> model buffer id
        for name, t in zip(built.inputs, tensors):
            with contextlib.suppress(KeyError):      # an input the computation never reads
                self.buffers[name] = design.buffer_of(t)
        self.ranges = {}
        for name, buf in self.buffers.items():
            r = ranges.get(name) or rng or zoo.default_input_range(built.inputs[name][1])
            self.ranges[buf] = (float(r.min), float(r.max))
        # Tensors the model made from numpy data itself (weights it loaded, constants) are not
        # inputs: they hold the same values in every run, so their range is their data's, and
        # the worst case keeps them (the reference computes with them too). So are inputs the
        # spec's weights file fills (`fixed`).
        self.constants = {b.id: b.data for b in design.graph.buffers
                          if b.id in design.graph.inputs and b.id not in self.buffers.values()
                          and b.data is not None and b.data.size}
        # inputs built into the hardware (weights="constant") hold their data in every run too
        for name, buf in self.buffers.items():
            if buf in design.constants and arrays is not None and name not in fixed:
                fixed[name] = arrays[name]
        self.fixed = {name: np.asarray(a) for name, a in fixed.items() if name in self.buffers}
        self.constants.update({self.buffers[name]: a.reshape(-1) for name, a in self.fixed.items() if a.size})
        for buf, data in self.constants.items():
            values = data.astype(np.float64)
            self.ranges[buf] = (float(values.min()), float(values.max()))
        self.available = True
        self.proven = False                  # the analysis reached a verdict (overflow_safe not None)
        self.seconds = 0.0

    def analyze(self) -> None:
        try:
            from compiler.overflow import analyze_overflow
        except ImportError as exc:
            self.available = False
            self.run.notes.append(f"overflow analysis unavailable: {exc}")
            return
        from compiler.dtypes import BY_NAME
        t0 = time.perf_counter()
        try:
            with self.run.stage("overflow"):
                report = analyze_overflow(self.design, self.ranges)
                self.run.set(acc_bits_required=report.acc_bits_required, overflow_safe=report.safe,
                             max_magnitude=report.max_magnitude)
                self.proven = report.safe is not None
                if report.may_saturate:
                    self.run.notes.append("values may pass the fp8 format's largest finite value and saturate, as "
                                          "tinygrad's fp8 does (not an overflow; `saturated` counts outputs at it)")
                if not self.proven:
                    self.run.notes.append("overflow not proven either way: the analysis cannot bound a float "
                                          "value (exp, division by a range holding 0, bit manipulation); "
                                          "no worst-case run (overflow_confirmed empty)")
                narrow = [b for b in report.accumulators
                          if not b.safe and b.bits_required is not None and b.dtype in BY_NAME
                          and b.width < BY_NAME[b.dtype].bits]
                if narrow:
                    b = max(narrow, key=lambda b: b.bits_required)
                    self.narrowed_unsafe = (f"{len(narrow)} accumulator register(s) narrower than the proof "
                                            f"requires (kernel {b.kernel}: {b.width} bits, needs {b.bits_required})")
        finally:
            self.seconds += time.perf_counter() - t0
            self.run.set(overflow_s=self.seconds)

    def confirm(self, sim: Simulator, checker: _Checker) -> None:
        if not (self.available and self.proven):   # no verdict: nothing to confirm, and no worst case
            return
        from compiler.overflow import worst_case_inputs
        t0 = time.perf_counter()
        try:
            with self.run.stage("confirm"):
                worst = {b: v for b, v in worst_case_inputs(self.design, self.ranges).items()
                         if b not in self.constants}
                result = sim.run(self.design, worst)
                arrays = {}
                for name, (shape, dt) in self.built.inputs.items():
                    buf = self.buffers.get(name)
                    a = (self.fixed[name] if name in self.fixed else np.asarray(worst[buf]) if buf in worst
                         else np.zeros(shape))   # unread: any data
                    arrays[name] = a.reshape(shape).astype(zoo.storage(dt))
                equal, err = checker.compare(result.outputs[0], checker.reference(arrays))
                confirmed = equal != bool(self.narrowed_unsafe)
                self.run.set(overflow_confirmed=confirmed)
        finally:
            self.seconds += time.perf_counter() - t0
            self.run.set(overflow_s=self.seconds)
        if not equal and not self.narrowed_unsafe:
            self.run.fail("confirm", f"worst-case inputs: outputs differ from the reference ({checker.rule}); "
                                     f"max abs error {err:g}")
        elif equal and self.narrowed_unsafe:
            self.run.notes.append(f"the proof predicts an overflow ({self.narrowed_unsafe}) that its "
                                  f"worst-case inputs do not show in simulation")


def json_safe(row: dict[str, Any]) -> dict[str, Any]:
    """Strict JSON has no NaN or infinity: those become null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}

"""The YAML spec of a study, parsed once into typed, frozen records.

Long, and one thing: the spec's grammar (the records and the parser that checks every key
against them, naming the YAML path of what is wrong). What a model is and how it is built for
a dtype lives in dse/models/ (model.py, zoo.py, user_model.py, data.py, quantize.py).

    study: gemv
    target: ecp5                        # ecp5 | ice40 | xilinx
    models:
      - name: gemv_128x784
        builtin: gemv                   # a zoo model (`dse models` lists them)
        params: {M: 128, K: 784}
        input_range: {min: -8, max: 7}  # optional, overrides the top-level one
      - name: mine
        source: models/mine.py:build    # a user's file, relative to the spec file
        params: {N: 32}
        weights: models/mine.npz        # optional: trained arrays for its inputs, by name
        data: {dataset: "sklearn:digits"}   # optional: test samples for the input they leave
      - name: trained
        weights: models/mlp.npz         # a trained dense network (or onnx: mlp.onnx), with
        data: {dataset: "sklearn:digits"}   # the samples its accuracy is measured on
    dtypes: [int8, fp16, bf16, fp32]    # int8 int16 int32 uint8 fp16 bf16 fp32 fp8e4m3 fp8e5m2
                                        # (a model's own `dtypes:` replaces these for it)
    knobs:                              # candidate values per HardwareConfig knob
      mem_read: [sync, comb]
    objectives: [cycles, luts]          # fmax_mhz and accuracy are maximised, every other metric minimised
    search: {sampler: nsga2, trials: 40, seed: 0}   # grid | random | tpe | nsga2

Optional keys: `input_range` ({min, max} for every dtype, or {dtype: {min, max}}), `constraints`
({luts_max: 5000, ...}: resource budgets a feasible point must meet), `gate` (the same bounds,
for `dse check`: one mapping for every model x dtype, or a list of rules each optionally
restricted by `model:` and `dtype:`), `timing` (default false; true or a mapping of nextpnr's
settings, {router, placer, seed, freq_mhz, check_netlist}: run place-and-route for fmax_mhz/latency_us;
`check_netlist: true` first simulates the netlist it places with the design's testbench), `synthesis` (flat | units | kernels, default flat: `units` synthesises each
distinct float unit once and counts it per instance, compiler.synth.units; `kernels` each kernel
on its own, in parallel, compiler.synth.kernels), `stage_timeout_s` (per-stage time limit, default 600) and `data` (the
samples of the models with weights that name none of their own).

Every mistake raises one `SpecError` naming the YAML path of the offending value, e.g.
`models[1].params.K: expected a positive integer, got -3`.

One module (~1,200 lines): the whole grammar, every key's check with its YAML path, in the
order a spec reads; model building lives in dse/models/, the frozen records in dse/frozen.py.
"""
from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import re
from dataclasses import dataclass
from functools import cached_property
from enum import StrEnum
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import yaml

from compiler.config import LAYER_KNOBS, TARGET_LEVEL, HardwareConfig
from compiler.devices import FAMILIES as PNR_FAMILIES
from compiler.devices import METRIC_RESOURCES
from compiler.pnr.timing import DEFAULT_FREQ_MHZ, DEFAULT_PLACER, DEFAULT_ROUTER, DEFAULT_SEED, PLACERS, ROUTERS
from dse.models import zoo
from dse.limits import time_limit
from dse.models.user_model import IMPORT_TIME_LIMIT_S, UserModelError, bind_params, load_function, parse_source
from dse.models import formats
from dse.models.zoo import DTYPES, InputRange
from dse.frozen import FrozenMap
from dse.models.widths import (FORMAT_KNOBS, MIN_BITS, Formats, dtype_bits, format_range, is_format_knob, layer_names,
                               quantisable)
from dse.models.model import (ModelFiles, ModelSpec, TrainedModel, layer_kernels, model_constants, model_layer_limits,
                              quantised_layers)



class SpecError(ValueError):
    """A mistake in a spec: `path` is where (e.g. "models[1].params.K"), `message` what."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}" if path else message)
        self.path, self.message = path, message


# ---------------------------------------------------------------------------------------------
# the typed records

class Target(StrEnum):
    ECP5 = "ecp5"
    ICE40 = "ice40"
    XILINX = "xilinx"


class Sampler(StrEnum):
    GRID = "grid"
    RANDOM = "random"
    TPE = "tpe"
    NSGA2 = "nsga2"


class Direction(StrEnum):
    """Spelled as Optuna spells study directions."""
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


METRICS: dict[str, Direction] = {
    "cycles": Direction.MINIMIZE, "luts": Direction.MINIMIZE, "ffs": Direction.MINIMIZE,
    "bram": Direction.MINIMIZE, "dsp": Direction.MINIMIZE, "lutram": Direction.MINIMIZE,
    "latency_us": Direction.MINIMIZE, "fmax_mhz": Direction.MAXIMIZE, "accuracy": Direction.MAXIMIZE,
    # cycles between successive samples in steady state (schedule=dataflow: the beat; else = cycles)
    # and, with timing, samples per second at the measured Fmax
    "interval_cycles": Direction.MINIMIZE, "samples_per_s": Direction.MAXIMIZE,
}
"""Metrics a spec may optimise or bound, with the direction that is better."""
NEEDS_TIMING = frozenset({"latency_us", "fmax_mhz", "samples_per_s"})
NEEDS_SIMULATION = frozenset({"accuracy"})
"""Metrics only a simulation gives (cycles are the cycle model's, exact before any simulation)."""
INTEGER_METRICS = frozenset({"cycles", "luts", "ffs", "bram", "dsp", "lutram", "interval_cycles"})
DEFAULT_STAGE_TIMEOUT_S = 600.0
MAX_STAGE_TIMEOUT_S = 7 * 24 * 3600.0
MAX_TRIALS = 1_000_000
MAX_SEED = 2**32 - 1            # numpy's and so Optuna's samplers' seed range


@dataclass(frozen=True)
class Objective:
    metric: str             # a key of METRICS
    direction: Direction

    @property
    def label(self) -> str:
        """"min cycles", "max fmax_mhz": how tables, reports and the console name it."""
        return f"{'max' if self.direction == Direction.MAXIMIZE else 'min'} {self.metric}"


def objectives_label(objectives: Iterable[Objective]) -> str:
    return ", ".join(o.label for o in objectives)


@dataclass(frozen=True)
class Bound:
    """A limit on one metric: `luts_max: 5000` is Bound("luts", "max", 5000)."""
    metric: str
    kind: str               # "max" (value <= limit) or "min" (value >= limit)
    limit: float

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.kind}"

    def ok(self, value: float) -> bool:
        return value <= self.limit if self.kind == "max" else value >= self.limit


@dataclass(frozen=True)
class TimingSpec:
    """How `timing:` places and routes each point (compiler.pnr.timing.place_and_route's options).
    `timing: true` is every default; wide designs want `router: router2` (router1 does not
    converge on congested ones). `placer` and `seed` may be lists: each combination is placed and
    routed and the fastest kept (`more`: the combinations after the first), since which placer
    and seed close a design fastest differs by design as much as 30% (docs/timing.md)."""
    router: str = DEFAULT_ROUTER
    placer: str = DEFAULT_PLACER
    seed: int = DEFAULT_SEED
    freq_mhz: float = DEFAULT_FREQ_MHZ      # the clock timing-driven placement aims at
    more: tuple[tuple[str, int], ...] = ()  # further (placer, seed) runs; the fastest run is the row's
    check_netlist: bool = False             # simulate the netlist nextpnr places (compiler.pnr.gate_sim) first
    regroup: bool = True                    # copies' loads dealt by a first placement (compiler/pnr/replicas.py)
    repair: bool | None = None              # a route that misses the clock routed again with nextpnr's
                                            # timing-driven ripup (place_and_route `repair`); None: for
                                            # a point with target_mhz (repairs)

    def repairs(self, target_mhz: float | None) -> bool:
        """Whether a point at `target_mhz` (None: the knob unset) is repaired: as the spec says,
        else when the point asks for a clock. A user who set target_mhz wants that clock, and
        the repair costs one more place-and-route only for a point whose route misses it."""
        return self.repair if self.repair is not None else target_mhz is not None

    def options(self, target_mhz: float | None = None) -> dict[str, Any]:
        """Keyword arguments of compiler.pnr.timing.place_and_route (its first run) for a point
        at `target_mhz`."""
        return {"router": self.router, "placer": self.placer, "seed": self.seed, "freq_mhz": self.freq_mhz,
                "regroup": self.regroup, "repair": self.repairs(target_mhz)}

    def runs(self, target_mhz: float | None = None) -> list[dict[str, Any]]:
        """The options of every run for a point at `target_mhz`, the first one first."""
        first = self.options(target_mhz)
        return [first] + [{**first, "placer": p, "seed": s} for p, s in self.more]


@dataclass(frozen=True)
class GateRule:
    """Bounds `dse check` enforces on every model x dtype the rule matches (None: all)."""
    model: str | None
    dtype: str | None
    bounds: tuple[Bound, ...]

    def matches(self, model: str, dtype: str) -> bool:
        return self.model in (None, model) and self.dtype in (None, dtype)


@dataclass(frozen=True)
class Knob:
    name: str               # a HardwareConfig field
    values: tuple[Any, ...]  # candidate values, each legal on its own


LARGE_GRID = 1000
"""Grids this large default to `fidelity: multi` (synthesising every point of one takes hours: a
thousand points at 10 to 60 s of Yosys each); `fidelity: full` in the spec keeps them all."""


@dataclass(frozen=True)
class SearchSpec:
    sampler: Sampler
    trials: int             # for grid: the whole grid unless the spec says fewer
    seed: int
    fidelity: str = "full"  # "multi": synthesise only points that could reach the front (dse.fidelity)
    hv_tolerance: float = 0.0   # multi on a grid: hypervolume share of the front the gate may give up


FOLD_AIMS = ("target_interval", "fold_budget")
"""What fold=auto aims at: one of them with fold=auto, neither without (compiler.config)."""
FOLD_HOW = ("fold_factors",)
"""How fold=auto chooses: unused without it, like FOLD_AIMS, but not needed with it."""
FOLDED = ("lanes", "reduce_unroll")
"""The per-layer knobs fold=auto chooses itself."""
DATAFLOW_ONLY = ("stage_overlap",)
"""Knobs of how schedule=dataflow runs its stages: unused with schedule=sequential."""


def unused_knobs(knobs: Mapping[str, Any]) -> tuple[str, ...]:
    """The knobs of a setting its `fold` or `schedule` leaves unused: target_interval, fold_budget
    and fold_factors without fold=auto, a layer's own lanes and reduce_unroll with it,
    stage_overlap without schedule=dataflow. A space of
    fold: [manual, auto] x target_interval: [32, 64] reads as "manual, and auto at each target":
    a point is built without them (`hardware_knobs`), and Spec.not_applicable leaves out the
    repeats."""
    auto = knobs.get("fold") == "auto"
    dataflow = knobs.get("schedule") == "dataflow"
    return tuple(k for k in knobs if (k in FOLD_AIMS + FOLD_HOW and not auto)
                 or (auto and "@" in k and k.partition("@")[0] in FOLDED) or (k in DATAFLOW_ONLY and not dataflow))


PRUNE_KNOB = "prune"
"""A knob of the model, like the format knobs: the sparsity a trained dense network is pruned to
(and retrained at) before it is quantised (dse.models.prune; a model's own `prune:` is the same
for every point). The hardware of a network with its weights in memories is the same at every
sparsity, so pruning trades its accuracy for nothing there; with `weights: constant` a zero
weight costs no logic."""


def hardware_knobs(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs HardwareConfig.from_dict reads: not the format knobs (dse.models.widths: the
    model's, not the hardware's), nor those the fold setting leaves unused (`unused_knobs`)."""
    unused = unused_knobs(knobs)
    return {k: v for k, v in knobs.items() if not is_format_knob(k) and k != PRUNE_KNOB and k not in unused}


OFF_KNOBS = frozenset(f.name for f in dataclasses.fields(HardwareConfig) if f.default is None)
"""Knobs that are off by default (None); a spec's `null` among their values is that: e.g.
`target_mhz: [null, 150]` compares a design without and with a target clock in one sweep."""


def check_knob_value(name: str, value: Any) -> None:
    """One value of one hardware knob on its own (HardwareConfig's checks); raises ValueError.
    The fold knobs only mean something together, so each is checked beside a stand-in for its
    partner (target_interval and fold_budget beside fold=auto, fold=auto beside a target), and
    the combination by `fold_conflict`; target_mhz beside the fp_pipeline it needs (TARGET_LEVEL),
    the combination by HardwareConfig when a point is built."""
    partner = ({"fold": "auto"} if name in FOLD_AIMS
               else {"fold": "auto", "target_interval": 1} if name in FOLD_HOW
               else {"target_interval": 1} if name == "fold" and value == "auto"
               else {"fp_pipeline": TARGET_LEVEL} if name == "target_mhz" and value is not None
               else {"schedule": "dataflow"} if name in DATAFLOW_ONLY else {})
    HardwareConfig.from_dict({name: value, **partner})


def fold_conflict(names: Iterable[str], folds: Iterable[str]) -> tuple[str, str]:
    """(the knob at fault, why) when knobs `names`, with the `fold` values `folds` (none given:
    manual), cannot be set together; ("", "") when they can."""
    names, folds = list(names), set(folds) or {"manual"}
    aims = [n for n in FOLD_AIMS if n in names]
    layers = [n for n in names if "@" in n and n.partition("@")[0] in FOLDED]
    if len(aims) == 2:
        return "fold_budget", ("fold=auto aims at target_interval (cycles per sample) or at fold_budget "
                               "(multipliers), not both: give one of them")
    if aims and "auto" not in folds:
        return aims[0], f"{aims[0]} is what fold=auto aims at, and fold is manual: set fold to auto with it"
    how = [n for n in FOLD_HOW if n in names]
    if how and "auto" not in folds:
        return how[0], f"{how[0]} is how fold=auto chooses, and fold is manual: set fold to auto with it"
    if "auto" in folds and not aims:
        return "fold", ("fold=auto needs a target: target_interval (cycles per sample, e.g. 64) or fold_budget "
                        "(multipliers: lanes x reduce_unroll summed over the layers)")
    if layers and folds == {"auto"}:
        return layers[0], f"fold=auto chooses every layer's lanes and reduce_unroll itself: drop {layers[0]}"
    return "", ""


FORMATS_APPLY = "sets the widths of a network the tool quantises, in an integer dtype"
"""Where the format knobs (dse.models.widths) change a point."""


def kernel_layer_names(m: ModelSpec, dtypes: Iterable[str]) -> dict[str, str]:
    """The kernel name of each conv/dense layer of `m` in its integer `dtypes` -> the layer's name
    (what format knobs take either way); a dtype the model does not build in adds nothing."""
    out: dict[str, str] = {}
    for dtype in dtypes:
        if not quantisable(dtype):
            continue
        try:
            kernels = [name for name, _, _ in model_layer_limits(m, dtype)]
            out.update({kernels[k]: layer for layer, k in layer_kernels(m, dtype).items()})
        except Exception:        # noqa: BLE001 - a model that does not build fails as its points do
            continue
    return out


def missing_format_layer(m: ModelSpec, layer: str, kernels: Mapping[str, str]) -> str:
    """Why `<format knob>@<layer>` names no conv/dense layer of `m` ("" when it does): a layer is
    named by its index, its weights' name or its kernel's name (`kernels`: kernel_layer_names)."""
    names = quantised_layers(m)
    layer = kernels.get(layer, layer)
    if (layer.isdigit() and int(layer) < len(names)) or layer in names:
        return ""
    listing = ", ".join(f"{i} ({n}{''.join(f' or {k}' for k, v in kernels.items() if v == n)})"
                        for i, n in enumerate(names))
    return f"model {m.name!r} has no layer {layer!r} to quantise; its conv/dense layers: {listing}"


def format_misfit(name: str, value: Any, dtype: str) -> str:
    """Why format knob `name` at `value` cannot apply to an integer point of `dtype` ("" when it
    can): a width beyond the bits the dtype holds ("does not fit int4: ...", to follow the knob)."""
    if str(name).startswith("scale_digits"):
        return ""
    side = 0 if str(name).startswith("weight_bits") else 1
    top = dtype_bits(dtype)[side]
    if value > top:
        return f"does not fit {dtype}: its {'weights' if side == 0 else 'activations'} hold {MIN_BITS} to {top} bits"
    return ""


@dataclass(frozen=True)
class DesignPoint:
    """One model x dtype x knob setting: the unit the explorer evaluates."""
    model: str
    dtype: str
    knobs: FrozenMap[str, Any]

    def hardware_config(self) -> HardwareConfig:
        """Raises ValueError saying why if this combination of knob values is illegal. The
        format knobs (dse.models.widths) are the model's, not the hardware's, and knobs the fold
        setting leaves unused are left out (`hardware_knobs`)."""
        return HardwareConfig.from_dict(hardware_knobs(self.knobs))

    def formats(self) -> Formats:
        """The format knobs of this point (the widths the tool's quantiser uses)."""
        return Formats.of(self.knobs)

    def model_of(self, model: ModelSpec) -> ModelSpec:
        """`model` as this point builds it: with its format knobs and its `prune` knob."""
        model = model.with_formats(self.formats())
        if PRUNE_KNOB in self.knobs and model.trained is not None:
            model = dataclasses.replace(model, trained=dataclasses.replace(model.trained,
                                                                           prune=float(self.knobs[PRUNE_KNOB])))
        return model

    def not_applicable(self) -> str:
        """Why a knob of this point cannot apply to its dtype ("" when all can): a float dtype
        sums in float (HardwareConfig.not_applicable). Illegal knob values are not this
        method's business: they fail at stage "config" with their own message."""
        try:
            config = self.hardware_config()
        except (ValueError, TypeError):
            return ""
        return config.not_applicable(float_sums=zoo.DTYPES[self.dtype].is_float)


@dataclass(frozen=True)
class Spec:
    study: str
    target: Target
    models: tuple[ModelSpec, ...]
    dtypes: tuple[str, ...]
    knobs: tuple[Knob, ...]
    objectives: tuple[Objective, ...]
    search: SearchSpec
    constraints: tuple[Bound, ...]
    gate: tuple[GateRule, ...]
    timing: TimingSpec | None       # None: no place-and-route
    stage_timeout_s: float
    path: Path | None               # the spec file, if it came from one
    synthesis: str = "flat"         # "units": float units synthesised once each (compiler.synth.units);
                                    # "kernels": each kernel on its own, in parallel (compiler.synth.kernels)
    refused: tuple[tuple[str, str, str], ...] = ()  # (model, dtype, why): a dtype its network cannot run in
                                                    # (quantised), left out while its other dtypes run

    def model(self, name: str) -> ModelSpec:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"no model {name!r} in study {self.study!r}; models: {', '.join(m.name for m in self.models)}")

    def model_dtypes(self, model: str) -> tuple[str, ...]:
        """The dtypes `model` runs: its own `dtypes:`, else the spec's."""
        return self.model(model).dtypes or self.dtypes

    def input_range_for(self, model: str, dtype: str) -> InputRange | None:
        """The spec's data range for `model` x `dtype` (model's own, else top-level); None: each
        input's dtype default (zoo.default_input_range)."""
        return self.model(model).input_range(dtype)

    @property
    def knob_space_size(self) -> int:
        """Number of knob-value combinations (1 with no knobs)."""
        return math.prod(len(k.values) for k in self.knobs)

    @property
    def space_size(self) -> int:
        """Number of design points: models x their dtypes x knob combinations, less the points a
        knob cannot apply to (`not_applicable`)."""
        runs = sum(len(m.dtypes or self.dtypes) for m in self.models)
        return runs * self.knob_space_size - len(self.not_applicable_points())

    def not_applicable(self, point: DesignPoint) -> str:
        """Why `point` is not in the search space ("" when it is): a knob value that cannot
        apply to its dtype (DesignPoint.not_applicable), or fp_sum=tree where it changes
        nothing (an integer dtype, or reduce_unroll=1) while the spec also lists
        fp_sum=sequential, whose point is the same design (fp_semantics=op likewise:
        `semantics_not_applicable`); or a dtype its model does not run
        (a sampler may propose one: the models' own `dtypes:`); or a format knob that cannot
        change it (`format_not_applicable`); or a knob the fold setting leaves unused
        (`unused_knobs`) at another value than its first, the same design as that one."""
        own = self.model_dtypes(point.model) if any(m.name == point.model for m in self.models) else self.dtypes
        if point.dtype not in own:
            return f"model {point.model} runs {', '.join(own)} only (its dtypes)"
        refused = self.refused_dtype(point.model, point.dtype)
        if refused:
            return refused
        why = (self.format_not_applicable(point) or self.unused_not_applicable(point) or point.not_applicable()
               or self.semantics_not_applicable(point))
        if why or point.knobs.get("fp_sum") != "tree" or "sequential" not in self.knob_values("fp_sum"):
            return why
        unrolls = [v for k, v in point.knobs.items() if k.partition("@")[0] == "reduce_unroll"]
        if not zoo.DTYPES[point.dtype].is_float or max(unrolls, default=1) == 1:
            return ("fp_sum=tree only reorders float sums with reduce_unroll > 1; elsewhere it is the same "
                    "design as fp_sum=sequential, which the space holds")
        return ""

    def semantics_not_applicable(self, point: DesignPoint) -> str:
        """fp_semantics=op where it changes nothing (an integer or fp32 dtype: both values round
        every op there) while the spec also lists fp_semantics=tinygrad, the same design."""
        if point.knobs.get("fp_semantics") != "op" or "tinygrad" not in self.knob_values("fp_semantics"):
            return ""
        if zoo.DTYPES[point.dtype].is_float and point.dtype != "fp32":
            return ""
        return ("fp_semantics=op only changes fp16, bf16 and fp8 arithmetic; elsewhere it is the same design as "
                "fp_semantics=tinygrad, which the space holds")

    def refused_dtype(self, model: str, dtype: str) -> str:
        """Why `model` cannot run in `dtype` ("" when it can): its network does not quantise to
        it (the spec's other dtypes of the model still run)."""
        return next((f"model {m} cannot run in {d}: {why}" for m, d, why in self.refused if (m, d) == (model, dtype)),
                    "")

    def unused_not_applicable(self, point: DesignPoint) -> str:
        """Why a knob the point's fold setting leaves unused leaves it out ("" when none does)."""
        for name in unused_knobs(point.knobs):
            first = self.knob_values(name)[0] if self.knob_values(name) else point.knobs[name]
            if point.knobs[name] != first:
                if name in DATAFLOW_ONLY:
                    return (f"{name} is how schedule=dataflow runs its stages; at schedule="
                            f"{point.knobs.get('schedule', 'sequential')} it is the same design as {name}={first}, "
                            "which the space holds")
                what = ("is what fold=auto aims at" if name in FOLD_AIMS
                        else "is chosen by fold=auto itself")
                return (f"{name.partition('@')[0]} {what}; at fold={point.knobs.get('fold', 'manual')} it is the "
                        f"same design as {name}={first}, which the space holds")
        return ""

    def format_not_applicable(self, point: DesignPoint) -> str:
        """Why a format knob leaves `point` out ("" when none does): it changes only the integer
        points of a network the tool quantises, and is elsewhere the same design as the knob's
        first value; and a width beyond the dtype's bits (`format_misfit`)."""
        applies = self.formats_apply(point.model, point.dtype)
        for name, value in point.knobs.items():
            if not is_format_knob(name):
                continue
            first = self.knob_values(name)[0] if self.knob_values(name) else value
            if not applies and value != first:
                return (f"{name.partition('@')[0]} {FORMATS_APPLY}; elsewhere it is the same design as "
                        f"{name}={first}, which the space holds")
            if applies and format_misfit(name, value, point.dtype):
                return f"{name}={value} {format_misfit(name, value, point.dtype)}"
        return ""

    def formats_apply(self, model: str, dtype: str) -> bool:
        """Whether the format knobs change `model`'s points in `dtype` (FORMATS_APPLY)."""
        m = next((m for m in self.models if m.name == model), None)
        return m is not None and m.trained is not None and quantisable(dtype) and not self.refused_dtype(model, dtype)

    def format_notes(self) -> list[str]:
        """One line per format knob the space holds beside points it cannot change (float dtypes,
        models the tool does not quantise): those points run without it, said once."""
        out = []
        for k in self.knobs:
            if not is_format_knob(k.name):
                continue
            runs = [f"{m.name} {dt}" for m in self.models for dt in (m.dtypes or self.dtypes)
                    if not self.formats_apply(m.name, dt) and not self.refused_dtype(m.name, dt)]
            if runs:
                out.append(f"{k.name} {FORMATS_APPLY}: the points of {', '.join(runs)} run without it")
        return out

    def knob_values(self, name: str) -> tuple[Any, ...]:
        return next((k.values for k in self.knobs if k.name == name), ())

    def not_applicable_points(self) -> list[tuple[DesignPoint, str]]:
        """The points left out of the search space (`not_applicable`), each with why. They would
        fail at compile or repeat another point; pruned here, before compiling, a sweep
        reports them once (its summary, and `dse validate`) instead of a row each."""
        return list(self._sorted_points[1])

    @cached_property
    def _sorted_points(self) -> tuple[tuple[DesignPoint, ...], tuple[tuple[DesignPoint, str], ...]]:
        """Every point of the space, models outermost, then dtypes, then knobs in spec order,
        sorted once into those a knob applies to and those left out (with why): a grid sweep
        asks for both before each trial it takes, and deciding a point builds its
        HardwareConfig (the jet space's 11,664 points: seconds a trial, hours a sweep)."""
        inside, outside = [], []
        for m in self.models:
            for dt in m.dtypes or self.dtypes:
                for knobs in self.knob_combinations():
                    p = DesignPoint(m.name, dt, knobs)
                    why = self.not_applicable(p)
                    if why:
                        outside.append((p, why))
                    else:
                        inside.append(p)
        return tuple(inside), tuple(outside)

    def knob_combinations(self) -> Iterator[FrozenMap[str, Any]]:
        names = [k.name for k in self.knobs]
        for values in itertools.product(*(k.values for k in self.knobs)):
            yield FrozenMap(zip(names, values))

    def points(self) -> Iterator[DesignPoint]:
        """Every design point a knob applies to (not `not_applicable`), models outermost,
        then dtypes, then knobs in spec order."""
        yield from self._sorted_points[0]

    def gate_bounds(self, model: str, dtype: str) -> tuple[Bound, ...]:
        return tuple(b for rule in self.gate if rule.matches(model, dtype) for b in rule.bounds)


# ---------------------------------------------------------------------------------------------
# loading

class _Loader(yaml.SafeLoader):
    """safe_load, but a key given twice in one mapping is an error instead of last-one-wins."""


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:
            continue   # unhashable key: construct_mapping reports it
        if first is not None:
            raise _DuplicateKey(
                None, None, f"duplicate key {key!r} (first given on line {first.start_mark.line + 1})",
                key_node.start_mark)
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_spec(path: str | Path) -> Spec:
    """Read and parse a spec file; raises SpecError."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError(str(path), "file not found") from None
    except OSError as e:
        raise SpecError(str(path), f"cannot read: {e.strerror or e}") from None
    return parse_spec(text, base_dir=path.parent, name=str(path), path=path)


def parse_spec(text: str | Mapping[str, Any], base_dir: str | Path = ".", name: str = "<spec>",
               path: Path | None = None) -> Spec:
    """Parse spec text (or an already loaded mapping); `source:` files are relative to base_dir."""
    data = load_yaml(text, name) if isinstance(text, str) else text
    if data is None:
        raise SpecError(name, f"the spec is empty; expected a mapping with keys {', '.join(_TOP_REQUIRED)}")
    try:
        return _Parser(Path(base_dir), path).spec(data)
    except SpecError as e:
        if not e.path:
            raise SpecError(name, e.message) from None
        raise


MAX_YAML_BYTES = 1 << 20
MAX_YAML_DEPTH = 32
MAX_YAML_VALUES = 100_000
"""A spec is a few hundred values a dozen levels deep. Text past these limits is refused
before it can exhaust the stack (`[` x 5000 nests past Python's recursion limit) or memory
(a "billion laughs" of aliases expands to 10**9 values when walked)."""


def load_yaml(text: str, name: str = "<yaml>") -> Any:
    """YAML text -> plain data, as specs are read (a key given twice is an error); raises
    SpecError with `name:line:column`. Pathological text (too large, too deep, aliases that
    expand too far) is refused with one line saying which limit it passed."""
    if len(text) > MAX_YAML_BYTES:
        raise SpecError(name, f"the file has {len(text):,} characters; a spec may have at most {MAX_YAML_BYTES:,}")
    _check_depth(text, name)
    try:
        data = yaml.load(text, Loader=_Loader)
    except RecursionError:
        raise SpecError(name, f"nested more than {MAX_YAML_DEPTH} levels deep") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        kind = "" if isinstance(e, _DuplicateKey) else "YAML syntax error: "
        raise SpecError(where, f"{kind}{e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise SpecError(name, f"YAML syntax error: {e}") from None
    _check_extent(data, name)
    return data


_OPEN = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken, yaml.BlockSequenceStartToken,
         yaml.BlockMappingStartToken)
_CLOSE = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)


def _check_depth(text: str, name: str) -> None:
    """Stop at the first token past MAX_YAML_DEPTH: the scanner is iterative and lazy, while
    the parser recurses (and takes seconds to reach Python's limit on `[` x 5000). Syntax
    errors are left for the loader, which reports them with their line."""
    depth = 0
    try:
        for token in yaml.scan(text):
            if isinstance(token, _OPEN):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise SpecError(name, f"nested more than {MAX_YAML_DEPTH} levels deep")
            elif isinstance(token, _CLOSE):
                depth -= 1
    except yaml.YAMLError:
        return


def _check_extent(data: Any, name: str) -> None:
    """Walk `data` without recursion, counting every value an alias repeats, and stop at the
    first limit passed."""
    stack, count = [(data, 1)], 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if depth > MAX_YAML_DEPTH:
            raise SpecError(name, f"nested more than {MAX_YAML_DEPTH} levels deep")
        if count > MAX_YAML_VALUES:
            raise SpecError(name, f"holds more than {MAX_YAML_VALUES:,} values (counting what YAML aliases "
                                  "repeat); a spec is far smaller")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for kv in value.items() for v in kv)
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def parse_gate(value: Any, models: Iterable[str], dtypes: Iterable[str], timing: bool = False) -> tuple[GateRule, ...]:
    """A `gate:` section on its own (a gate file of `dse check`), validated exactly as in a spec
    against the given model names and dtypes; raises SpecError with the path (`gate[1].luts_max`)."""
    parser = _Parser(Path("."), None)
    parser.dtypes, parser.timing = tuple(dtypes), timing
    return parser.gate(value, list(models))


# ---------------------------------------------------------------------------------------------
# parsing

_TOP_REQUIRED = ("study", "target", "models", "dtypes", "objectives", "search")
_TOP_OPTIONAL = ("knobs", "input_range", "constraints", "gate", "timing", "synthesis", "stage_timeout_s", "data")
SYNTH_FIDELITY = {"flat": "synth", "units": "synth_units", "kernels": "synth_kernels"}
"""The `synthesis` modes, and the `fidelity` of a row each one synthesised."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_BOUND_KEYS = {**{f"{m}_max": m for m, d in METRICS.items() if d is Direction.MINIMIZE},
               **{f"{m}_min": m for m, d in METRICS.items() if d is Direction.MAXIMIZE}}


def _some_combination_is_legal(knobs: list[Knob], path: str, limit: int = 100_000) -> None:
    """A knob space whose every combination HardwareConfig rejects has no design point: refuse
    it (a space with some illegal combinations is fine: those points fail with the reason).
    Spaces past `limit` combinations are not enumerated here."""
    knobs = [k for k in knobs if not is_format_knob(k.name)]
    if not knobs or math.prod(len(k.values) for k in knobs) > limit:
        return
    first = None
    for values in itertools.product(*(k.values for k in knobs)):
        try:
            HardwareConfig.from_dict(hardware_knobs(dict(zip((k.name for k in knobs), values))))
            return
        except (ValueError, TypeError) as e:
            first = first or e
    raise SpecError(path, f"no combination of these knob values is legal, e.g. {first}")


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


_ALIASES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float": "fp32",
            "char": "int8", "short": "int16", "int": "int32", "uchar": "uint8",
            "lut": "luts", "ff": "ffs", "dsps": "dsp", "brams": "bram", "fmax": "fmax_mhz", "latency": "latency_us",
            # OCP FP8 under the names of ml_dtypes, tinygrad, PyTorch and the OCP spec
            **{f"{p}{s}": "fp8e4m3" for p in ("float8_", "fp8_", "fp8", "") for s in ("e4m3", "e4m3fn")},
            **{f"{p}e5m2": "fp8e5m2" for p in ("float8_", "fp8_", "")},
            "fp8": "fp8e4m3' or 'fp8e5m2", "float8": "fp8e4m3' or 'fp8e5m2"}


def _suggest(word: Any, known: Iterable[str], noun: str = "known") -> str:
    """'; did you mean 'x'?' for a likely typo, else the known names."""
    known = list(known)
    if isinstance(word, str):
        alias = _ALIASES.get(word.lower(), "")
        if alias in known or word.lower() in known or alias and all(a in known for a in alias.split("' or '")):
            return f"; did you mean '{alias or word.lower()}'?"
        m = re.fullmatch(r"(max|min)_(\w+)", word)        # max_luts -> luts_max
        if m and f"{m[2]}_{m[1]}" in known:
            return f"; did you mean '{m[2]}_{m[1]}'?"
        close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
        if close:
            return f"; did you mean {close[0]!r}?"
    return f" ({noun}: {', '.join(known)})" if known else ""


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)


def _got(value: Any) -> str:
    return "nothing" if value is None else f"{_type_name(value)} ({value!r})" if isinstance(value, (dict, list)) else repr(value)


def _mapping(value: Any, path: str, required: Iterable[str] = (), optional: Iterable[str] = (),
             what: str = "a mapping") -> dict[str, Any]:
    """Check `value` is a mapping with all `required` keys and no others."""
    required, optional = list(required), list(optional)
    if not isinstance(value, dict):
        raise SpecError(path, f"expected {what}, got {_got(value)}")
    known = required + optional
    for key in value:
        if not isinstance(key, str):
            raise SpecError(path, f"keys must be strings, got {key!r}")
        if known and key not in known:
            raise SpecError(_join(path, key), "unknown key" + _suggest(key, known, "known keys"))
    for key in required:
        if key not in value:
            raise SpecError(_join(path, key), "required key is missing")
    return value


def _list(value: Any, path: str, what: str = "a list") -> list[Any]:
    """A non-empty list without duplicate values."""
    if not isinstance(value, list):
        raise SpecError(path, f"expected {what}, got {_got(value)}")
    if not value:
        raise SpecError(path, "must not be empty")
    seen: dict[tuple[type, Any], int] = {}
    for i, v in enumerate(value):
        key = (type(v), v) if isinstance(v, (str, int, float, bool, type(None))) else (type(v), repr(v))
        if key in seen:
            raise SpecError(_join(path, i), f"duplicate value {v!r} (also at [{seen[key]}])")
        seen[key] = i
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(path, f"expected a non-empty string, got {_got(value)}")
    return value


def _choice(value: Any, path: str, choices: Iterable[str], noun: str) -> str:
    choices = list(choices)
    if not isinstance(value, str):
        raise SpecError(path, f"expected one of {', '.join(choices)}, got {_got(value)}")
    if value not in choices:
        raise SpecError(path, f"unknown {noun} {value!r}" + _suggest(value, choices))
    return value


def _dtype(value: Any, path: str) -> str:
    """A number format (dse/models/formats.py): a known name, else one line with the closest."""
    try:
        return formats.parse(value).name
    except formats.FormatError as e:
        raise SpecError(path, str(e)) from None


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise SpecError(path, f"expected true or false, got {_got(value)}")
    return value


def _int(value: Any, path: str, minimum: int = 1, maximum: int | None = None, why: str = "") -> int:
    if type(value) is not int or value < minimum:
        what = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        raise SpecError(path, f"expected {what}, got {_got(value)}")
    if maximum is not None and value > maximum:
        raise SpecError(path, f"expected at most {maximum:,}{why}, got {_got(value)}")
    return value


def _number(value: Any, path: str, positive: bool = False) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise SpecError(path, f"expected a {'positive' if positive else 'non-negative'} number, got {_got(value)}")
    return value


class _Parser:
    def __init__(self, base_dir: Path, path: Path | None):
        self.base_dir, self.path = base_dir, path
        self.refused: list[tuple[str, str, str]] = []      # (model, dtype, why): Spec.refused

    def spec(self, data: Any) -> Spec:
        # `dtypes` may be left out when the models give their own (all_dtypes names one that does not)
        own = isinstance(data, dict) and isinstance(data.get("models"), list) and any(
            isinstance(m, dict) and "dtypes" in m for m in data["models"])
        required = tuple(k for k in _TOP_REQUIRED if k != "dtypes" or not own)
        top = _mapping(data, "", required, _TOP_OPTIONAL + (("dtypes",) if own else ()),
                       what="a mapping with keys " + ", ".join(_TOP_REQUIRED))
        study = _str(top["study"], "study")
        if not _NAME.fullmatch(study):
            raise SpecError("study", f"expected a name of letters, digits, '_', '-' and '.' "
                                     f"(it names the results directory), got {study!r}")
        target = Target(_choice(top["target"], "target", [t.value for t in Target], "target"))
        self.top_dtypes = self.dtype_list(top["dtypes"], "dtypes") if "dtypes" in top else ()
        self.dtypes = self.all_dtypes(top["models"])
        self.timing = self.timing_spec(top.get("timing", False), "timing")
        if self.timing and target.value not in PNR_FAMILIES:
            raise SpecError("timing", f"place-and-route needs target {' or '.join(PNR_FAMILIES)}; "
                                      f"{target.value} has no open-source place-and-route here "
                                      "(set timing: false, or change the target)")
        synthesis = _choice(top.get("synthesis", "flat"), "synthesis", list(SYNTH_FIDELITY), "synthesis")
        if synthesis in ("units", "kernels") and self.timing:
            raise SpecError("synthesis", f"'{synthesis}' writes no netlist, and place-and-route (timing: true) needs a "
                                         "flat one: use synthesis: flat with timing")
        top_ranges = self.input_ranges(top["input_range"], "input_range") if "input_range" in top else {}
        self.top_data = self.data(top["data"], "data") if "data" in top else None
        models = self.models(top["models"], top_ranges)
        knobs = self.knobs(top.get("knobs", {}), "knobs")
        self.check_layers(knobs, models, "knobs")
        self.check_prune(knobs, models, "knobs")
        self.check_constant_weights(knobs, models, "knobs")
        objectives = self.objectives(top["objectives"])
        knob_space = math.prod(len(k.values) for k in knobs)
        search = self.search(top["search"], sum(len(m.dtypes or self.dtypes) for m in models) * knob_space)
        constraints = self.constraints(top["constraints"], target.value) if "constraints" in top else ()
        gate = self.gate(top["gate"], [m.name for m in models]) if "gate" in top else ()
        timeout = (_number(top["stage_timeout_s"], "stage_timeout_s", positive=True)
                   if "stage_timeout_s" in top else DEFAULT_STAGE_TIMEOUT_S)
        if timeout > MAX_STAGE_TIMEOUT_S:
            raise SpecError("stage_timeout_s", f"expected at most {MAX_STAGE_TIMEOUT_S:,.0f} (a week), got {timeout!r}")
        spec = Spec(study, target, models, self.dtypes, knobs, objectives, search, constraints, gate,
                    self.timing, float(timeout), self.path, synthesis, tuple(self.refused))
        if not spec.space_size:
            (point, why), *_ = spec.not_applicable_points()
            raise SpecError("knobs" if spec.knobs else "dtypes", f"every point is left out of the search space, e.g. "
                                                                 f"{point.model} {point.dtype}: {why}")
        if search.sampler is Sampler.GRID and "trials" not in top["search"]:
            # the whole grid: its points, not counting the ones a knob cannot apply to
            spec = dataclasses.replace(spec, search=dataclasses.replace(search, trials=spec.space_size))
        return spec

    # -- models

    def models(self, value: Any, top_ranges: dict[str, InputRange]) -> tuple[ModelSpec, ...]:
        items = _list(value, "models", "a list of models")
        names: dict[str, int] = {}
        out = []
        for i, item in enumerate(items):
            path = _join("models", i)
            m = self.model(item, path, top_ranges)
            if m.name in names:
                raise SpecError(_join(path, "name"), f"duplicate model name {m.name!r} (also models[{names[m.name]}])")
            names[m.name] = i
            out.append(m)
        return tuple(out)

    def dtype_list(self, value: Any, path: str) -> tuple[str, ...]:
        out = tuple(_dtype(v, _join(path, i)) for i, v in enumerate(_list(value, path, "a list of dtypes")))
        if not out:
            raise SpecError(path, "must not be empty")
        return out

    def all_dtypes(self, models: Any) -> tuple[str, ...]:
        """The top-level dtypes, then every model's own ones not among them (each model's checks
        run over its own: `model`). A model without `dtypes:` needs the top-level list."""
        out = list(self.top_dtypes)
        for i, item in enumerate(models if isinstance(models, list) else []):
            if isinstance(item, dict) and "dtypes" in item:
                out += [d for d in self.dtype_list(item["dtypes"], _join(_join("models", i), "dtypes")) if d not in out]
            elif not self.top_dtypes:
                raise SpecError(_join("models", i), "needs 'dtypes' (here or at the top level): the number formats "
                                                    "to run it in")
        return tuple(out)

    def model(self, value: Any, path: str, top_ranges: dict[str, InputRange]) -> ModelSpec:
        """One model, checked in each of its dtypes (its own `dtypes:`, else the top-level ones)."""
        union = self.dtypes
        own = self.dtype_list(value["dtypes"], _join(path, "dtypes")) if isinstance(value, dict) and "dtypes" in value \
            else self.top_dtypes
        self.dtypes = own
        try:
            m = self.model_entry(value, path, {dt: r for dt, r in top_ranges.items() if dt in own})
        finally:
            self.dtypes = union
        # a model keeps its list where the spec's differs (a model's own, or the top-level list
        # beside other models' own); else () says "the spec's"
        return dataclasses.replace(m, dtypes=own if own != union else ())

    def model_entry(self, value: Any, path: str, top_ranges: dict[str, InputRange]) -> ModelSpec:
        d = _mapping(value, path, ["name"], ["builtin", "source", "params", "input_range", "weights", "onnx", "data",
                                             "prune", "qat", "dtypes"])
        name = _str(d["name"], _join(path, "name"))
        if not _NAME.fullmatch(name):
            raise SpecError(_join(path, "name"), f"expected a name of letters, digits, '_', '-' and '.', got {name!r}")
        kinds = [k for k in ("builtin", "source", "weights", "onnx") if k in d]
        if "onnx" in d or ("weights" in d and "builtin" not in d and "source" not in d):
            if len(kinds) != 1:
                raise SpecError(path, f"give one of 'builtin', 'source', 'weights' or 'onnx', not {' and '.join(kinds)} "
                                      "('weights' alone is a trained dense network: arrays W1, b1, W2, b2, ...; "
                                      "beside 'source' or 'builtin' it fills that model's inputs by name)")
            return self.trained_model(d, name, path, kinds[0])
        for key, what in (("prune", "pruning"), ("qat", "quantisation-aware fine-tuning")):
            if key in d:
                raise SpecError(_join(path, key), f"{what} applies to a trained network the tool quantises "
                                                  "('weights:' alone or 'onnx:'); a builtin or source model brings "
                                                  "its own weights")
        if ("builtin" in d) == ("source" in d):
            raise SpecError(path, "give either 'builtin' (a zoo model) or 'source' (path/to/file.py:function)"
                                  + (", not both" if "builtin" in d else ""))
        given = _mapping(d.get("params", {}), _join(path, "params"))
        for k, v in given.items():
            if not isinstance(v, (str, int, float, bool)):
                raise SpecError(_join(_join(path, "params"), k), f"expected a number, string or boolean, got {_got(v)}")
        ranges = {**top_ranges, **(self.input_ranges(d["input_range"], _join(path, "input_range"))
                                   if "input_range" in d else {})}
        if "builtin" in d:
            builtin = _choice(d["builtin"], _join(path, "builtin"), zoo.ZOO, "builtin model")
            try:
                params = zoo.ZOO[builtin].resolve_params(given)
            except zoo.ParamError as e:
                raise SpecError(_join(_join(path, "params"), e.param) if e.param else _join(path, "params"), e.message) from None
            m = ModelSpec(name, builtin, None, None, FrozenMap(params), FrozenMap(ranges))
        else:
            src_path = _join(path, "source")
            try:
                file, function = parse_source(_str(d["source"], src_path))
                source = (self.base_dir / file).resolve()
                fn = load_function(source, function)
                params = bind_params(fn, dict(given), f"{function}() in {file}")
            except UserModelError as e:
                raise SpecError(_join(path, "params") if "parameter" in str(e) else src_path, str(e)) from None
            m = ModelSpec(name, None, source, function, FrozenMap(params), FrozenMap(ranges))
        self.check_builds(m, path, own_range="input_range" in d)
        if "weights" in d or "data" in d:
            m = dataclasses.replace(m, files=self.model_files(d, m, path))
        return m

    def onnx_model(self, name: str, file: Path, data, path: str, not_dense: str) -> ModelSpec:
        """An ONNX graph that is not a dense chain: the whole graph, run by tinygrad's importer,
        its float initialisers as the weights; float dtypes only (no quantisation applies)."""
        from dse.models.data import DataError, check_graph_runs
        from dse.models.onnx_file import declares_quantisation
        files = ModelFiles(file, data)
        m = ModelSpec(name, None, None, None, FrozenMap(), FrozenMap(), files=files, onnx=file)
        for dt in self.dtypes:
            if not DTYPES[dt].is_float and declares_quantisation(file):   # tinygrad cannot run it in floats either
                raise SpecError(_join(path, "onnx"), f"dtype {dt}: {not_dense}")
        if any(DTYPES[dt].is_float for dt in self.dtypes):
            try:            # shapes that do not fit, named by node before any point runs the graph
                check_graph_runs(file)
            except DataError as e:
                raise SpecError(_join(path, "onnx"), str(e)) from None

        def builds(dt: str) -> None:
            if not DTYPES[dt].is_float:
                raise SpecError(_join(path, "onnx"), f"dtype {dt}: the tool's post-training quantisation covers "
                                                     f"chains of convolutions, max-pools and dense layers, and "
                                                     f"{not_dense}; run this graph in fp32, fp16 or bf16")
            try:
                inputs = m.build(dt).inputs
            except DataError as e:
                raise SpecError(_join(path, "onnx"), str(e)) from None
            try:
                files.inputs(inputs, dt)
            except DataError as e:
                raise SpecError(_join(path, "data"), f"dtype {dt}: {e}") from None
        self.per_dtype(name, builds)
        return m

    def model_files(self, d: dict, m: ModelSpec, path: str) -> "ModelFiles":
        """`weights:` and `data:` of a builtin or source model, checked against its inputs in
        every dtype of the spec: arrays by name and shape, values the dtype can hold."""
        from dse.models.data import DataError
        weights = None
        if "weights" in d:
            weights = (self.base_dir / _str(d["weights"], _join(path, "weights"))).resolve()
            if not weights.is_file():
                raise SpecError(_join(path, "weights"), f"file not found: {weights}")
        # the top-level data is for trained networks; a model without weights names its own
        data = (self.data(d["data"], _join(path, "data"), dense=False) if "data" in d
                else self.top_data if weights is not None else None)
        files = ModelFiles(weights, data)
        for dt in self.dtypes:
            inputs = m.build(dt).inputs
            try:
                files.inputs(inputs, dt, with_data=False)
            except DataError as e:
                raise SpecError(_join(path, "weights"), f"dtype {dt}: {e}") from None
            if data is None:
                continue
            try:
                files.inputs(inputs, dt)
            except DataError as e:
                raise SpecError(_join(path, "data"), f"dtype {dt}: {e}") from None
        return files

    def trained_model(self, d: dict, name: str, path: str, kind: str) -> ModelSpec:
        from dse.models.data import DataError, NotDenseChain
        for key in ("params", "input_range"):
            if key in d:
                raise SpecError(_join(path, key), f"not used with '{kind}' (the network's shapes come from the file, "
                                                  "its data from 'data')")
        file = (self.base_dir / _str(d[kind], _join(path, kind))).resolve()
        if not file.is_file():
            raise SpecError(_join(path, kind), f"file not found: {file}")
        data = self.data(d["data"], _join(path, "data")) if "data" in d else self.top_data
        if data is None:
            raise SpecError(path, "a trained network needs 'data' (here or at the top level) to measure its accuracy on")
        sparsity = 0.0
        if "prune" in d:
            from dse.models.prune import check_sparsity
            try:
                sparsity = check_sparsity(d["prune"])
            except ValueError as e:
                raise SpecError(_join(path, "prune"), str(e)) from None
        trained = TrainedModel(kind, file, data)          # checked unpruned; pruning needs a sound network
        try:
            net = trained.net()
        except NotDenseChain as e:
            if kind != "onnx":
                raise SpecError(_join(path, kind), str(e)) from None
            return self.onnx_model(name, file, data, path, str(e))
        except DataError as e:
            raise SpecError(_join(path, kind), str(e)) from None
        try:
            dataset = trained.dataset()
        except DataError as e:
            raise SpecError(_join(path, "data"), str(e)) from None
        width = int(np.prod(dataset.sample_shape))
        if width != net.inputs:
            raise SpecError(_join(path, "data"), f"{dataset.name} samples have shape {dataset.sample_shape} "
                                                 f"({width} values), the network takes {net.inputs}")
        self.check_labels(dataset, net, _join(path, "data"))
        from dse.models.quantize import DenseNet
        if sparsity and not isinstance(net, DenseNet):
            raise SpecError(_join(path, "prune"), "pruning covers dense networks (Gemm/MatMul/Relu chains); this "
                                                  "one has convolutions")
        if sparsity:
            from dse.models.prune import check_keeps_weights
            try:
                check_keeps_weights(net, sparsity)
            except ValueError as e:
                raise SpecError(_join(path, "prune"), str(e)) from None
        trained = dataclasses.replace(trained, prune=sparsity)
        qat = (self.qat(d["qat"], _join(path, "qat"), net, dataset, _join(path, "data") if "data" in d else "data")
               if "qat" in d else None)
        computes = [layer for layer in net.layers if hasattr(layer, "W")]     # the conv/dense layers
        if isinstance(net, DenseNet):
            m = ModelSpec(name, None, None, None, FrozenMap(), FrozenMap(), trained)
        else:   # a CNN chain: quantised for integer dtypes, the whole graph for float ones
            m = ModelSpec(name, None, None, None, FrozenMap(), FrozenMap(), trained, ModelFiles(file, data), file)

        def builds(dt: str) -> None:
            zero = next((i for i, layer in enumerate(computes) if not np.abs(layer.W).any()), None)
            if zero is not None and quantisable(dt):     # else its bias, on a scale set by no weight, leaves int32
                raise SpecError(_join(path, kind), f"dtype {dt}: every weight of layer {zero + 1} "
                                                   f"({layer_names(computes)[zero]}) is zero, so its outputs are its "
                                                   "biases whatever the input: no weight scale to quantise it by")
            try:
                built = m.build(dt)
                if m.files is not None and DTYPES[dt].is_float and not m.runs_trained(dt):
                    m.files.inputs(built.inputs, dt)
            except (ValueError, DataError) as e:
                raise SpecError(_join(path, kind), f"dtype {dt}: {str(e).removeprefix(f'{dt}: ')}") from None
        self.per_dtype(name, builds)      # checked without fine-tuning: it changes the values, not the layers
        return m if qat is None else dataclasses.replace(m, trained=dataclasses.replace(trained, qat=qat))

    @staticmethod
    def qat(value: Any, path: str, net, dataset, data_path: str):
        """`qat:` of a trained network: true, false or a mapping of dse.models.qat.OPTION_KEYS;
        the network must be one the tool trains, and the data must hold a training split apart
        from the test samples."""
        from dse.models.qat import QatOptionError, check_trainable, parse_options
        try:
            options = parse_options(value)
        except QatOptionError as e:
            raise SpecError(_join(path, e.key) if e.key is not None else path, e.message) from None
        if options is None:
            return None
        try:
            check_trainable(net)
        except ValueError as e:
            raise SpecError(path, str(e)) from None
        if dataset.train_is_test:
            raise SpecError(data_path, f"{dataset.name} has no training split (x_train), and fine-tuning (qat) on "
                                       "the test samples would score the network on what it trained on: give "
                                       "'split: F' (the fraction of the samples to train on) or x_train and y_train "
                                       "in the file")
        return options

    def per_dtype(self, name: str, check) -> None:
        """`check(dtype)` (raising SpecError) for each dtype of model `name`: a dtype that fails is
        left out of the search space (Spec.refused; said once, as other points left out are)
        while the model's other dtypes run; when every dtype fails, the first failure is the
        spec's error."""
        failed: dict[str, SpecError] = {}
        for dt in self.dtypes:
            try:
                check(dt)
            except SpecError as e:
                failed[dt] = e
        if failed and len(failed) == len(self.dtypes):
            raise next(iter(failed.values()))
        self.refused += [(name, dt, e.message.removeprefix(f"dtype {dt}: ")) for dt, e in failed.items()]

    @staticmethod
    def check_labels(dataset, net, path: str) -> None:
        """Every label of the data one of the network's classes (its outputs): a label beyond
        them is never predicted, and would only read as a wrong answer."""
        from dse.models.classes import classes as n_classes
        classes = n_classes(int(np.asarray(net.float_logits(dataset.x_test[:1].reshape(1, -1))).shape[-1]))
        for split, y in (("test", dataset.y_test), ("training", dataset.y_train)):
            if y is None or not len(y) or y.max() < classes:
                continue
            i = int(np.argmax(y >= classes))
            raise SpecError(path, f"{dataset.name}: the label {int(y[i])} ({split} sample {i}) is not one of the "
                                  f"network's {classes} classes (its outputs: labels 0 to {classes - 1})")

    def data(self, value: Any, path: str, dense: bool = True):
        from dse.models.data import DataError, DataSpec, SKLEARN_DATASETS
        d = _mapping(value, path, [], ["dataset", "file", "samples", "input", "split"],
                     what="{dataset: sklearn:NAME} or {file: PATH.npz}, with optional samples: N")
        if ("dataset" in d) == ("file" in d):
            raise SpecError(path, "give exactly one of 'dataset: sklearn:NAME' or 'file: PATH.npz'")
        if "dataset" in d:
            name = _str(d["dataset"], _join(path, "dataset"))
            known = [f"sklearn:{n}" for n in SKLEARN_DATASETS]
            _choice(name, _join(path, "dataset"), known, "dataset")
        file = None
        if "file" in d:
            file = (self.base_dir / _str(d["file"], _join(path, "file"))).resolve()
            if not file.is_file():
                raise SpecError(_join(path, "file"), f"file not found: {file}")
        samples = _int(d["samples"], _join(path, "samples"), maximum=1_000_000) if "samples" in d else None
        if "input" in d and dense:
            raise SpecError(_join(path, "input"), "a trained dense network has one input, 'x': leave 'input' out")
        named = _str(d["input"], _join(path, "input")) if "input" in d else None
        split = d.get("split")
        if split is not None and "file" not in d:
            raise SpecError(_join(path, "split"), "the scikit-learn datasets come split (75% to train on); "
                                                  "'split' takes a training split from a data file without one")
        if split is not None and (isinstance(split, bool) or not isinstance(split, (int, float)) or not 0 < split < 1):
            raise SpecError(_join(path, "split"), f"expected the fraction of the samples to train on, between 0 "
                                                  f"and 1 (exclusive), got {_got(split)}")
        try:
            return DataSpec(dataset=d.get("dataset"), file=file, samples=samples, input=named,
                            split=float(split) if split is not None else None)
        except DataError as e:
            raise SpecError(path, str(e)) from None

    def check_builds(self, m: ModelSpec, path: str, own_range: bool) -> None:
        """Build the model for every dtype: describing it must work before anything compiles."""
        for dt in self.dtypes:
            if m.builtin is not None and zoo.ZOO[m.builtin].floats_only and not DTYPES[dt].is_float:
                floats = ", ".join(d for d in self.dtypes if DTYPES[d].is_float) or "fp32, fp16 or bf16"
                raise SpecError(_join(path, "builtin"), f"builtin model {m.builtin!r} needs a float dtype: its "
                                                        f"exp, division or square root have no integer meaning; "
                                                        f"dtype {dt} cannot run it (use {floats})")
            if m.builtin is not None:
                try:
                    built = m.build(dt)
                except ValueError as e:     # the zoo's own checks, e.g. conv2d's K against H
                    raise SpecError(_join(path, "params"), str(e)) from None
            else:
                call = f"{m.function}({dt!r}{''.join(f', {k}={v!r}' for k, v in m.params.items())})"
                try:
                    fn = load_function(m.source, m.function)  # type: ignore[arg-type]
                    with time_limit(IMPORT_TIME_LIMIT_S, "describing the model"):   # build() only describes
                        result = fn(dt, **m.params)
                except Exception as e:
                    raise SpecError(path, f"{call} raised {type(e).__name__}: {e}") from None
                try:
                    built = zoo.check_built(result)
                except ValueError as e:
                    raise SpecError(_join(path, "source"), f"{call} breaks the model contract: {e}") from None
            r = m.input_range(dt)
            for inp, (_, in_dt) in built.inputs.items():
                try:
                    zoo.check_input_range(r or zoo.default_input_range(in_dt), in_dt)
                except ValueError as e:
                    raise SpecError(_join(path, "input_range") if own_range else "input_range",
                                    f"input {inp!r} of model {m.name!r} is {in_dt}: {e}") from None

    # -- input ranges

    def input_ranges(self, value: Any, path: str) -> dict[str, InputRange]:
        """{min, max} for every dtype of the spec, or {dtype: {min, max}}."""
        d = _mapping(value, path, what="{min: ..., max: ...} or {dtype: {min: ..., max: ...}}")
        if not d:
            raise SpecError(path, "must not be empty")
        if any(k in ("min", "max") for k in d):
            r = self.input_range(d, path)
            out = {dt: r for dt in self.dtypes}
        else:
            out = {}
            for k, v in d.items():
                if k in DTYPES and k not in self.dtypes:
                    raise SpecError(_join(path, k), f"{k} is not one of the spec's dtypes ({', '.join(self.dtypes)})")
                if k not in self.dtypes:
                    raise SpecError(_join(path, k), "unknown key; expected min and max, or dtypes"
                                    + _suggest(k, ("min", "max") + self.dtypes, "known keys"))
                out[k] = self.input_range(v, _join(path, k))
        for dt, r in out.items():
            try:
                zoo.check_input_range(r, dt)
            except ValueError as e:
                raise SpecError(path if "min" in d else _join(path, dt), str(e)) from None
        return out

    def input_range(self, value: Any, path: str) -> InputRange:
        d = _mapping(value, path, ["min", "max"], what="{min: ..., max: ...}")
        lo, hi = d["min"], d["max"]
        for k in ("min", "max"):
            if type(d[k]) not in (int, float) or not math.isfinite(d[k]):
                raise SpecError(_join(path, k), f"expected a number, got {_got(d[k])}")
        if lo > hi:
            raise SpecError(path, f"min ({lo}) is greater than max ({hi})")
        return InputRange(lo, hi)

    # -- knobs, objectives, search

    def knobs(self, value: Any, path: str) -> tuple[Knob, ...]:
        d = _mapping(value, path, what="a mapping of knob names to lists of candidate values")
        known = HardwareConfig.knob_names()
        out = []
        for name, values in d.items():
            kpath = _join(path, name)
            base, at, layer = str(name).partition("@")
            if base in FORMAT_KNOBS:
                out.append(self.format_knob(name, values, kpath))
                continue
            if name == PRUNE_KNOB:
                out.append(self.prune_knob(values, kpath))
                continue
            if at and base not in LAYER_KNOBS:
                raise SpecError(kpath, f"{base!r} cannot be set per layer; per-layer knobs: "
                                       + ", ".join(f"{k}@<layer>" for k in LAYER_KNOBS))
            if at and not re.fullmatch(r"[A-Za-z0-9_.-]+", layer):
                raise SpecError(kpath, f"expected <knob>@<layer index or name>, got {name!r}")
            if not at and name not in known:
                raise SpecError(kpath, "unknown hardware knob" + _suggest(
                    name, [*known, *(f"{k}@<layer>" for k in LAYER_KNOBS)], "known knobs"))
            if not isinstance(values, list):
                raise SpecError(kpath, f"expected a list of candidate values, got {_got(values)}"
                                       + (f" (write [{values}] for a single value)" if isinstance(values, (str, int, float)) else ""))
            for j, v in enumerate(_list(values, kpath)):
                if v is None and name in OFF_KNOBS:
                    pass                              # `null`: the knob off, beside values that set it
                elif not isinstance(v, (str, int, float, bool)):
                    raise SpecError(_join(kpath, j), f"expected a number, string or boolean, got {_got(v)}"
                                    + (f" ({name} cannot be off)" if v is None else ""))
                try:
                    check_knob_value(name, v)
                except (ValueError, TypeError) as e:
                    raise SpecError(_join(kpath, j), str(e)) from None
            out.append(Knob(name, tuple(values)))
        at, why = fold_conflict((k.name for k in out), next((k.values for k in out if k.name == "fold"), ()))
        if why:
            raise SpecError(_join(path, at), why)
        schedules = next((k.values for k in out if k.name == "schedule"), ("sequential",))
        for k in out:
            if k.name in DATAFLOW_ONLY and "dataflow" not in schedules and any(v is not False for v in k.values):
                raise SpecError(_join(path, k.name), f"{k.name} is how schedule=dataflow runs its stages, and no "
                                                     "point is dataflow: add dataflow to schedule")
        _some_combination_is_legal(out, path)
        return tuple(out)

    def prune_knob(self, values: Any, path: str) -> Knob:
        """`prune: [0, 0.5, 0.75]`: sparsities of the trained dense networks (checked against each
        model in check_prune)."""
        from dse.models.prune import check_sparsity
        items = _list(values, path, "a list of sparsities")
        for j, v in enumerate(items):
            try:
                check_sparsity(v)
            except ValueError as e:
                raise SpecError(_join(path, j), str(e)) from None
        return Knob(PRUNE_KNOB, tuple(float(v) for v in items))

    def check_prune(self, knobs: Sequence[Knob], models: Sequence[ModelSpec], path: str) -> None:
        """The `prune` knob needs every model to be a trained dense network without a `prune:` of
        its own, and no sparsity may leave a layer without a weight."""
        knob = next((k for k in knobs if k.name == PRUNE_KNOB), None)
        if knob is None:
            return
        from dse.models.prune import check_keeps_weights
        from dse.models.quantize import DenseNet
        for i, m in enumerate(models):
            if m.trained is None or not isinstance(m.trained.net(), DenseNet):
                raise SpecError(_join(path, PRUNE_KNOB), f"pruning applies to a trained dense network the tool "
                                                        f"quantises ('weights:' or a dense 'onnx:' chain); model "
                                                        f"{m.name} is not one")
            if m.trained.prune:
                raise SpecError(_join(path, PRUNE_KNOB), f"model {m.name} has a prune: of its own "
                                                        f"({m.trained.prune:g}); give the sparsities in one place")
            for j, v in enumerate(knob.values):
                try:
                    check_keeps_weights(m.trained.net(), v)
                except ValueError as e:
                    raise SpecError(_join(_join(path, PRUNE_KNOB), j), f"model {m.name}: {e}") from None

    def format_knob(self, name: str, values: Any, path: str) -> Knob:
        """`weight_bits`, `act_bits`, `scale_digits` (and `@<layer>`): widths and multiplier digits of
        the tool's quantiser."""
        _, at, layer = name.partition("@")
        if at and not re.fullmatch(r"[A-Za-z0-9_.-]+", layer):
            raise SpecError(path, f"expected <knob>@<layer index or name>, got {name!r}")
        lo, hi, what = format_range(name)
        items = _list(values, path, "a list of " + ("digit counts" if name.startswith("scale_digits") else "bit widths"))
        for j, v in enumerate(items):
            _int(v, _join(path, j), minimum=lo, maximum=hi, why=f" ({what})")
        return Knob(name, tuple(items))

    def check_layers(self, knobs: tuple[Knob, ...], models: tuple[ModelSpec, ...], path: str) -> None:
        """Every `<knob>@<layer>` names a layer each model has in each dtype (its kernels, traced
        without compiling: a fraction of a second a model), else the error lists its layers."""
        self.check_format_layers(knobs, models, path)
        wanted = [(k, k.name.partition("@")[2]) for k in knobs if "@" in k.name and not is_format_knob(k.name)]
        if not wanted:
            return
        for m in models:
            for dtype in m.dtypes or self.dtypes:
                try:
                    limits = model_layer_limits(m, dtype)
                except Exception:        # noqa: BLE001 - a model that does not build fails as its points do
                    continue
                names = [n for n, _, _ in limits]
                aliases = layer_kernels(m, dtype)       # a conv/dense layer by its name (W1), as format knobs
                for knob, layer in wanted:
                    index = (int(layer) if layer.isdigit() and int(layer) < len(names) else names.index(layer)
                             if layer in names else aliases.get(layer))
                    if index is not None:
                        self.check_fits(knob, limits[index], m, dtype, _join(path, knob.name))
                        continue
                    listing = ", ".join(f"{i} ({n}{''.join(f' or {a}' for a, k in aliases.items() if k == i)})"
                                        for i, n in enumerate(names))
                    raise SpecError(_join(path, knob.name), f"model {m.name!r} ({dtype}) has no layer {layer!r}; its "
                                                            f"{len(names)} layer{'s' * (len(names) != 1)}: {listing}")

    @staticmethod
    def check_fits(knob: Knob, limit: tuple[str, int, int], m: ModelSpec, dtype: str, path: str) -> None:
        """A layer's own lanes or reduce_unroll (its reuse factor) no larger than the layer."""
        base = knob.name.partition("@")[0]
        if base not in ("lanes", "reduce_unroll"):
            return
        name, lanes, unroll = limit
        most = lanes if base == "lanes" else unroll
        for j, v in enumerate(knob.values):
            if isinstance(v, int) and v > most:
                what = (f"its output loop has {most} iteration{'s' * (most != 1)}" if base == "lanes"
                        else f"its reduction has {most} term{'s' * (most != 1)}")
                raise SpecError(_join(path, j), f"{base}={v} does not fit layer {name} of model {m.name!r} ({dtype}): "
                                                f"{what}; use 1 to {most} ({most}: the whole layer in one step)")

    def check_constant_weights(self, knobs: tuple[Knob, ...], models: tuple[ModelSpec, ...], path: str) -> None:
        """`weights: constant` (model-wide or for a layer) only for models with weights known at
        compile time: trained ones, a weights file, a builtin's seeded weights, a model's own
        constants. A model whose every input is given at run time has nothing to build in."""
        asked = [k for k in knobs if k.name.partition("@")[0] == "weights" and "constant" in k.values]
        if not asked:
            return
        for m in models:
            for dtype in m.dtypes or self.dtypes:
                try:
                    n = model_constants(m, dtype)
                except Exception:        # noqa: BLE001 - a model that does not build fails as its points do
                    continue
                if n == 0:
                    runtime = ", ".join(m.runtime_inputs(dtype))
                    raise SpecError(_join(path, asked[0].name), f"constant weights for model {m.name!r} ({dtype}), whose "
                                    f"inputs are all given at run time ({runtime}): it has no weights known at "
                                    "compile time to build in; give them with 'weights:' beside the model, or use "
                                    "weights: [memory]")

    def check_format_layers(self, knobs: tuple[Knob, ...], models: tuple[ModelSpec, ...], path: str) -> None:
        """Every `<format knob>@<layer>` names a conv/dense layer of each network the tool
        quantises (by index or by its weights' name); models it does not apply to are skipped."""
        wanted = [(k.name, k.name.partition("@")[2]) for k in knobs if "@" in k.name and is_format_knob(k.name)]
        if not any(is_format_knob(k.name) for k in knobs):
            return
        trained = [m for m in models if m.trained is not None]
        if not trained:
            raise SpecError(path, "weight_bits, act_bits and scale_digits set how the tool quantises a network "
                                  "(`weights:` or `onnx:`); the spec has none")
        self.check_format_fits(knobs, trained, path)
        for m in trained:
            names = quantised_layers(m)
            named = any(not (layer.isdigit() or layer in names) for _, layer in wanted)
            # a layer by its kernel's name, as lanes@
            kernels = kernel_layer_names(m, m.dtypes or self.dtypes) if named else {}
            for name, layer in wanted:
                resolved = kernels.get(layer, layer)
                if name.startswith(("act_bits@", "scale_digits@")) and resolved in (str(len(names) - 1), names[-1]):
                    raise SpecError(_join(path, name), "the last layer outputs int32 logits, not activations")
                missing = missing_format_layer(m, layer, kernels)
                if missing:
                    raise SpecError(_join(path, name), missing)

    def check_format_fits(self, knobs: tuple[Knob, ...], trained: list[ModelSpec], path: str) -> None:
        """Each format knob applies to some point (an integer dtype of a network the tool
        quantises), and each of its values fits some such point: a value that fits none would
        only leave out every point it is in. (A value some dtypes hold and others not is left out
        of the others: Spec.format_not_applicable.)"""
        refused = {(m, d) for m, d, _ in self.refused}
        dtypes = list(dict.fromkeys(dt for m in trained for dt in (m.dtypes or self.dtypes)
                                    if quantisable(dt) and (m.name, dt) not in refused))
        for k in knobs:
            if not is_format_knob(k.name):
                continue
            if not dtypes:
                raise SpecError(_join(path, k.name), f"{k.name.partition('@')[0]} {FORMATS_APPLY}; no point of the "
                                                     f"spec is one (dtypes: {', '.join(self.dtypes)})")
            for j, v in enumerate(k.values):
                if not all(format_misfit(k.name, v, dt) for dt in dtypes):
                    continue
                if len(dtypes) == 1:
                    raise SpecError(_join(_join(path, k.name), j),
                                    f"{k.name}={v} {format_misfit(k.name, v, dtypes[0])}")
                side = 0 if k.name.startswith("weight_bits") else 1
                ranges = ", ".join(f"{dt} {MIN_BITS} to {dtype_bits(dt)[side]}" for dt in dtypes)
                raise SpecError(_join(_join(path, k.name), j), f"{k.name}={v} fits none of the spec's integer dtypes "
                                f"(bits of {'weights' if side == 0 else 'activations'}: {ranges})")

    def objectives(self, value: Any) -> tuple[Objective, ...]:
        out = []
        for i, v in enumerate(_list(value, "objectives", "a list of metrics")):
            metric = _choice(v, _join("objectives", i), METRICS, "objective")
            self.need_timing(metric, _join("objectives", i))
            out.append(Objective(metric, METRICS[metric]))
        return tuple(out)

    def timing_spec(self, value: Any, path: str) -> TimingSpec | None:
        """`timing: false | true | {router, placer, seed, freq_mhz, check_netlist, regroup, repair}`; `placer`
        and `seed` a value or a list of values (every combination placed, the fastest kept)."""
        if type(value) is bool:
            return TimingSpec() if value else None
        if not isinstance(value, dict):
            raise SpecError(path, "expected true, false or a mapping {router, placer, seed, freq_mhz, check_netlist, "
                                  f"regroup, repair}}, got {_got(value)}")
        d = _mapping(value, path, optional=["router", "placer", "seed", "freq_mhz", "check_netlist", "regroup",
                                            "repair"],
                     what="true, false or a mapping of place-and-route settings")
        t = TimingSpec()

        def one_or_more(key: str, default: Any, check: Callable[[Any, str], Any]) -> list[Any]:
            raw = d.get(key, default)
            if not isinstance(raw, list):
                return [check(raw, _join(path, key))]
            if not raw:
                raise SpecError(_join(path, key), f"expected a {key} or a non-empty list of them, got []")
            values = [check(v, _join(_join(path, key), i)) for i, v in enumerate(raw)]
            if len(set(values)) < len(values):
                raise SpecError(_join(path, key), f"a {key} given twice in {raw!r}")
            return values
        placers = one_or_more("placer", t.placer, lambda v, where: _choice(v, where, PLACERS, "placer"))
        seeds = one_or_more("seed", t.seed, lambda v, where: _int(v, where, minimum=0, maximum=2**31 - 1))
        runs = [(p, s) for p in placers for s in seeds]
        return TimingSpec(
            router=_choice(d.get("router", t.router), _join(path, "router"), ROUTERS, "router"),
            placer=runs[0][0], seed=runs[0][1], more=tuple(runs[1:]),
            freq_mhz=float(_number(d.get("freq_mhz", t.freq_mhz), _join(path, "freq_mhz"), positive=True)),
            check_netlist=_bool(d.get("check_netlist", False), _join(path, "check_netlist")),
            regroup=_bool(d.get("regroup", t.regroup), _join(path, "regroup")),
            repair=_bool(d["repair"], _join(path, "repair")) if "repair" in d else None)

    def need_timing(self, metric: str, path: str) -> None:
        if metric in NEEDS_TIMING and not self.timing:
            raise SpecError(path, f"{metric!r} needs place-and-route timing; add 'timing: true' to the spec")

    def search(self, value: Any, space: int) -> SearchSpec:
        d = _mapping(value, "search", ["sampler"], ["trials", "seed", "fidelity", "hv_tolerance"])
        sampler = Sampler(_choice(d["sampler"], "search.sampler", [s.value for s in Sampler], "sampler"))
        seed = _int(d.get("seed", 0), "search.seed", minimum=0, maximum=MAX_SEED, why=" (the samplers' seed range)")
        # a grid of LARGE_GRID points or more is searched multi-fidelity unless the spec says full
        default = "multi" if sampler is Sampler.GRID and space >= LARGE_GRID and "trials" not in d else "full"
        fidelity = _choice(d.get("fidelity", default), "search.fidelity", ["full", "multi"], "fidelity")
        tolerance = 0.0
        if "hv_tolerance" in d:
            tolerance = float(_number(d["hv_tolerance"], "search.hv_tolerance"))
            if tolerance >= 0.5:
                raise SpecError("search.hv_tolerance", f"expected a share of the front's hypervolume below 0.5 "
                                                       f"(0.01 gives up at most 1%), got {_got(d['hv_tolerance'])}")
            if fidelity != "multi" or sampler is not Sampler.GRID:
                raise SpecError("search.hv_tolerance", "applies to 'fidelity: multi' with 'sampler: grid' only (its "
                                                       "cheap pass over every point fixes the reference point)")
        if "trials" not in d:
            if sampler is not Sampler.GRID:
                raise SpecError("search.trials", f"required key is missing (the {sampler.value} sampler needs a trial budget)")
            return SearchSpec(sampler, space, seed, fidelity, tolerance)
        trials = _int(d["trials"], "search.trials", maximum=MAX_TRIALS,
                      why=" (at hundreds of evaluations an hour, more would run for years)")
        if sampler is Sampler.GRID and trials > space:
            raise SpecError("search.trials", f"{trials} exceeds the {space} points of the grid "
                                             f"(models x dtypes x knob values); leave 'trials' out to run them all")
        return SearchSpec(sampler, trials, seed, fidelity, tolerance)

    # -- constraints and gate

    def bounds(self, value: Any, path: str, required: bool = True, extra: Iterable[str] = ()) -> tuple[Bound, ...]:
        d = _mapping(value, path, optional=list(_BOUND_KEYS) + list(extra),
                     what="a mapping of bounds like {luts_max: 5000}")
        out = []
        for key, v in d.items():
            if key in extra:
                continue
            metric = _BOUND_KEYS[key]
            kpath = _join(path, key)
            limit = _int(v, kpath, minimum=0) if metric in INTEGER_METRICS else _number(v, kpath)
            self.need_timing(metric, kpath)
            out.append(Bound(metric, key.rsplit("_", 1)[1], limit))
        if required and not out:
            raise SpecError(path, "needs at least one bound" + _suggest(None, _BOUND_KEYS, "e.g."))
        if not required and not d:
            raise SpecError(path, "must not be empty (leave the key out for no constraints)")
        return tuple(out)

    def constraints(self, value: Any, target: str) -> tuple[Bound, ...]:
        """Bounds a feasible point meets; `device: PART` adds the part's LUT, FF, block-RAM and
        DSP counts as luts_max, ffs_max, bram_max and dsp_max (a tighter bound given beside wins)."""
        bounds = self.bounds(value, "constraints", required=False, extra=("device",))
        if not isinstance(value, dict) or "device" not in value:
            return bounds
        from compiler.devices import DEVICES, find_device
        path = _join("constraints", "device")
        if target not in DEVICES:
            raise SpecError(path, f"target {target} has no device list here (known for {', '.join(DEVICES)})")
        name = _str(value["device"], path)
        try:
            device = find_device(target, name)
        except ValueError as e:
            raise SpecError(path, str(e)) from None
        given = {b.metric: b for b in bounds if b.kind == "max"}
        out = [b for b in bounds if b.kind != "max" or b.metric not in METRIC_RESOURCES[target]]
        for metric, resource in METRIC_RESOURCES[target].items():
            limit = device.capacity[resource]
            if metric in given:
                limit = min(limit, given[metric].limit)
            out.append(Bound(metric, "max", limit))
        return tuple(out)

    def gate(self, value: Any, models: list[str]) -> tuple[GateRule, ...]:
        if isinstance(value, dict):
            return (GateRule(None, None, self.bounds(value, "gate")),)
        if not isinstance(value, list):
            raise SpecError("gate", f"expected a mapping of bounds or a list of rules, got {_got(value)}")
        if not value:
            raise SpecError("gate", "must not be empty")
        out = []
        for i, rule in enumerate(value):
            path = _join("gate", i)
            bounds = self.bounds(rule, path, extra=("model", "dtype"))
            model = _choice(rule["model"], _join(path, "model"), models, "model") if "model" in rule else None
            dtype = _choice(rule["dtype"], _join(path, "dtype"), self.dtypes, "dtype") if "dtype" in rule else None
            out.append(GateRule(model, dtype, bounds))
        return tuple(out)

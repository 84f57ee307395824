"""The YAML spec: every kind of mistake gives one pinned `error: <path>: <message>` line and
exit code 2; a valid spec parses to the expected typed records."""
from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compiler.config import HardwareConfig
from dse.cli import main
from dse.frozen import FrozenMap
from dse.models.model import ModelSpec
from dse.spec import (Bound, DesignPoint, Direction, GateRule, Knob, Objective, Sampler, SearchSpec, SpecError, Target,
                      TimingSpec, load_spec, parse_spec)
from dse.models.zoo import InputRange

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
USER = DATA / "user_models.py"

BASE = {
    "study": "small",
    "target": "ecp5",
    "models": [{"name": "gemv_4x8", "builtin": "gemv", "params": {"M": 4, "K": 8}},
               {"name": "conv", "builtin": "conv2d", "params": {"H": 4, "W": 4}}],
    "dtypes": ["int8", "fp32"],
    "knobs": {"mem_read": ["sync", "comb"]},
    "objectives": ["cycles", "luts"],
    "search": {"sampler": "nsga2", "trials": 10, "seed": 0},
}


def run_validate(tmp_path: Path, capsys, spec: dict | str) -> tuple[int, str, str]:
    path = tmp_path / "spec.yaml"
    path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False))
    rc = main(["validate", str(path)])
    out, err = capsys.readouterr()
    return rc, out, err


def with_(path: str, value, base: dict = BASE) -> dict:
    """A copy of `base` with the value at dotted `path` ("models.1.params.K") replaced;
    value DROP deletes the key."""
    spec = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = spec
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    key = int(last) if isinstance(node, list) else last
    if value is DROP:
        del node[key]
    else:
        node[key] = value
    return spec


DROP = object()


def _knob_error(value) -> str:
    try:
        HardwareConfig.from_dict({"mem_read": value})
    except ValueError as e:
        return str(e)
    raise AssertionError(f"HardwareConfig accepted mem_read={value!r}")


def renamed(old: str, new: str, base: dict = BASE) -> dict:
    spec = copy.deepcopy(base)
    spec[new] = spec.pop(old)
    return spec


ERRORS = [
    # top level: unknown keys (with typo hints), missing keys, wrong types
    (renamed("objectives", "objective"), "objective: unknown key; did you mean 'objectives'?"),
    ({**BASE, "colour": "red"}, "colour: unknown key (known keys: study, target, models, dtypes, objectives, "
                                "search, knobs, input_range, constraints, gate, timing, synthesis, stage_timeout_s, data)"),
    (with_("dtypes", DROP), "dtypes: required key is missing"),
    (with_("study", 3), "study: expected a non-empty string, got 3"),
    (with_("study", "my study"), "study: expected a name of letters, digits, '_', '-' and '.' "
                                 "(it names the results directory), got 'my study'"),
    (with_("target", "ecp"), "target: unknown target 'ecp'; did you mean 'ecp5'?"),
    (with_("target", "artix"), "target: unknown target 'artix' (known: ecp5, ice40, xilinx)"),
    # dtypes
    (with_("dtypes", []), "dtypes: must not be empty"),
    (with_("dtypes", "int8"), "dtypes: expected a list of dtypes, got 'int8'"),
    (with_("dtypes", ["int8", "fp32", "int8"]), "dtypes[2]: duplicate value 'int8' (also at [0])"),
    (with_("dtypes", ["int8", "int4b"]), "dtypes[1]: unknown dtype 'int4b'; did you mean 'int4'?"),
    (with_("dtypes", ["float16"]), "dtypes[0]: unknown dtype 'float16'; did you mean 'fp16'?"),
    (with_("dtypes", ["fp8e4m3fn"]), "dtypes[0]: unknown dtype 'fp8e4m3fn'; did you mean 'fp8e4m3'?"),
    (with_("dtypes", ["float8_e5m2"]), "dtypes[0]: unknown dtype 'float8_e5m2'; did you mean 'fp8e5m2'?"),
    (with_("dtypes", ["int8", "FP8E4M3"]), "dtypes[1]: unknown dtype 'FP8E4M3'; did you mean 'fp8e4m3'?"),
    (with_("dtypes", ["fp8"]), "dtypes[0]: unknown dtype 'fp8'; did you mean 'fp8e4m3' or 'fp8e5m2'?"),
    # models
    (with_("models", {"name": "x"}), "models: expected a list of models, got a mapping ({'name': 'x'})"),
    (with_("models.0.name", DROP), "models[0].name: required key is missing"),
    (with_("models.0.nmae", "x"), "models[0].nmae: unknown key; did you mean 'name'?"),
    (with_("models.1.name", "gemv_4x8"), "models[1].name: duplicate model name 'gemv_4x8' (also models[0])"),
    (with_("models.0.builtin", DROP), "models[0]: give either 'builtin' (a zoo model) or 'source' "
                                      "(path/to/file.py:function)"),
    (with_("models.0.source", "x.py"), "models[0]: give either 'builtin' (a zoo model) or 'source' "
                                       "(path/to/file.py:function), not both"),
    (with_("models.0.builtin", "gemm"), "models[0].builtin: unknown builtin model 'gemm'; did you mean 'gemv'?"),
    (with_("models.1.params.K", -3), "models[1].params.K: expected a positive integer, got -3"),
    (with_("models.0.params.K", True), "models[0].params.K: expected a positive integer, got True"),
    (with_("models.0.params.K", 2.5), "models[0].params.K: expected a positive integer, got 2.5"),
    (with_("models.1.params.PAD", -1), "models[1].params.PAD: expected an integer >= 0, got -1"),
    (with_("models.0.params.M", 10**30), "models[0].params.M: expected at most 16,777,216 (a larger size could "
                                         f"never fit any FPGA target here), got {10**30}"),
    (with_("models.0.params", {"M": 8192, "K": 4096}),
     "models[0].params: input 'W': shape (8192, 4096) has 33,554,432 elements, more than the 16,777,216 this "
     "tool builds: no FPGA target here could hold it"),
    (with_("models.0.params.N", 4), "models[0].params.N: unknown parameter 'N' for builtin model 'gemv'; "
                                    "its parameters: M, K"),
    (with_("models.0.params", [4, 8]), "models[0].params: expected a mapping, got a list ([4, 8])"),
    (with_("models.1.params.K", 9), "models[1].params: kernel size K=9 is larger than the padded input (6x6)"),
    # knobs: names checked against HardwareConfig, each value by constructing it
    (with_("knobs", {"mem_reed": ["sync"]}), "knobs.mem_reed: unknown hardware knob; did you mean 'mem_read'?"),
    (with_("knobs", {"zzz": ["a"]}), "knobs.zzz: unknown hardware knob (known knobs: "
                                     + ", ".join(HardwareConfig.knob_names()) + ", lanes@<layer>, reduce_unroll@<layer>, "
                                     "weights@<layer>)"),
    (with_("knobs.mem_read", "sync"), "knobs.mem_read: expected a list of candidate values, got 'sync' "
                                      "(write [sync] for a single value)"),
    (with_("knobs.mem_read", []), "knobs.mem_read: must not be empty"),
    (with_("knobs.mem_read", ["sync", "comb", "sync"]), "knobs.mem_read[2]: duplicate value 'sync' (also at [0])"),
    (with_("knobs.mem_read", ["sync", "fast"]), "knobs.mem_read[1]: " + _knob_error("fast")),
    (with_("knobs.mem_read", ["sync", ["comb"]]), "knobs.mem_read[1]: expected a number, string or boolean, "
                                                  "got a list (['comb'])"),
    (with_("knobs.mem_read", ["sync", None]), "knobs.mem_read[1]: expected a number, string or boolean, "
                                              "got nothing (mem_read cannot be off)"),
    # the fold knobs only mean something together: checked as a combination, naming the knob at fault
    (with_("knobs", {"target_interval": [64]}), "knobs.target_interval: target_interval is what fold=auto aims at, "
                                                "and fold is manual: set fold to auto with it"),
    (with_("knobs", {"fold": ["manual"], "fold_budget": [64]}),
     "knobs.fold_budget: fold_budget is what fold=auto aims at, and fold is manual: set fold to auto with it"),
    (with_("knobs", {"fold_factors": ["padded"]}),
     "knobs.fold_factors: fold_factors is how fold=auto chooses, and fold is manual: set fold to auto with it"),
    (with_("knobs", {"fold": ["auto"], "target_interval": [64], "fold_factors": ["odd"]}),
     "knobs.fold_factors[0]: HardwareConfig.fold_factors: expected 'divisors' or 'padded', got 'odd'"),
    (with_("knobs", {"stage_overlap": [False, True]}),
     "knobs.stage_overlap: stage_overlap is how schedule=dataflow runs its stages, and no point is dataflow: add "
     "dataflow to schedule"),
    (with_("knobs", {"fold": ["auto"]}), "knobs.fold: fold=auto needs a target: target_interval (cycles per sample, "
                                         "e.g. 64) or fold_budget (multipliers: lanes x reduce_unroll summed over "
                                         "the layers)"),
    (with_("knobs", {"fold": ["auto"], "target_interval": [64], "fold_budget": [8]}),
     "knobs.fold_budget: fold=auto aims at target_interval (cycles per sample) or at fold_budget (multipliers), not "
     "both: give one of them"),
    (with_("knobs", {"fold": ["auto"], "target_interval": [64], "lanes@0": [2]}),
     "knobs.lanes@0: fold=auto chooses every layer's lanes and reduce_unroll itself: drop lanes@0"),
    (with_("knobs", {"fold": ["auto"], "target_interval": [0]}),
     "knobs.target_interval[0]: HardwareConfig.target_interval: expected a positive integer (cycles per sample), got 0"),
    # objectives
    (with_("objectives", ["cycles", "lut"]), "objectives[1]: unknown objective 'lut'; did you mean 'luts'?"),
    (with_("objectives", ["cycles", "cycles"]), "objectives[1]: duplicate value 'cycles' (also at [0])"),
    (with_("objectives", []), "objectives: must not be empty"),
    (with_("objectives", ["fmax_mhz"]), "objectives[0]: 'fmax_mhz' needs place-and-route timing; "
                                        "add 'timing: true' to the spec"),
    # search
    (with_("search.sampler", "nsga"), "search.sampler: unknown sampler 'nsga'; did you mean 'nsga2'?"),
    (with_("search.trails", 5), "search.trails: unknown key; did you mean 'trials'?"),
    (with_("search.trials", DROP), "search.trials: required key is missing (the nsga2 sampler needs a trial budget)"),
    (with_("search.trials", 0), "search.trials: expected a positive integer, got 0"),
    (with_("search.seed", -1), "search.seed: expected a non-negative integer, got -1"),
    (with_("search", {"sampler": "grid", "trials": 9}),
     "search.trials: 9 exceeds the 8 points of the grid (models x dtypes x knob values); "
     "leave 'trials' out to run them all"),
    (with_("search", "nsga2"), "search: expected a mapping, got 'nsga2'"),
    # input ranges
    (with_("input_range", {"min": 7, "max": -8}), "input_range: min (7) is greater than max (-8)"),
    (with_("input_range", {"min": -0.5, "max": 0.5}),
     "input_range: int8 data needs integer bounds, got min=-0.5, max=0.5"),
    (with_("input_range", {"min": -200, "max": 7}), "input_range: [-200, 7] is outside the int8 range [-128, 127]"),
    (with_("input_range", {"min": -8}), "input_range.max: required key is missing"),
    (with_("input_range", {"min": "-8", "max": 7}), "input_range.min: expected a number, got '-8'"),
    (with_("input_range", {"int16": {"min": -8, "max": 7}}),
     "input_range.int16: int16 is not one of the spec's dtypes (int8, fp32)"),
    (with_("input_range", {"fp32": {"min": -1, "max": 1}, "mn": 0}),
     "input_range.mn: unknown key; expected min and max, or dtypes; did you mean 'min'?"),
    (with_("models.0.input_range", {"int8": {"min": 0, "max": 300}}),
     "models[0].input_range.int8: [0, 300] is outside the int8 range [-128, 127]"),
    # constraints and gate
    (with_("constraints", {"luts_max": -5}), "constraints.luts_max: expected a non-negative integer, got -5"),
    (with_("constraints", {"max_luts": 5000}), "constraints.max_luts: unknown key; did you mean 'luts_max'?"),
    (with_("constraints", {"fmax_mhz_min": 50}), "constraints.fmax_mhz_min: 'fmax_mhz' needs place-and-route "
                                                 "timing; add 'timing: true' to the spec"),
    (with_("constraints", {}), "constraints: must not be empty (leave the key out for no constraints)"),
    (with_("gate", {"max_cycles": 100}), "gate.max_cycles: unknown key; did you mean 'cycles_max'?"),
    (with_("gate", [{"model": "gemv", "cycles_max": 100}]),
     "gate[0].model: unknown model 'gemv'; did you mean 'gemv_4x8'?"),
    (with_("gate", [{"dtype": "fp16", "cycles_max": 100}]), "gate[0].dtype: unknown dtype 'fp16' (known: int8, fp32)"),
    (with_("gate", [{"dtype": "int8"}]), "gate[0]: needs at least one bound (e.g.: cycles_max, luts_max, ffs_max, "
                                         "bram_max, dsp_max, lutram_max, latency_us_max, interval_cycles_max, fmax_mhz_min, "
                                         "accuracy_min, samples_per_s_min)"),
    (with_("gate", []), "gate: must not be empty"),
    # scalars
    (with_("timing", 1), "timing: expected true, false or a mapping {router, placer, seed, freq_mhz, check_netlist, "
                         "regroup, repair}, got 1"),
    (with_("timing", {"regroup": "no"}), "timing.regroup: expected true or false, got 'no'"),
    (with_("timing", {"repair": 1}), "timing.repair: expected true or false, got 1"),
    (with_("timing", {"repair": None}), "timing.repair: expected true or false, got nothing"),
    (with_("timing", {"check_netlist": "yes"}), "timing.check_netlist: expected true or false, got 'yes'"),
    (with_("timing", {"router": "router_2"}), "timing.router: unknown router 'router_2'; did you mean 'router2'?"),
    (with_("timing", {"placer": "sa"}), "timing.placer: unknown placer 'sa' (known: heap, static)"),
    (with_("timing", {"routre": "router2"}), "timing.routre: unknown key; did you mean 'router'?"),
    (with_("timing", {"seed": -1}), "timing.seed: expected a non-negative integer, got -1"),
    (with_("timing", {"seed": [1, -1]}), "timing.seed[1]: expected a non-negative integer, got -1"),
    (with_("timing", {"seed": []}), "timing.seed: expected a seed or a non-empty list of them, got []"),
    (with_("timing", {"placer": ["heap", "heap"]}), "timing.placer: a placer given twice in ['heap', 'heap']"),
    (with_("timing", {"placer": ["heap", "sa"]}), "timing.placer[1]: unknown placer 'sa' (known: heap, static)"),
    (with_("timing", {"freq_mhz": 0}), "timing.freq_mhz: expected a positive number, got 0"),
    (with_("target", "xilinx", with_("timing", True)),
     "timing: place-and-route needs target ecp5 or ice40; xilinx has no open-source place-and-route here "
     "(set timing: false, or change the target)"),
    (with_("synthesis", "hierarchical"), "synthesis: unknown synthesis 'hierarchical' (known: flat, units, kernels)"),
    (with_("synthesis", "units", with_("timing", True)),
     "synthesis: 'units' writes no netlist, and place-and-route (timing: true) needs a flat one: use "
     "synthesis: flat with timing"),
    (with_("stage_timeout_s", 0), "stage_timeout_s: expected a positive number, got 0"),
    (with_("stage_timeout_s", "10"), "stage_timeout_s: expected a positive number, got '10'"),
]


@pytest.mark.parametrize("spec,message", ERRORS, ids=[m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(ERRORS)])
def test_error_is_one_line_with_path_and_exit_2(tmp_path, capsys, spec, message):
    rc, out, err = run_validate(tmp_path, capsys, spec)
    assert (rc, out, err) == (2, "", f"error: {message}\n")


def test_spec_error_carries_path_and_message():
    with pytest.raises(SpecError) as e:
        parse_spec(with_("models.1.params.K", -3))
    assert isinstance(e.value, ValueError)
    assert (e.value.path, e.value.message) == ("models[1].params.K", "expected a positive integer, got -3")


# --- YAML and file-level errors: file:line:column

@pytest.mark.parametrize("text,message", [
    ("study: gemv\ntarget: [ecp5\n", "spec.yaml:3:1: YAML syntax error: expected ',' or ']', but got '<stream end>'"),
    ("study: a\n  target: x\n", "spec.yaml:2:9: YAML syntax error: mapping values are not allowed here"),
    ("study: a\ndtypes: [int8]\nstudy: b\n", "spec.yaml:3:1: duplicate key 'study' (first given on line 1)"),
    ("", "spec.yaml: the spec is empty; expected a mapping with keys study, target, models, dtypes, objectives, search"),
    ("- a\n- b\n", "spec.yaml: expected a mapping with keys study, target, models, dtypes, objectives, search, "
                   "got a list (['a', 'b'])"),
])
def test_yaml_errors_report_line_and_column(tmp_path, capsys, text, message):
    rc, out, err = run_validate(tmp_path, capsys, text)
    assert (rc, err) == (2, f"error: {tmp_path / message}\n")


_LAUGHS = ("a: &a [x, x, x, x, x, x, x, x, x, x]\n"
           + "".join(f"{b}: &{b} [{', '.join(['*' + a] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi")))


@pytest.mark.parametrize("text,message", [
    ("[" * 5000, "spec.yaml: nested more than 32 levels deep"),
    ("study: " + "[" * 40 + "]" * 40 + "\n", "spec.yaml: nested more than 32 levels deep"),
    (_LAUGHS, "spec.yaml: holds more than 100,000 values (counting what YAML aliases repeat); a spec is far smaller"),
    ("study: gemv\n" + "# padding\n" * 120_000, "spec.yaml: the file has 1,200,012 characters; a spec may have at "
                                                  "most 1,048,576"),
])
def test_pathological_yaml_is_refused_in_one_line(tmp_path, capsys, text, message):
    rc, out, err = run_validate(tmp_path, capsys, text)
    assert (rc, err) == (2, f"error: {tmp_path / message}\n")


def test_missing_spec_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope.yaml'}: file not found\n"


# --- user models (`source:`)

def user(source: str, **extra) -> dict:
    return {**BASE, "models": [{"name": "mine", "source": source, **extra}]}


USER_ERRORS = [
    (user(f"{DATA}/missing.py:build"), f"models[0].source: file not found: {DATA}/missing.py"),
    (user(f"{USER}:nope"), "models[0].source: user_models.py has no function 'nope'; functions defined there: "
                           "scale_add, needs_n, with_kwargs, only_ints, not_a_tuple, bad_shape, int8_weights"),
    (user(f"{DATA}/no_functions.py"), "models[0].source: no_functions.py has no function 'build'; "
                                      "it defines no functions"),
    (user(f"{USER}:NOT_CALLABLE"), "models[0].source: user_models.py: 'NOT_CALLABLE' is not a function but int 42"),
    (user(f"{DATA}/broken_import.py:build"),
     "models[0].source: importing broken_import.py failed: ZeroDivisionError: integer division or modulo by zero "
     "(line 2)"),
    (user(f"{DATA}/syntax_error.py"), "models[0].source: importing syntax_error.py failed: SyntaxError: "
                                      "'(' was never closed (syntax_error.py, line 1)"),
    (user("models/mine.txt"), "models[0].source: expected 'path/to/file.py' or 'path/to/file.py:function', "
                              "got 'models/mine.txt'"),
    (user(f"{USER}:scale_add", params={"Q": 1}),
     "models[0].params: unknown parameter 'Q' for scale_add() in " + f"{USER}; its parameters: N, SCALE"),
    (user(f"{USER}:needs_n"), "models[0].params: needs_n() in " + f"{USER} cannot be called with these params "
                              "(missing a required argument: 'N'); its parameters: N"),
    (user(f"{USER}:only_ints"), "models[0]: only_ints('fp32', N=4) raised NotImplementedError: "
                                "only integer dtypes, not fp32"),
    (user(f"{USER}:not_a_tuple"), "models[0].source: not_a_tuple('int8') breaks the model contract: "
                                  "build() must return (inputs, forward), got list"),
    (user(f"{USER}:bad_shape"), "models[0].source: bad_shape('int8') breaks the model contract: input 'x': "
                                "shape must be a non-empty tuple of positive ints, got (0, 4)"),
    (user(f"{USER}:scale_add", params={"N": [1, 2]}),
     "models[0].params.N: expected a number, string or boolean, got a list ([1, 2])"),
    ({**user(f"{USER}:int8_weights"), "dtypes": ["int16"], "input_range": {"min": -1000, "max": 1000}},
     "input_range: input 'w' of model 'mine' is int8: [-1000, 1000] is outside the int8 range [-128, 127]"),
]


@pytest.mark.parametrize("spec,message", USER_ERRORS, ids=[f"user-{i}" for i in range(len(USER_ERRORS))])
def test_user_model_errors(tmp_path, capsys, spec, message):
    rc, out, err = run_validate(tmp_path, capsys, spec)
    assert (rc, out, err) == (2, "", f"error: {message}\n")


def test_user_model_source_is_relative_to_the_spec_file(tmp_path):
    (tmp_path / "models").mkdir()
    shutil.copy(USER, tmp_path / "models" / "mine.py")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(user("models/mine.py:scale_add", params={"N": 16})))
    m = load_spec(path).models[0]
    assert (m.builtin, m.source, m.function) == (None, tmp_path / "models" / "mine.py", "scale_add")
    assert m.params == {"N": 16, "SCALE": 3}          # the function's defaults filled in
    assert m.build("int8").inputs == {"a": ((16,), "int8"), "b": ((16,), "int8")}
    assert m.describe() == "mine.py:scale_add(N=16, SCALE=3)"


def test_user_model_with_var_kwargs_takes_any_params():
    m = parse_spec(user(f"{USER}:with_kwargs", params={"N": 3, "mode": "fast"})).models[0]
    assert m.params == {"N": 3, "mode": "fast"}


# --- a valid spec parses to the expected typed records

FULL = """
study: full
target: ice40
models:
  - name: g
    builtin: gemv
    params: {M: 8}
    input_range: {int8: {min: -8, max: 7}}
  - name: mine
    source: data/user_models.py:scale_add
dtypes: [int8, bf16]
input_range: {min: -4, max: 3}
knobs:
  mem_read: [comb, sync]
objectives: [luts, fmax_mhz, cycles]
constraints: {luts_max: 5000, dsp_max: 0, latency_us_max: 12.5}
gate:
  - {cycles_max: 1000}
  - {model: g, dtype: int8, luts_max: 900}
search: {sampler: grid}
timing: true
stage_timeout_s: 30
"""


def test_valid_spec_parses_to_typed_records(tmp_path):
    path = tmp_path / "full.yaml"
    path.write_text(FULL)
    (tmp_path / "data").mkdir()
    shutil.copy(USER, tmp_path / "data" / "user_models.py")
    s = load_spec(path)
    assert (s.study, s.target, s.dtypes, s.timing, s.stage_timeout_s, s.path) == \
        ("full", Target.ICE40, ("int8", "bf16"), TimingSpec(), 30.0, path)
    g, mine = s.models
    assert g == ModelSpec("g", "gemv", None, None, FrozenMap({"M": 8, "K": 784}),
                          FrozenMap({"int8": InputRange(-8, 7), "bf16": InputRange(-4, 3)}))
    assert mine.source == tmp_path / "data" / "user_models.py" and mine.params == {"N": 8, "SCALE": 3}
    assert s.input_range_for("mine", "int8") == InputRange(-4, 3)
    assert g.input_range("int8") == InputRange(-8, 7)
    assert s.knobs == (Knob("mem_read", ("comb", "sync")),)
    assert s.objectives == (Objective("luts", Direction.MINIMIZE), Objective("fmax_mhz", Direction.MAXIMIZE),
                            Objective("cycles", Direction.MINIMIZE))
    assert s.constraints == (Bound("luts", "max", 5000), Bound("dsp", "max", 0), Bound("latency_us", "max", 12.5))
    assert s.gate == (GateRule(None, None, (Bound("cycles", "max", 1000),)),
                      GateRule("g", "int8", (Bound("luts", "max", 900),)))
    assert s.gate_bounds("g", "int8") == (Bound("cycles", "max", 1000), Bound("luts", "max", 900))
    assert s.gate_bounds("mine", "int8") == (Bound("cycles", "max", 1000),)
    assert s.search == SearchSpec(Sampler.GRID, 8, 0)            # grid: trials = the whole space
    assert (s.knob_space_size, s.space_size) == (2, 8)
    points = list(s.points())
    assert len(set(points)) == 8 and points[0] == DesignPoint("g", "int8", FrozenMap({"mem_read": "comb"}))
    assert points[0].hardware_config() == HardwareConfig(mem_read="comb")
    assert hash(s) == hash(load_spec(path))                       # frozen all the way down


def test_a_knob_off_by_default_can_be_off_beside_its_values():
    """`null` among a knob's values is the knob off (HardwareConfig's None), so one sweep compares
    a design without and with a target clock."""
    s = parse_spec(with_("knobs", {"fp_pipeline": [3], "target_mhz": [None, 150]}))
    assert s.knobs[1] == Knob("target_mhz", (None, 150))
    configs = {p.hardware_config().target_mhz for p in s.points()}
    assert configs == {None, 150}


def test_defaults_of_optional_keys():
    s = parse_spec(BASE)
    assert (s.knobs[0].values, s.constraints, s.gate, s.timing, s.stage_timeout_s) == (("sync", "comb"), (), (), None, 600.0)
    assert s.models[0].input_range("int8") is None
    no_knobs = parse_spec(with_("knobs", DROP))
    assert (no_knobs.knobs, no_knobs.knob_space_size, no_knobs.space_size) == ((), 1, 4)
    assert [p.knobs for p in no_knobs.points()] == [FrozenMap()] * 4


def test_bound_directions():
    assert Bound("luts", "max", 10).ok(10) and not Bound("luts", "max", 10).ok(11)
    assert Bound("fmax_mhz", "min", 50).ok(60) and not Bound("fmax_mhz", "min", 50).ok(40)


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_are_valid(path, capsys):
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("ok: study ")
    assert all(line.startswith("not applicable, left out of the search space: ") for line in lines[1:])


def test_gemv_config_is_the_main_job():
    """The README's main job: the 128x784 GEMV in every dtype, over the parallelism knobs."""
    s = load_spec(ROOT / "configs" / "gemv.yaml")
    assert (s.study, s.target, s.dtypes) == ("gemv", Target.ECP5, ("int8", "fp16", "bf16", "fp32"))
    assert s.models[0].builtin == "gemv" and s.models[0].params == {"M": 128, "K": 784}
    assert [o.metric for o in s.objectives] == ["cycles", "luts"]
    assert {"lanes", "reduce_unroll"} <= {k.name for k in s.knobs}


def test_points_a_knob_cannot_apply_to_are_left_out_once_with_why(tmp_path, capsys):
    """configs/gemv.yaml with fp_sum swept too: reduce_unroll=8 with fp_sum=sequential cannot
    apply to a float sum (it would FAIL at compile) and fp_sum=tree changes nothing for int8 or
    reduce_unroll=1 (it would repeat a point): neither is in the grid; validate says so once
    per reason."""
    main_job = yaml.safe_load((ROOT / "configs" / "gemv.yaml").read_text())
    spec_file = tmp_path / "gemv.yaml"
    spec_file.write_text(yaml.safe_dump({**main_job, "knobs": {**main_job["knobs"], "fp_sum": ["sequential", "tree"]}},
                                        sort_keys=False))
    s = load_spec(spec_file)
    points = list(s.points())
    assert len(points) == s.space_size == 24 and len(s.not_applicable_points()) == 24
    for p in points:
        float_sum = p.dtype != "int8"
        assert (p.knobs["fp_sum"] == "tree") == (float_sum and p.knobs["reduce_unroll"] > 1)
    assert main(["validate", str(spec_file)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == [
        "not applicable, left out of the search space: 15 points (e.g. gemv_128x784 int8): fp_sum=tree only "
        "reorders float sums with reduce_unroll > 1; elsewhere it is the same design as fp_sum=sequential, "
        "which the space holds",
        "not applicable, left out of the search space: 9 points (e.g. gemv_128x784 fp16): reduce_unroll > 1 "
        "with fp_sum=sequential: a float sum keeps tinygrad's sequential order (fp_sum=tree unrolls it)"]
    # without fp_sum=sequential among the values, tree is the only setting: kept everywhere
    only_tree = parse_spec({**yaml.safe_load((ROOT / "configs" / "gemv.yaml").read_text()),
                            "knobs": {"reduce_unroll": [1, 8], "fp_sum": ["tree"]}})
    assert only_tree.space_size == 8 and not only_tree.not_applicable_points()


def test_fp_semantics_op_is_left_out_where_it_changes_nothing():
    """fp_semantics=op builds the same design as tinygrad for integer and fp32 dtypes (both round
    every op there): with both values listed, those points are left out, the narrow floats kept;
    an illegal value is refused with the knob's own message."""
    main_job = yaml.safe_load((ROOT / "configs" / "gemv.yaml").read_text())
    s = parse_spec({**main_job, "knobs": {"fp_semantics": ["tinygrad", "op"]}})
    kept = sorted((p.dtype, p.knobs["fp_semantics"]) for p in s.points())
    assert kept == [("bf16", "op"), ("bf16", "tinygrad"), ("fp16", "op"), ("fp16", "tinygrad"),
                    ("fp32", "tinygrad"), ("int8", "tinygrad")]
    why = {p.dtype: reason for p, reason in s.not_applicable_points()}
    assert set(why) == {"int8", "fp32"} and why["fp32"].startswith("fp_semantics=op only changes fp16, bf16 and fp8")
    only_op = parse_spec({**main_job, "knobs": {"fp_semantics": ["op"]}})
    assert only_op.space_size == 4 and not only_op.not_applicable_points()
    with pytest.raises(ValueError, match="HardwareConfig.fp_semantics: expected 'tinygrad' or 'op', got 'store'"):
        HardwareConfig(fp_semantics="store")


def test_stage_overlap_is_left_out_of_sequential_points():
    """schedule: [sequential, dataflow] x stage_overlap: [false, true] is three designs: the
    sequential one once (stage_overlap changes nothing there), the dataflow one both ways."""
    main_job = yaml.safe_load((ROOT / "configs" / "gemv.yaml").read_text())
    s = parse_spec({**main_job, "dtypes": ["int8"],
                    "knobs": {"schedule": ["sequential", "dataflow"], "stage_overlap": [False, True]}})
    kept = sorted((p.knobs["schedule"], p.knobs["stage_overlap"]) for p in s.points())
    assert kept == [("dataflow", False), ("dataflow", True), ("sequential", False)] and s.space_size == 3
    [(point, why)] = s.not_applicable_points()
    assert point.knobs["schedule"] == "sequential" and why == (
        "stage_overlap is how schedule=dataflow runs its stages; at schedule=sequential it is the same design as "
        "stage_overlap=False, which the space holds")


# --- the CLI

def test_validate_summary(tmp_path, capsys):
    rc, out, err = run_validate(tmp_path, capsys, BASE)
    assert (rc, err) == (0, "")
    assert out == ("ok: study 'small': 2 models (gemv_4x8, conv), 2 dtypes (int8, fp32), 2 knob settings "
                   "(mem_read:2) -> 8 design points; target ecp5; min cycles, min luts; nsga2 sampler, "
                   "10 trials, seed 0\n")


def test_models_lists_the_zoo_with_defaults(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "gemv         M=128 K=784\n" in out and "IN=784 HIDDEN=128 OUT=10 SHIFT=11" in out
    for name in ("matmul", "elementwise", "mlp", "conv2d"):
        assert f"\n{name} " in out


def test_bad_usage_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2


def test_subprocess_python_m(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "dse.cli", "validate", "configs/gemv.yaml"],
                        cwd=ROOT, capture_output=True, text=True)
    assert (ok.returncode, ok.stderr) == (0, "") and ok.stdout.startswith("ok: study 'gemv'")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(with_("models.1.params.K", -3)))
    r = subprocess.run([sys.executable, "-m", "dse.cli", "validate", str(bad)], cwd=ROOT, capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "error: models[1].params.K: expected a positive integer, got -3\n")


@pytest.mark.skipif(shutil.which("dse") is None, reason="console script not installed (pip install -e .)")
def test_console_script(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(renamed("objectives", "objective")))
    r = subprocess.run(["dse", "validate", str(bad)], capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (2, "error: objective: unknown key; did you mean 'objectives'?\n")


def test_a_device_constraint_is_its_resource_counts(tmp_path):
    """`constraints: {device: PART}`: the part's LUT, FF, block-RAM and DSP counts as bounds
    (compiler.devices.DEVICES), a tighter bound given beside it kept."""
    from dse.spec import load_spec
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(with_("constraints", {"device": "LFE5U-85F", "dsp_max": 100, "ffs_max": 10 ** 6})))
    got = {b.metric: b.limit for b in load_spec(path).constraints}
    assert got == {"luts": 83640, "ffs": 83640, "bram": 208, "dsp": 100}
    path.write_text(yaml.safe_dump(with_("target", "ice40", with_("constraints", {"device": "up5k"}))))
    assert {b.metric: b.limit for b in load_spec(path).constraints} == {"luts": 5280, "bram": 30, "dsp": 8}


@pytest.mark.parametrize("target, device, message", [
    ("ecp5", "LFE5U-99F", "constraints.device: unknown ecp5 device 'LFE5U-99F'; known: LFE5U-25F (25k), "
                          "LFE5U-45F (45k), LFE5U-85F (85k); a part may end in a speed grade (LFE5U-85F-8)"),
    ("ecp5", "LFE5U-85F-5", "constraints.device: unknown speed grade -5 for LFE5U-85F in 'LFE5U-85F-5'; "
                            "known: -6, -7, -8"),
    ("xilinx", "xc7a35t", "constraints.device: target xilinx has no device list here (known for ecp5, ice40)"),
    ("ecp5", 85, "constraints.device: expected a non-empty string, got 85"),
])
def test_a_bad_device_constraint_is_named(tmp_path, capsys, target, device, message):
    rc, _, err = run_validate(tmp_path, capsys, with_("target", target, with_("constraints", {"device": device})))
    assert rc == 2 and err == f"error: {message}\n"


def test_timing_settings_reach_place_and_route_and_the_cache_key():
    from dse.cache import _timing_material
    from dse.evaluate import EvalContext
    wide = parse_spec(with_("timing", {"router": "router2", "placer": "static", "freq_mhz": 125}))
    assert wide.timing == TimingSpec(router="router2", placer="static", seed=1, freq_mhz=125.0)
    assert wide.timing.options() == {"router": "router2", "placer": "static", "seed": 1, "freq_mhz": 125.0,
                                     "regroup": True, "repair": False}
    assert not parse_spec(with_("timing", {"regroup": False})).timing.options()["regroup"]
    assert not wide.timing.check_netlist
    assert parse_spec(with_("timing", {"check_netlist": True})).timing.check_netlist
    plain = parse_spec(with_("timing", True))
    assert plain.timing == TimingSpec()
    several = parse_spec(with_("timing", {"placer": ["static", "heap"], "seed": [3, 1]}))
    assert several.timing.options()["placer"] == "static" and several.timing.options()["seed"] == 3
    assert [(r["placer"], r["seed"]) for r in several.timing.runs()] == [("static", 3), ("static", 1), ("heap", 3),
                                                                        ("heap", 1)]
    assert _timing_material(EvalContext.from_spec(several))["options"]["more"] == [["static", 1], ["heap", 3],
                                                                                  ["heap", 1]]
    assert "more" not in _timing_material(EvalContext.from_spec(wide))["options"]     # one run: the key it had
    # other settings are other results
    assert _timing_material(EvalContext.from_spec(plain))["options"]["router"] == "router1"
    assert _timing_material(EvalContext.from_spec(wide))["options"]["router"] == "router2"
    # regrouped copies are another result; without them, the key placement had before them
    assert _timing_material(EvalContext.from_spec(plain))["options"]["regroup"] is True
    assert "regroup" not in _timing_material(EvalContext.from_spec(parse_spec(with_("timing", {"regroup": False}))))[
        "options"]
    # a repair is another result; without it, the key a single route had. Unsaid, a point with
    # target_mhz is repaired and one without it is not; said, every point as the spec says
    assert "repair" not in _timing_material(EvalContext.from_spec(plain))["options"]
    assert _timing_material(EvalContext.from_spec(plain), 150)["options"]["repair"] is True
    assert plain.timing.options()["repair"] is False and plain.timing.options(150)["repair"] is True
    assert all(r["repair"] for r in several.timing.runs(150)) and not any(r["repair"] for r in several.timing.runs())
    repaired = parse_spec(with_("timing", {"repair": True}))
    assert repaired.timing.options()["repair"] is True
    assert _timing_material(EvalContext.from_spec(repaired))["options"]["repair"] is True
    never = parse_spec(with_("timing", {"repair": False}))
    assert never.timing.options(150)["repair"] is False
    assert "repair" not in _timing_material(EvalContext.from_spec(never), 150)["options"]
    # an EvalContext built by hand still takes a bool
    assert EvalContext.from_spec(plain, timing=False).timing is None
    assert EvalContext.from_spec(wide, timing=True).timing == TimingSpec()


# ---------------------------------------------------------------------------------------------
# per-layer knobs

MLP_SPEC = {**BASE, "models": [{"name": "mlp", "builtin": "mlp", "params": {"IN": 16, "HIDDEN": 8, "OUT": 4}}],
            "dtypes": ["int8"], "knobs": {"lanes@0": [1, 4], "lanes@k1_r_4_8": [1, 2]}}


def test_per_layer_knobs_by_index_or_name_validate_and_list_the_layers(tmp_path, capsys):
    rc, out, err = run_validate(tmp_path, capsys, MLP_SPEC)
    assert (rc, err) == (0, "") and "4 knob settings (lanes@0:2 x lanes@k1_r_4_8:2) -> 4 design points" in out
    spec = parse_spec(MLP_SPEC)
    assert [k.name for k in spec.knobs] == ["lanes@0", "lanes@k1_r_4_8"]
    assert {p.hardware_config().for_layer("k1_r_4_8").lanes for p in spec.points()} == {1, 2}
    path = tmp_path / "spec.yaml"
    assert main(["layers", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mlp (int8): 2 layers\n  0  k0_r_8_16  (lanes up to 8, reduce_unroll up to 16)\n"
                          "  1  k1_r_4_8  (lanes up to 4, reduce_unroll up to 8)\n")


@pytest.mark.parametrize("knobs, message", [
    ({"lanes@fc2": [1, 2]}, "error: knobs.lanes@fc2: model 'mlp' (int8) has no layer 'fc2'; its 2 layers: "
                            "0 (k0_r_8_16), 1 (k1_r_4_8)"),
    ({"lanes@2": [1, 2]}, "error: knobs.lanes@2: model 'mlp' (int8) has no layer '2'; its 2 layers: "
                          "0 (k0_r_8_16), 1 (k1_r_4_8)"),
    ({"mem_read@0": ["sync"]}, "error: knobs.mem_read@0: 'mem_read' cannot be set per layer; per-layer knobs: "
                               "lanes@<layer>, reduce_unroll@<layer>, weights@<layer>"),
    ({"lanes@0": [0]}, "error: knobs.lanes@0[0]: layer 0: HardwareConfig.lanes: expected an integer from 1 to 4096, got 0"),
])
def test_a_per_layer_knob_the_model_cannot_take_is_one_line_exit_2(tmp_path, capsys, knobs, message):
    rc, out, err = run_validate(tmp_path, capsys, {**MLP_SPEC, "knobs": knobs})
    assert (rc, out) == (2, "") and err.strip() == message


def test_fold_auto_and_its_target_are_one_space(tmp_path, capsys):
    """fold: [manual, auto] x target_interval: [32, 64] is "manual, and auto at each target": the
    manual point is built without a target (HardwareConfig refuses one there), its repeat at the
    other target is left out once with why."""
    spec = {**MLP_SPEC, "knobs": {"schedule": ["dataflow"], "fold": ["manual", "auto"], "target_interval": [32, 64]}}
    rc, out, err = run_validate(tmp_path, capsys, spec)
    assert (rc, err) == (0, "")
    assert out.splitlines()[1:] == [
        "not applicable, left out of the search space: 1 point (e.g. mlp int8): target_interval is what fold=auto "
        "aims at; at fold=manual it is the same design as target_interval=32, which the space holds"]
    s = parse_spec(spec)
    configs = {(p.knobs["fold"], p.knobs["target_interval"]): p.hardware_config() for p in s.points()}
    assert sorted(configs) == [("auto", 32), ("auto", 64), ("manual", 32)]
    assert configs["manual", 32].target_interval is None and configs["auto", 64].target_interval == 64
    # the order of the keys does not matter, nor does a budget instead of a target
    rc, out, err = run_validate(tmp_path, capsys, {**MLP_SPEC, "knobs": {"fold_budget": [4], "fold": ["auto"]}})
    assert (rc, err) == (0, "") and "-> 1 design points" in out

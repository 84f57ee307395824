"""A seeded spec fuzzer: every generated spec is wrong in one to three ways, each of which
alone makes it invalid, so `dse validate` must exit 2 with one `error:` line that names where
(a YAML path or the file), never a traceback, never a hang, never exit 0.

The mutations are drawn from what the spec reference allows (dse/spec.py): a valid base spec,
then wrong types, out-of-range numbers, unknown and missing keys, illegal knob values and
combinations, oversized model parameters, broken references to user files, and pathological
YAML text. TINYHW_FUZZ_SEED and TINYHW_FUZZ_N override the seed and the count."""
from __future__ import annotations

import copy
import os
import random
import re
import signal
from pathlib import Path

import pytest
import yaml

from dse.cli import main

SEED = int(os.environ.get("TINYHW_FUZZ_SEED", "20261122"))
N_SPECS = int(os.environ.get("TINYHW_FUZZ_N", "1000"))
PER_SPEC_S = 20                 # a validate that takes longer is a hang

BASE = {
    "study": "fuzz",
    "target": "ecp5",
    "models": [{"name": "gemv_4x8", "builtin": "gemv", "params": {"M": 4, "K": 8}},
               {"name": "conv", "builtin": "conv2d", "params": {"H": 4, "W": 4}}],
    "dtypes": ["int8", "fp32"],
    "knobs": {"mem_read": ["sync", "comb"], "lanes": [1, 2]},
    "objectives": ["cycles", "luts"],
    "search": {"sampler": "nsga2", "trials": 10, "seed": 0},
    "constraints": {"luts_max": 5000},
}
TOP_KEYS = ("study", "target", "models", "dtypes", "knobs", "objectives", "search", "constraints",
            "input_range", "gate", "timing", "stage_timeout_s")
HUGE = 10**30

# values that are wrong at each place, whatever else the spec says
BAD_VALUES: dict[str, list] = {
    "study": [123, [], None, {}, "bad name!", "", True],
    "target": ["gowin", 5, [], None, "ECP5 "],
    "dtypes": [[], "int8", ["int17"], [None], ["int8", "int8"], [{"int8": 1}], ["float64"]],
    "objectives": [[], ["lutz"], "cycles", [1], ["cycles", "cycles"], ["fmax_mhz"], None],
    "search": [{"sampler": "sa"}, {"sampler": "grid", "trials": 0}, {"sampler": "tpe", "trials": -1},
               {"sampler": "nsga2", "seed": "x"}, {"sampler": "random", "trials": 2.5}, [], "grid",
               {"sampler": "nsga2", "trials": 10, "seed": 0, "extra": 1}, {"sampler": "tpe", "trials": HUGE},
               {"sampler": "tpe", "trials": 5, "seed": HUGE}, {"sampler": "tpe", "trials": 5, "seed": -1}],
    "knobs": [[], "lanes", {"lanez": [1]}, {"lanes": []}, {"lanes": [0]}, {"lanes": [HUGE]},
              {"fp_pipeline": [7]}, {"fp_pipeline": [HUGE]}, {"mem_read": ["fast"]}, {"acc_width": [65]},
              {"acc_width": [0]}, {"lanes": [True]}, {"lanes": 4}, {"lanes": [2, 2]},
              {"lanes": [64], "reduce_unroll": [128]}, {"reduce_unroll": [-1]}, {"loop_fusion": ["yes"]},
              {"share_buffers": [1]}, {"fp_rounding": ["rnd"]}, {"fp_subnormals": [None]}],
    "constraints": [{"lutz_max": 5}, {"luts_max": -1}, {"luts_max": "many"}, {"luts_min": 5}, [],
                    {"fmax_mhz_max": 100}, {"luts_max": float("nan")}],
    "input_range": [{"min": 1, "max": 0}, {"min": "a", "max": 1}, {"min": -1e40, "max": 1e40}, {"lo": 0},
                    {}, {"int9": {"min": 0, "max": 1}}, [0, 1]],
    "gate": [{"lutz_max": 1}, [{"model": "nope", "luts_max": 1}], [{"dtype": "int7", "luts_max": 1}], 5,
             [{"luts_max": -3}]],
    "timing": ["yes", 1, None, [True]],
    "stage_timeout_s": [-1, 0, "10s", None, [], float("inf"), 1e30],
}
BAD_MODEL_VALUES: dict[str, list] = {
    "name": ["", "bad name", None, 7, "a/b"],
    "builtin": ["gemm", None, 3, ["gemv"]],
    "params": [{"M": -3}, {"M": 0}, {"M": HUGE}, {"M": 2.5}, {"M": True}, {"N": 4}, [4, 8], {"M": [4]},
               {"M": 8192, "K": 4096}, {"M": "4"}],
    "source": ["missing.py:build", "nofunction", 5, "../../etc/passwd:build"],
    "input_range": [{"min": 3, "max": 2}, {"min": -HUGE, "max": HUGE}, "wide"],
    "extra": [1, "x", None],
}


def _typo(word: str, rng: random.Random) -> str:
    i = rng.randrange(len(word))
    return word[:i] + rng.choice("xqz_") + word[i + 1:]


def mutate(rng: random.Random) -> tuple[str, list[str]]:
    """A bad spec's text and the names of the mutations applied (for the failure message)."""
    spec, applied = copy.deepcopy(BASE), []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):      # mostly one: a first error hides the others
        kind = rng.choice(["top_value", "top_value", "model_value", "model_value", "unknown_key",
                           "typo_key", "drop_required", "model_unknown_key", "duplicate_model"])
        if kind == "top_value":
            key = rng.choice(list(BAD_VALUES))
            spec[key] = copy.deepcopy(rng.choice(BAD_VALUES[key]))
        elif kind == "model_value":
            m = rng.choice(spec["models"]) if isinstance(spec.get("models"), list) and spec["models"] else None
            if not isinstance(m, dict):
                spec["models"] = [{"name": "only", "builtin": "gemv", "params": {"M": -1}}]
                key = "params"
            else:
                key = rng.choice(list(BAD_MODEL_VALUES))
                value = copy.deepcopy(rng.choice(BAD_MODEL_VALUES[key]))
                if key == "source":             # a source instead of the builtin (both is an error too)
                    m.pop("builtin", None)
                m[key] = value
        elif kind == "unknown_key":
            key = rng.choice(["studdy", "model", "dtype", "knob", "objective", "sampler", "trials", "x", "seed"])
            spec[key] = rng.choice([1, "a", [1], {"a": 1}])
        elif kind == "typo_key":
            key = rng.choice([k for k in spec if k in TOP_KEYS])
            spec[_typo(key, rng)] = spec.pop(key)
        elif kind == "drop_required":
            key = rng.choice(["study", "target", "models", "dtypes", "objectives", "search"])
            spec.pop(key, None)
        elif kind == "model_unknown_key":
            if isinstance(spec.get("models"), list) and spec["models"] and isinstance(spec["models"][0], dict):
                spec["models"][0][rng.choice(["param", "builtins", "weights_", "sorce"])] = 1
            else:
                spec["models"] = [{"name": "m", "builtin": "gemv", "parms": {}}]
        else:
            if isinstance(spec.get("models"), list) and spec["models"]:
                spec["models"].append(copy.deepcopy(spec["models"][0]))
            else:
                spec["models"] = [{"name": "m", "builtin": "gemv"}, {"name": "m", "builtin": "gemv"}]
        applied.append(kind)
    text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
    kind = rng.random()
    if kind < 0.04:                          # text-level breakage on top
        text += "study: twice\n" if not text.startswith("study:") or "\nstudy:" in text else "targets: [\n"
        applied.append("text")
    elif kind < 0.06:
        text = "[" * rng.randint(40, 3000) + text
        applied.append("deep")
    elif kind < 0.07:
        text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{b}: &{b} [{', '.join(['*' + a] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi")) + text
        applied.append("aliases")
    return text, applied


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


_WHERE = re.compile(r"error: (\S+?):( |\d)")
_YAML_PATH = re.compile(r"[A-Za-z_][\w-]*(\[\d+\]|\.[\w-]+)*")     # models[1].params.K


def _check_one(tmp_path: Path, capsys, argv: list[str], text: str, applied: list[str]) -> None:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_SPEC_S)
    try:
        rc = main(argv)
    except _Hang:
        pytest.fail(f"hang (> {PER_SPEC_S} s) on a spec mutated by {applied}:\n{text[:2000]}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out, err = capsys.readouterr()
    what = f"mutations {applied}, spec:\n{text[:2000]}\nstderr:\n{err}"
    assert rc == 2, f"exit {rc} (expected 2) for {what}"
    assert "Traceback" not in err, what
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("error: "), what
    m = _WHERE.match(lines[0])
    assert m, f"the error does not name a place: {what}"
    place = m.group(1)
    named = place.startswith(str(tmp_path)) or _YAML_PATH.fullmatch(place)
    assert named, f"the error names neither a YAML path nor the file: {what}"


def test_a_thousand_bad_specs_each_get_one_error_line(tmp_path, capsys):
    rng = random.Random(SEED)
    path = tmp_path / "spec.yaml"
    for i in range(N_SPECS):
        text, applied = mutate(rng)
        path.write_text(text)
        _check_one(tmp_path, capsys, ["validate", str(path)], text, applied)


@pytest.mark.slow
def test_bad_specs_through_dse_eval(tmp_path, capsys):
    """A sample of the same generator through `dse eval --no-synth`: refused before anything runs."""
    rng = random.Random(SEED + 1)
    path = tmp_path / "spec.yaml"
    for i in range(40):
        text, applied = mutate(rng)
        path.write_text(text)
        _check_one(tmp_path, capsys, ["eval", str(path), "--model", "gemv_4x8", "--dtype", "int8", "--no-synth",
                                      "--sim", "pysim", "--workdir", str(tmp_path / "w")], text, applied)

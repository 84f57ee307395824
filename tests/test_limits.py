"""Time limits on a user's code and on every in-process stage, and cache keys that follow the
data a user's model reads."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import yaml

import dse.models.user_model
from dse.cache import EvalCache, cached_evaluate, key_material, make_key
from dse.cli import main
from dse.evaluate import EvalContext
from dse.limits import TimeLimitExceeded, time_limit
from dse.spec import DesignPoint, load_spec
from dse.frozen import FrozenMap


def test_time_limit_interrupts_a_loop_and_nests():
    t0 = time.monotonic()
    with pytest.raises(TimeLimitExceeded, match="spinning exceeded its time limit of 0.2 s"):
        with time_limit(0.2, "spinning"):
            while True:
                pass
    assert time.monotonic() - t0 < 2
    # an inner limit that is longer than the outer one never extends it
    with pytest.raises(TimeLimitExceeded, match="outer"):
        with time_limit(0.2, "outer"), time_limit(30, "inner"):
            while True:
                pass
    # a shorter inner limit fires first; the outer one keeps its deadline afterwards
    with pytest.raises(TimeLimitExceeded, match="outer"):
        with time_limit(0.5, "outer"):
            with pytest.raises(TimeLimitExceeded, match="inner"):
                with time_limit(0.1, "inner"):
                    while True:
                        pass
            while True:
                pass
    with time_limit(None, "no limit"):
        pass


def test_a_limit_that_expires_inside_a_finalizer_fires_just_after_it(capfd):
    """An exception raised in `__del__` is printed and dropped, so a limit expiring there would
    be lost and the work run on unlimited: it fires again once the finalizer has returned."""
    class Slow:
        def __del__(self):
            t = time.monotonic()
            while time.monotonic() - t < 0.3:
                pass

    t0 = time.monotonic()
    with pytest.raises(TimeLimitExceeded, match="spinning"):
        with time_limit(0.1, "spinning"):
            Slow()                                   # finalised at once; the alarm lands in it
            while time.monotonic() - t0 < 5:
                pass
    assert 0.3 <= time.monotonic() - t0 < 2
    assert "Exception ignored" not in capfd.readouterr().err


def test_a_user_exception_handler_cannot_swallow_the_limit():
    with pytest.raises(TimeLimitExceeded):
        with time_limit(0.1, "stubborn"):
            while True:
                try:
                    time.sleep(0.01)
                except Exception:        # noqa: BLE001 - what a careless user model might do
                    pass


def _spec(tmp_path: Path, source: str, **extra) -> Path:
    spec = {"study": "lim", "target": "ecp5",
            "models": [{"name": "m", "source": source}], "dtypes": ["int8"],
            "objectives": ["cycles"], "search": {"sampler": "grid"}, **extra}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_a_model_file_that_never_finishes_importing_is_an_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(dse.models.user_model, "IMPORT_TIME_LIMIT_S", 0.5)
    (tmp_path / "forever.py").write_text("while True:\n    pass\n")
    t0 = time.monotonic()
    assert main(["validate", str(_spec(tmp_path, "forever.py:build"))]) == 2
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err
    assert err == ("error: models[0].source: importing forever.py did not finish within 0.5 s (it is your code, "
                   "run at import: define functions there, do the work in build())\n")


FOREVER_FORWARD = """
from tinygrad import dtypes

def build(dtype, N=4):
    def forward(x):
        while True:
            pass
    return {"x": ((N,), dtype)}, forward
"""


def test_every_in_process_stage_runs_under_stage_timeout(tmp_path):
    (tmp_path / "slow.py").write_text(FOREVER_FORWARD)
    spec = load_spec(_spec(tmp_path, "slow.py:build", stage_timeout_s=1))
    ctx = EvalContext.from_spec(spec, sim_backend="pysim", synthesize=False)
    t0 = time.monotonic()
    row, cached, _ = cached_evaluate(ctx, DesignPoint("m", "int8", FrozenMap()), tmp_path / "w",
                                     EvalCache(tmp_path / "cache"))
    assert time.monotonic() - t0 < 15       # the key's build and the evaluation: 1 s each, plus start-up
    # the model's forward() runs when it is traced, in the compile stage (dse.evaluate.BuiltPoint)
    assert (row["status"], row["stage"], row["error_type"]) == ("FAIL", "compile", "TimeLimitExceeded")
    assert row["error"] == "stage compile (stage_timeout_s) exceeded its time limit of 1 s"
    assert not cached and not any((tmp_path / "cache").rglob("*.json"))     # a time-out is not cached


WEIGHTS_AT_IMPORT = """
from pathlib import Path
import numpy as np
from tinygrad import Tensor, dtypes

W = np.load(Path(__file__).with_name("w.npz"))["w"]

def build(dtype, N=4):
    def forward(x):
        return x.cast(dtypes.int32) * Tensor(W)
    return {"x": ((N,), dtype)}, forward
"""

WEIGHTS_IN_BUILD = """
from pathlib import Path
import numpy as np
from tinygrad import Tensor, dtypes

def build(dtype, N=4):
    W = np.load(Path(__file__).with_name("w.npz"))["w"]
    def forward(x):
        return x.cast(dtypes.int32) * Tensor(W)
    return {"x": ((N,), dtype)}, forward
"""


@pytest.mark.parametrize("code", [WEIGHTS_AT_IMPORT, WEIGHTS_IN_BUILD], ids=["at_import", "in_build"])
def test_the_cache_key_follows_the_weights_a_user_model_reads(tmp_path, code):
    (tmp_path / "model.py").write_text(code)
    np.savez(tmp_path / "w.npz", w=np.arange(4, dtype=np.int32))
    spec = load_spec(_spec(tmp_path, "model.py:build"))
    ctx = EvalContext.from_spec(spec, sim_backend="pysim", synthesize=False)
    p = DesignPoint("m", "int8", FrozenMap())
    material = key_material(ctx, p)
    assert str((tmp_path / "w.npz").resolve()) in material["model"]["reads"]
    before = make_key(material)
    assert make_key(key_material(ctx, p)) == before                    # stable while nothing changes
    cache = EvalCache(tmp_path / "cache")
    first, cached, _ = cached_evaluate(ctx, p, tmp_path / "w1", cache)
    assert first["status"] == "OK" and not cached

    np.savez(tmp_path / "w.npz", w=-np.arange(4, dtype=np.int32))     # the user retrains
    after = make_key(key_material(ctx, p))
    assert after != before
    second, cached, _ = cached_evaluate(ctx, p, tmp_path / "w2", cache)
    assert second["status"] == "OK" and not cached                     # evaluated again, not served stale


COUNTED_BUILD = """
from pathlib import Path
from tinygrad import dtypes

def build(dtype, N=4):
    with open(Path(__file__).with_name("builds.txt"), "a") as f:
        f.write("x")
    return {"x": ((N,), dtype)}, lambda x: x.cast(dtypes.int32) + 1
"""


def test_a_user_model_is_built_once_a_point_for_its_key_and_its_evaluation(tmp_path):
    """A user's builder may load a large model or train one: it runs once for a point's cache key
    and its evaluation together (dse.evaluate.one_build), where it ran four times, and again for
    the next point (whose key must see the files it reads then)."""
    (tmp_path / "model.py").write_text(COUNTED_BUILD)
    ctx = EvalContext.from_spec(load_spec(_spec(tmp_path, "model.py:build")), sim_backend="pysim",
                                synthesize=False)
    cache = EvalCache(tmp_path / "cache")
    builds = tmp_path / "builds.txt"
    checked = len(builds.read_text())           # the spec's check that the model builds
    row, cached, _ = cached_evaluate(ctx, DesignPoint("m", "int8", FrozenMap()), tmp_path / "w1", cache)
    assert row["status"] == "OK" and row["correct"] and not cached
    assert len(builds.read_text()) == checked + 1
    row, cached, _ = cached_evaluate(ctx, DesignPoint("m", "int8", FrozenMap({"lanes": 2})), tmp_path / "w2", cache)
    assert row["status"] == "OK" and row["correct"] and not cached
    assert len(builds.read_text()) == checked + 2

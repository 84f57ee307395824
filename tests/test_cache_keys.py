"""Every content cache's key covers the code that computes its entries (compiler.cache).

A cache that serves what the current code would not compute is worse than no cache: these
tests edit a copy of each file a cache's key covers and check that the key changes, check that
the evaluation cache covers every module of both packages (derived, so a new module cannot be
left out), and run a trained model's point, change the quantiser in a copy of the tree, and see
the point computed again instead of served.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from compiler.cache import CACHES, EVALS, PNR, PROJECT_ROOT, SYNTH, WHOLE_PROJECT, covered_files

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of both packages, to edit."""
    root = tmp_path_factory.mktemp("tree")
    for package in WHOLE_PROJECT:
        shutil.copytree(PROJECT_ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_every_cache_is_listed_once_with_what_it_is_keyed_on():
    names = [c.name for c in CACHES]
    assert len(names) == len(set(names)) == 7
    assert {"evals", "references", "synth", "pnr", "cxxrtl", "fp-harness", "qat"} == set(names)
    for cache in CACHES:
        assert cache.keyed_on and covered_files(cache.code), cache.name


def test_the_evaluation_caches_cover_every_file_of_both_packages():
    every = {p.relative_to(PROJECT_ROOT) for pkg in WHOLE_PROJECT for p in (PROJECT_ROOT / pkg).rglob("*.py")
             if "__pycache__" not in p.parts}
    for cache in CACHES:
        if cache.code == WHOLE_PROJECT:
            assert every <= set(covered_files(cache.code)), cache.name
    # the modules the cache-key issue named as left out before
    names = {p.as_posix() for p in covered_files(EVALS.code)}
    for module in ("dse/models/quantize.py", "dse/models/accuracy.py", "dse/models/data.py", "dse/models/convnet.py", "dse/spec.py",
                   "dse/fidelity.py", "dse/evaluate.py", "compiler/synth/area.py"):
        assert module in names


@pytest.mark.parametrize("cache", CACHES, ids=lambda c: c.name)
def test_editing_any_covered_file_changes_the_key(cache, tree):
    material = {"what": "the same material every time"}
    base = cache.key(material, root=tree)
    assert base == cache.key(material)                      # the copy is the installed tree
    files = covered_files(cache.code, tree)
    for rel in files:
        path = tree / rel
        original = path.read_bytes()
        try:
            path.write_bytes(original + b"\n# an edit\n")
            assert cache.key(material, root=tree) != base, f"{cache.name}: editing {rel} left the key alone"
        finally:
            path.write_bytes(original)
    assert cache.key(material, root=tree) == base
    assert cache.key({"what": "other material"}, root=tree) != base


def test_a_tool_cache_key_ignores_code_that_does_not_compute_its_entries(tree):
    """The synthesis and place-and-route caches are keyed on the bytes the tool reads plus the
    module that reads the tool's output: editing the report writer must not throw away hours of
    nextpnr runs."""
    material = {"netlist": "x"}
    before = {c.name: c.key(material, root=tree) for c in (SYNTH, PNR)}
    path = tree / "dse" / "report.py"
    original = path.read_bytes()
    try:
        path.write_bytes(original + b"\n# an edit\n")
        assert {c.name: c.key(material, root=tree) for c in (SYNTH, PNR)} == before
        assert EVALS.key(material, root=tree) != EVALS.key(material)
    finally:
        path.write_bytes(original)


def test_an_unknown_module_in_a_cache_code_list_is_an_error():
    from compiler.cache import ContentCache
    with pytest.raises(ValueError, match="cache code 'compiler.no_such_module': no module or package"):
        ContentCache("x", 1, ("compiler.no_such_module",)).key({})


# ---------------------------------------------------------------------------------------------
# end to end: a changed quantiser is computed again, not served

def _sweep(tree: Path, spec: Path, results: Path, cache: Path) -> pd.DataFrame:
    env = {**os.environ, "PYTHONPATH": str(tree), "TINYHW_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, "-m", "dse.cli", "sweep", str(spec), "--results", str(results),
                           "--progress", "off"], cwd=spec.parent, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return pd.read_csv(results / "digits_cache" / "trials.csv")


@pytest.mark.slow
def test_a_point_is_computed_again_when_the_quantiser_changes(tree, tmp_path):
    spec = tmp_path / "digits.yaml"
    spec.write_text(yaml.safe_dump({
        "study": "digits_cache", "target": "ecp5",
        "models": [{"name": "digits_mlp", "weights": str(ROOT / "models" / "digits_mlp.npz")}],
        "data": {"dataset": "sklearn:digits", "samples": 40},
        "dtypes": ["int8"], "objectives": ["accuracy", "cycles"], "search": {"sampler": "grid", "seed": 0}}))
    cache = tmp_path / "cache"
    first = _sweep(tree, spec, tmp_path / "r1", cache)
    again = _sweep(tree, spec, tmp_path / "r2", cache)
    assert first["status"].tolist() == again["status"].tolist() == ["OK"]
    assert not first["cached"].item() and again["cached"].item()
    assert again["code_digest"].item() == first["code_digest"].item() == EVALS.code_digest(tree)
    assert again["logit_mean_err"].item() == first["logit_mean_err"].item()

    quantize = tree / "dse" / "models" / "quantize.py"
    original = quantize.read_text()
    rounded = "Wq = np.clip(np.round(layer.W / s_w[:, None]), -qmax, qmax)"
    assert rounded in original
    try:
        # weights truncated toward minus infinity instead of rounded: other numbers, same hardware
        quantize.write_text(original.replace(rounded, rounded.replace("np.round(", "np.floor(")))
        changed = _sweep(tree, spec, tmp_path / "r3", cache)
    finally:
        quantize.write_text(original)
    assert changed["status"].item() == "OK" and changed["correct"].item()     # bit-exact with its golden model
    assert not changed["cached"].item()
    assert changed["code_digest"].item() != first["code_digest"].item()
    assert changed["logit_mean_err"].item() != first["logit_mean_err"].item()

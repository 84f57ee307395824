"""Shared test setup. Helpers that several test modules use live in tests/helpers.py (imported
as `helpers`; test modules never import each other); test designs with numpy references in
tests/designs.py; tinygrad's own forward cases in tests/ops_catalog.py.

Tests that run Yosys, nextpnr, Icarus Verilog or a C++ build (CXXRTL) are marked `slow`
(`python -m pytest -m "not slow"` leaves them out; CI runs them all).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:            # `helpers`, `designs` importable however pytest is started
    sys.path.insert(0, str(TESTS))

from dse.models.data import DataSpec, load_dataset  # noqa: E402 - after the path is set
from helpers import SYNTH_CALLS, fake_area  # noqa: E402


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch) -> Path:
    """A fresh, empty $TINYHW_CACHE for one test (cache hits and misses that the test counts)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("TINYHW_CACHE", str(path))
    return path


def pytest_collection_modifyitems(config, items):
    """A test that uses a fixture which runs Yosys or a C++ build is slow too: a module names
    such fixtures in TOOL_FIXTURES (pytest cannot mark a fixture itself)."""
    for item in items:
        tool_fixtures = getattr(item.module, "TOOL_FIXTURES", ())
        if any(name in tool_fixtures for name in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def fake_synth(monkeypatch):
    """Replace Yosys by fake_area; SYNTH_CALLS counts real evaluations."""
    SYNTH_CALLS.clear()

    def synthesize(design, target="ecp5", workdir=None, timeout=600, **options):
        SYNTH_CALLS.append(design.config.mem_read)
        return fake_area(design, target)
    monkeypatch.setattr("compiler.synth.area.synthesize", synthesize)
    return SYNTH_CALLS


@pytest.fixture(scope="session")
def digits():
    return load_dataset(DataSpec(dataset="sklearn:digits"))


@pytest.fixture(autouse=True)
def _fresh_builds():
    """Each test compiles its own points: dse.evaluate keeps built models and their designs per
    process, and a test may replace a compiler function another test's kept design never calls."""
    from dse.evaluate import forget_built
    forget_built()
    yield

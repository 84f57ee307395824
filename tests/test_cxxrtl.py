"""CXXRTL back end: same outputs and cycles as pysim and the reference, binary cache, build errors.

The equivalence tests share the normal binary cache (TINYHW_CACHE or ~/.cache/tinyhw, keyed by
content) and build every design they need up front, in bundles on all cores; the cache and
error tests use empty temporary caches.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

import designs
from helpers import assert_exact
from compiler import HardwareConfig, compile_model, simulate, simulate_many
from compiler.sim import cxxrtl
from compiler.tools import ToolError

TOOL_FIXTURES = {'small'}     # they run Yosys or a C++ build: their users are slow (conftest.py)
MODES = ["sync", "comb"]
ROOT = Path(__file__).resolve().parent.parent


def compiled(builders: dict, modes=MODES) -> dict:
    out = {}
    for name, make in builders.items():
        for mode in modes:
            case = make()
            out[name, mode] = compile_model(*case.outputs, config=HardwareConfig(mem_read=mode)), case
    return out


@pytest.fixture(scope="session")
def small():
    built = compiled(designs.SMALL)
    # one bundle per core instead of 22 builds, at g++ -O0 (as past cxxrtl.LARGE_RTLIL): these
    # designs run a few dozen cycles, so -O1's optimiser time is never paid back
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cxxrtl, "LARGE_RTLIL", 0)
        cxxrtl.build_many(d for d, _ in built.values())
    return built


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(designs.SMALL))
def test_small_designs_agree_with_pysim_and_reference(small, name, mode):
    design, case = small[name, mode]
    cx = simulate(design, backend="cxxrtl")
    py = simulate(design, backend="pysim")
    assert cx.backend == "cxxrtl"
    assert cx.cycles == py.cycles == design.cycles_formula
    assert_exact(cx.outputs, py.outputs)
    assert_exact(cx.outputs, list(case.reference))
    assert cx.buffers.keys() == py.buffers.keys()
    for buf in py.buffers:
        np.testing.assert_array_equal(cx.buffers[buf], py.buffers[buf])
    assert cx.seconds > 0 and cx.build_seconds == 0.0     # built by the fixture


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp_int8_small", "fan_out", "mixed_int16"])
def test_one_eval_per_cycle_matches_the_plain_step_loop(small, name):
    for mode in MODES:
        design, _ = small[name, mode]
        fast = cxxrtl.run_cxxrtl(design)
        plain = cxxrtl.run_cxxrtl(design, step_always=True)
        assert fast.cycles == plain.cycles
        for buf in plain.buffers:                         # every memory, not only the outputs
            np.testing.assert_array_equal(fast.buffers[buf], plain.buffers[buf])


_READ_PORT = re.compile(r"parameter \\TRANSPARENCY_MASK (\d+)'([01]+)\n(\s*)parameter \\COLLISION_X_MASK \d+'[01]+")


def _write_first(text: str) -> str:
    """Every read port transparent to every write port: a word read in the cycle it is written
    gives the new data, where Amaranth's non-transparent ports give the old."""
    return _READ_PORT.sub(lambda m: f"parameter \\TRANSPARENCY_MASK {m[1]}'{'1' * len(m[2])}\n"
                                    f"{m[3]}parameter \\COLLISION_X_MASK {m[1]}'{'0' * len(m[2])}", text)


@pytest.mark.slow
def test_no_output_depends_on_reading_a_word_in_the_cycle_it_is_written(monkeypatch):
    """Memories whose ports are not transparent are declared `no_rw_check` (such collisions
    undefined: compiler/hw/kernel.py NO_RW_CHECK), which is sound only if no result depends on one.
    Simulated with the opposite answer (new data, not old) on every port, every design (one
    kernel and several, copies between them, shared buffers, banked and pipelined memories)
    still gives its reference outputs and cycles: reads and writes never meet in a cycle
    whose read data is used."""
    real = cxxrtl.design_rtlil
    changed = []

    def write_first(design):
        text = real(design)
        out = _write_first(text)
        changed.append(out != text)
        return out

    monkeypatch.setattr(cxxrtl, "design_rtlil", write_first)
    configs = [HardwareConfig(), HardwareConfig(lanes=2, fp_pipeline=2, share_buffers=True, mem_pack=1),
               HardwareConfig(lanes=2, reduce_unroll=2, fp_pipeline=3), HardwareConfig(fp_pipeline=3, target_mhz=200)]
    built = [(compile_model(*case.outputs, config=cfg), case) for cfg in configs
             for case in (make() for make in designs.SMALL.values())]
    # at g++ -O0 (as cxxrtl builds designs past LARGE_RTLIL): these 44 designs run a few dozen
    # cycles each, so -O1's optimiser time is never paid back (this test: 52 s of CPU, not 69)
    monkeypatch.setattr(cxxrtl, "LARGE_RTLIL", 0)
    cxxrtl.build_many(d for d, _ in built)
    assert len(changed) == len(built) and all(changed)
    for design, case in built:
        r = simulate(design, backend="cxxrtl")
        assert r.cycles == design.cycles_formula, design.name()
        assert_exact(r.outputs, list(case.reference))


@pytest.mark.slow
def test_large_designs_match_reference():
    built = compiled(designs.LARGE)
    cxxrtl.build_many(d for d, _ in built.values())
    for (name, mode), (design, case) in built.items():
        r = simulate(design, backend="cxxrtl")
        assert r.cycles == design.cycles_formula, (name, mode)
        assert_exact(r.outputs, list(case.reference))


@pytest.mark.slow
def test_inputs_override_one_binary_serves_every_dataset(small, monkeypatch):
    monkeypatch.setattr(cxxrtl, "LARGE_RTLIL", 0)        # as `small` built gemv_int8_16x8: its key
    rng = np.random.default_rng(11)
    W, x = rng.integers(-128, 128, (16, 8)).astype(np.int8), rng.integers(-128, 128, 8).astype(np.int8)
    tx = Tensor(x)
    y = Tensor(W).cast(dtypes.int32) @ tx.cast(dtypes.int32)
    design = compile_model(y, config=HardwareConfig(mem_read="sync"))
    for seed in range(3):
        x2 = np.random.default_rng(seed).integers(-128, 128, 8).astype(np.int8)
        r = simulate(design, {tx: x2}, backend="cxxrtl")
        assert r.build_seconds == 0.0                     # same RTLIL as gemv_int8_16x8: cached
        assert_exact(r.outputs, [W.astype(np.int32) @ x2.astype(np.int32)])
        assert_exact(r.outputs, simulate(design, {tx: x2}).outputs)


@pytest.mark.slow
def test_simulate_many_runs_every_sample_in_one_process_like_single_runs(small):
    """A two-kernel int8 MLP (intermediate buffer, requantisation): each batched run starts
    fresh, so its outputs and cycles equal a run of its own; one process serves the batch."""
    rng = np.random.default_rng(5)
    W1, W2 = rng.integers(-128, 128, (8, 16)).astype(np.int8), rng.integers(-128, 128, (4, 8)).astype(np.int8)
    tx = Tensor(rng.integers(-128, 128, 16).astype(np.int8))
    h = ((Tensor(W1).cast(dtypes.int32) @ tx.cast(dtypes.int32)) >> 7).clip(0, 127)
    y = Tensor(W2).cast(dtypes.int32) @ h
    design = compile_model(y, config=HardwareConfig(mem_read="sync", lanes=2))
    xs = [rng.integers(-128, 128, 16).astype(np.int8) for _ in range(6)]
    calls = []
    real = cxxrtl.run_tool
    def counting(*a, **k):
        if a[0][1:] == ["in.bin", "out.bin"]:           # a simulation run (not a build step)
            calls.append(a[0][0])
        return real(*a, **k)
    import unittest.mock
    with unittest.mock.patch.object(cxxrtl, "run_tool", counting):
        many = simulate_many(design, [{tx: x} for x in xs])
    assert len(calls) == 1 and len(many) == len(xs)
    for x, r in zip(xs, many):
        want = W2.astype(np.int32) @ np.clip((W1.astype(np.int32) @ x.astype(np.int32)) >> 7, 0, 127)
        assert_exact(r.outputs, [want.astype(np.int32)])
        assert r.cycles == design.cycles_formula
        one = simulate(design, {tx: x}, backend="cxxrtl")
        assert_exact(r.outputs, one.outputs)
    # the same through pysim (one process per sample there) for the first two
    for x, r in zip(xs[:2], simulate_many(design, [{tx: x} for x in xs[:2]], backend="pysim")):
        assert_exact(r.outputs, simulate(design, {tx: x}).outputs)


@pytest.mark.slow
def test_second_simulate_reuses_the_binary(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYHW_CACHE", str(tmp_path))
    builds = cxxrtl.stats.builds
    first = simulate(compile_model(*designs.add_relu(N=24).outputs), backend="cxxrtl")
    assert first.build_seconds > 0 and cxxrtl.stats.builds == builds + 1
    # a fresh Design object with the same RTLIL: found on disk, g++ not run
    again = compile_model(*designs.add_relu(N=24).outputs)
    second = simulate(again, backend="cxxrtl")
    third = simulate(again, backend="cxxrtl")             # and remembered for this Design object
    assert second.build_seconds == third.build_seconds == 0.0
    assert cxxrtl.stats.builds == builds + 1
    assert_exact(second.outputs, first.outputs)
    assert second.cycles == third.cycles == first.cycles
    binaries = list((tmp_path / "cxxrtl").glob("*/*/sim"))
    assert binaries == [cxxrtl.build(again).path]
    assert not list((tmp_path / "cxxrtl").glob("build-*"))


@pytest.mark.slow
def test_build_failure_raises_with_compiler_output(tmp_path, monkeypatch, isolated_cache):
    fake = tmp_path / "fake-cxx"
    fake.write_text("#!/bin/sh\necho 'driver.cc:1: fatal error: pretend the compiler broke' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("TINYHW_CXX", str(fake))
    design = compile_model(*designs.add_relu(N=20).outputs)
    with pytest.raises(cxxrtl.CxxrtlBuildError) as info:
        simulate(design, backend="cxxrtl")
    msg = str(info.value)
    assert isinstance(info.value, ToolError)
    assert f"fake-cxx: building the CXXRTL simulation of {design.name()} failed: exited with code 1" in msg
    assert "pretend the compiler broke" in msg                      # the tail of the compiler output
    assert not list((tmp_path / "cache" / "cxxrtl").glob("*/*/sim"))  # nothing half-built in the cache


@pytest.mark.slow
def test_a_large_design_is_compiled_at_O0_in_a_bundle_of_its_own(monkeypatch, isolated_cache):
    """Above LARGE_RTLIL characters of RTLIL g++ runs at -O0 (cxxrtl.CXX_FLAGS_LARGE): the
    designs of each level share a bundle, never one of the other, and both simulate exactly."""
    small_case, large_case = designs.add_relu(N=20), designs.SMALL["gemv_int8_16x8"]()
    small, large = (compile_model(*c.outputs) for c in (small_case, large_case))
    sizes = [len(cxxrtl.design_rtlil(d)) for d in (small, large)]
    assert sizes[0] < sizes[1]
    monkeypatch.setattr(cxxrtl, "LARGE_RTLIL", sizes[0])
    runs = []
    compile_cxxrtl = cxxrtl.compile_cxxrtl
    monkeypatch.setattr(cxxrtl, "compile_cxxrtl", lambda work, script, source, *, cxx, flags, extra: (
        runs.append((flags, sum(line.startswith("read_rtlil") for line in script))),
        compile_cxxrtl(work, script, source, cxx=cxx, flags=flags, extra=extra))[1])
    cxxrtl.build_many([small, large], jobs=1)
    assert sorted(runs) == [(cxxrtl.CXX_FLAGS_LARGE, 1), (cxxrtl.CXX_FLAGS, 1)]
    for design, case in ((small, small_case), (large, large_case)):
        result = simulate(design, backend="cxxrtl")
        assert_exact(result.outputs, case.reference)
        assert result.cycles == design.cycles_formula


def test_the_driver_and_its_prelude_are_compiled_once_per_compiler_and_flags(monkeypatch, isolated_cache):
    """cxxrtl.runtime: the driver object and the precompiled prelude are built by the first
    bundle and only linked and included by the next; each bundle's g++ run compiles its designs
    alone, and every design still simulates exactly."""
    calls = []
    run_tool = cxxrtl.run_tool
    monkeypatch.setattr(cxxrtl, "run_tool", lambda cmd, **kw: (calls.append(cmd), run_tool(cmd, **kw))[1])
    cases = [designs.add_relu(N=20), designs.add_relu(N=12)]
    compiled = [compile_model(*c.outputs) for c in cases]
    for design in compiled:                        # two bundles, one after the other
        cxxrtl.build(design)
    assert sum("driver.cc" in c for c in calls) == 1
    assert sum("-x" in c and "prelude.h" in c for c in calls) == 1
    bundles = [c for c in calls if "sim.cc" in c]
    assert len(bundles) == 2
    folder = cxxrtl.runtime(cxxrtl.cxx_compiler(), cxxrtl.CXX_FLAGS).folder
    for cmd in bundles:
        assert str(folder / "driver.o") in cmd and str(folder / "prelude.h") in cmd
    assert (folder / "prelude.h.gch").is_file()
    for design, case in zip(compiled, cases):
        result = simulate(design, backend="cxxrtl")
        assert_exact(result.outputs, case.reference)
        assert result.cycles == design.cycles_formula


def test_missing_compiler_is_a_tool_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYHW_CXX", "no-such-cxx-compiler")
    monkeypatch.setenv("TINYHW_CACHE", str(tmp_path))
    with pytest.raises(ToolError, match="no-such-cxx-compiler: not found"):
        simulate(compile_model(*designs.add_relu(N=20).outputs), backend="cxxrtl")


@pytest.mark.slow
def test_run_that_never_finishes_fails_clearly(small):
    design, _ = small["gemv_int8_16x8", "sync"]
    with pytest.raises(ToolError, match="done not reached after 5 cycles"):
        cxxrtl.run_cxxrtl(design, max_cycles=5)


def test_unknown_backend_lists_the_available_ones(small):
    with pytest.raises(ValueError, match="unknown simulation backend 'verilator'; available: 'pysim', 'cxxrtl'"):
        simulate(small["add_relu", "sync"][0], backend="verilator")


CHILD = """
import json, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, {tests!r})
import designs
from compiler import compile_model, simulate
from compiler.sim import cxxrtl

case = designs.add_relu(N=28)
design = compile_model(*case.outputs)
Path(sys.argv[1]).touch()
while not Path(sys.argv[2]).exists():
    time.sleep(0.005)
r = simulate(design, backend="cxxrtl")
ok = all(np.array_equal(o, ref) for o, ref in zip(r.outputs, case.reference))
print(json.dumps({{"ok": ok, "cycles": r.cycles, "builds": cxxrtl.stats.builds, "waits": cxxrtl.stats.waits}}))
"""


def test_two_processes_building_at_once_share_one_build(tmp_path):
    env = dict(os.environ, TINYHW_CACHE=str(tmp_path / "cache"))
    env.pop("TINYHW_CXX", None)
    script = CHILD.format(tests=str(ROOT / "tests"))
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / f"ready{i}"), str(go)], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    go.touch()                                            # both start simulate() together
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results)
    assert results[0]["cycles"] == results[1]["cycles"]
    assert sorted((r["builds"], r["waits"]) for r in results) == [(0, 1), (1, 0)]   # one built, one waited
    folder = tmp_path / "cache" / "cxxrtl"
    assert len(list(folder.glob("*/*/sim"))) == 1
    assert not list(folder.glob("build-*"))


def test_prepare_rtlil_drops_src_and_zero_meminit_only():
    def meminit(data):
        return ("  attribute \\src \"x.py:1\"\n  cell $meminit_v2 $1\n    parameter \\WIDTH 4\n"
                f"    connect \\DATA 8'{data}\n    connect \\EN 4'1111\n  end\n")
    text = "module \\top\n" + meminit("00000000") + meminit("00010010") + "end\n"
    kept = cxxrtl.prepare_rtlil(text)
    assert "\\src" not in kept
    assert kept.count("$meminit_v2") == 1 and "8'00010010" in kept


@pytest.mark.slow
def test_a_register_of_a_constant_that_drives_a_kernel_port_builds(tmp_path, capsys):
    """A dataflow CNN with constant weights (conv 3x3, overlapping 3x3/2 max-pool, conv 2x2, dense):
    a ring bank's landing write address is a register of a constant 0 whose output, and the
    kernel port it drives, both carry its init attribute; Yosys's opt_dff turned it into the
    constant and opt_clean stopped on "Conflicting init values" until the passes cleaned first
    (cxxrtl.YOSYS_PASSES). Every sample bit-exact, cycles as modelled."""
    from onnx import helper
    from helpers import eval_model, model_spec, save_onnx
    rng = np.random.default_rng(5)

    def w(*shape):
        return rng.normal(0, 0.3, shape).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "c1"], ["h"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Conv", ["p", "c2", "b2"], ["h2"], kernel_shape=[2, 2]), helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["f"]), helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]
    save_onnx(tmp_path / "cnn.onnx", nodes, {"c1": w(4, 1, 3, 3), "c2": w(5, 4, 2, 2), "b2": w(5), "fc": w(10, 20)},
              ["N", 1, 8, 8], ["N", 10])
    spec = model_spec(tmp_path, ["int8"], onnx="cnn.onnx", data={"dataset": "sklearn:digits", "samples": 12})
    row = eval_model(capsys, spec, "int8", "--set", "schedule=dataflow", "--set", "weights=constant", "--set", "lanes=64",
                     "--set", "reduce_unroll=64", "--set", "fp_pipeline=3", "--set", "target_mhz=150")
    assert row["status"] == "OK" and row["correct"] and row["samples"] == 12, row
    assert row["cycles"] == row["cycles_model"]

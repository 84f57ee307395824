"""compiler.export_stream: a schedule=dataflow design exported with a testbench that streams
samples back to back through the start/done-per-beat handshake, run in Icarus Verilog.

Each sample's expected words are checked against numpy here; the testbench must PASS with the
modelled interval and latency, and FAIL on one wrong expected word.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from compiler import CompileError, HardwareConfig, compile_model, export_design
from compiler.bus.wrapper import BusError
from helpers import int8_mlp, needs_iverilog

TOOL_FIXTURES = ()


def run_testbench(out: Path) -> subprocess.CompletedProcess:
    subprocess.run(["iverilog", "-g2012", "-o", "tb.vvp", "tinyhw_top.v", "tb.v"], cwd=out, check=True,
                   capture_output=True, text=True, timeout=120)
    return subprocess.run(["vvp", "-n", "tb.vvp"], cwd=out, capture_output=True, text=True, timeout=300)


def expected_samples(out: Path, design) -> list[np.ndarray]:
    """Every streamed sample's output elements (int32), read back from the expected*.hex files."""
    info = json.loads((out / "interface.json").read_text())
    buf = design.graph.outputs[0]
    ports = sorted((p for p in info["host_ports"] if p["role"] == "output"), key=lambda p: p["sel"])
    samples = []
    for n in range(info["stream"]["samples"]):
        banks = []
        for p in ports:
            lines = (out / p["file"]).read_text().split()
            assert len(lines) == p["depth"] * p["samples"]
            banks.append([0 if "x" in w else int(w, 16) for w in lines[n * p["depth"]:(n + 1) * p["depth"]]])
        samples.append(design.buffer_words(buf, banks).astype(np.uint32).view(np.int32))
    return samples


def break_one_word(out: Path) -> None:
    """Flip the lowest bit of the last compared word of the first expected file (the last sample)."""
    path = sorted((out / "mem").glob("expected*.hex"))[0]
    lines = path.read_text().split("\n")
    i = max(i for i, line in enumerate(lines) if line and "x" not in line)
    lines[i] = format(int(lines[i], 16) ^ 1, f"0{len(lines[i])}x")
    path.write_text("\n".join(lines))


@pytest.mark.slow
@needs_iverilog
@pytest.mark.parametrize("sizes,knobs,back_to_back", [
    # a copy to another layout and per-layer folding: depth 5, the words fit inside a beat
    ([24, 16, 8, 4], {"lanes@0": 4, "reduce_unroll@0": 2, "lanes@1": 2}, True),
    # fp_pipeline 3, every hand-over in place
    ([16, 8, 4], {"lanes": 2, "fp_pipeline": 3}, True),
    # a 9-cycle beat and 64 input words: the testbench moves them between beats
    ([64, 8, 4], {"lanes@0": 8, "reduce_unroll@0": 8, "lanes@1": 4}, False),
    # the same at fp_pipeline 3: each ring's bank choices from a `running` and `last` of its own
    ([64, 8, 4], {"lanes@0": 8, "reduce_unroll@0": 8, "lanes@1": 4, "fp_pipeline": 3}, False),
    # stage_overlap: every stage's stores spill into the next beat, the output ring a bank longer
    ([24, 16, 8, 4], {"lanes@0": 4, "reduce_unroll@0": 8, "lanes@1": 4, "reduce_unroll@1": 4, "lanes@2": 2,
                      "reduce_unroll@2": 4, "fp_pipeline": 3, "target_mhz": 200, "stage_overlap": True}, False)],
    ids=["copy-depth5", "p3-in-place", "between-beats", "p3-between-beats", "overlap"])
def test_a_streamed_export_passes_its_testbench_and_fails_on_a_wrong_word(tmp_path, sizes, knobs, back_to_back):
    x, y, ref = int8_mlp(sizes)
    design = compile_model(y, config=HardwareConfig.from_dict({**knobs, "schedule": "dataflow"}), stream=x)
    exp = export_design(design=design, out_dir=tmp_path, backend="pysim")
    cm = design.cycle_model()
    assert (exp.cycles, exp.interval, exp.samples) == (cm.total, cm.interval, 4)
    info = json.loads((tmp_path / "interface.json").read_text())
    assert info["stream"]["back_to_back"] is back_to_back and info["stream"]["depth"] == design.flow.depth
    assert info["cycles"]["interval"] == cm.interval and "handshake" in info["protocol"]
    assert {p["name"] for p in info["ports"]} >= {"host_rsel", "host_raddr", "host_rdata", "start", "done"}
    # the samples are the design's data rolled by 0..3; each one's expected words are numpy's
    data = np.asarray(design.graph.buffers[design.buffer_of(x)].data).reshape(-1)
    for n, got in enumerate(expected_samples(tmp_path, design)):
        np.testing.assert_array_equal(got, ref(np.roll(data, n)))
    run = run_testbench(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    words = 4 * sizes[-1]
    if back_to_back:
        assert re.search(rf"PASS: 4 samples streamed back to back, {words} output words match; interval "
                         rf"{cm.interval} cycles, latency {cm.total} cycles \(= the cycle model\)", run.stdout)
    else:
        assert re.search(rf"PASS: 4 samples streamed, {words} output words match; every beat {cm.interval} cycles, "
                         rf"each sample's outputs complete {design.flow.depth} beats after its first", run.stdout)
    break_one_word(tmp_path)
    run = run_testbench(tmp_path)
    assert run.returncode != 0 and "MISMATCH sample 3" in run.stdout and "PASS" not in run.stdout


def test_streamed_exports_refuse_what_they_cannot_take(tmp_path):
    x, y, _ = int8_mlp([16, 8, 4])
    design = compile_model(y, config=HardwareConfig(schedule="dataflow"), stream=x)
    with pytest.raises(BusError, match="is a schedule=dataflow design that streams samples: use axi-stream"):
        export_design(design=design, out_dir=tmp_path / "a", bus="axi-lite")
    weights = next(b for b in design.graph.inputs if b not in design.flow.streamed)
    with pytest.raises(CompileError, match=rf"samples\[0\]: input buffer\(s\) \[{weights}\] are not streamed"):
        export_design(design=design, out_dir=tmp_path / "b", samples=[{weights: np.zeros(32, np.int8)}])
    with pytest.raises(CompileError, match="pass `samples`, not `result`"):
        export_design(design=design, out_dir=tmp_path / "d", result=object())
    x, y, _ = int8_mlp([16, 8, 4])
    seq = compile_model(y)
    with pytest.raises(CompileError, match="sequential design: it takes no stream of samples"):
        export_design(design=seq, out_dir=tmp_path / "c", samples=[{x: np.zeros(16, np.int8)}])
    assert not any((tmp_path / d).exists() for d in "abcd")


SPEC = """\
study: flow
target: ecp5
models:
  - name: m
    builtin: mlp
    params: {IN: 16, HIDDEN: 8, OUT: 4}
dtypes: [int8]
knobs:
  schedule: [dataflow]
  lanes: [2]
objectives: [interval_cycles, luts]
search: {sampler: grid, seed: 0}
"""


@pytest.mark.slow
@needs_iverilog
@pytest.mark.parametrize("bus", ["native", "axi-stream"])
def test_dse_eval_exports_a_dataflow_point_that_streams(tmp_path, capsys, bus):
    """`dse eval --export` of a schedule=dataflow point: the data input streams (the weights are
    loaded once), and the testbench streams four samples through it, natively or over AXI-Stream."""
    from dse.cli import main
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "hw"
    assert main(["eval", str(tmp_path / "spec.yaml"), "--model", "m", "--dtype", "int8", "--no-synth", "--sim", "pysim",
                 "--workdir", str(tmp_path / "work"), "--json", "--export", str(out), "--bus", bus]) == 0
    row = json.loads(capsys.readouterr().out)
    info = json.loads((out / "interface.json").read_text())
    assert row["schedule_built"] == "dataflow" and info["stream"]["interval"] == row["interval_cycles"] == row["interval_model"]
    assert info["stream"]["streamed_inputs"] == [b["buffer"] for b in info["buffers"] if b["role"] == "input"
                                                 and len(b["host_sel"]) and b["elements"] == 16]
    run = run_testbench(out)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"interval {row['interval_cycles']} cycles" in run.stdout and "PASS: 4 samples streamed back to back" in run.stdout

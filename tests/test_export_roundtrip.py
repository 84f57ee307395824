"""Every trial a sweep records exports exactly as it was evaluated, from the results folder alone
(`dse export RESULTS --trial N`, no --spec: dse.models.record): for each kind of model (a
builtin, a user's source, a source with weights and data files, a trained dense network, an
ONNX CNN, a QONNX network) in both schedules, behind the buses each can take, the memory files
hold the weights the evaluation used (the file's own, or its quantisation) and the testbench
passes in Icarus. A file changed after the sweep is refused by name, by the export and by the
sweep resuming; a study made before models were recorded needs --spec.

One sweep per kind of model (fake synthesis: the exports are the subject), shared by its cases."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dse.cli import main
from dse.evaluate import point_arrays
from dse.frozen import FrozenMap
from dse.models.record import file_problem, model_from_record, model_record, record_change
from dse.results import load_results
from dse.spec import load_spec
from helpers import cnn_onnx, fake_area, save_onnx, write_spec

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None,
                                    reason="Icarus Verilog not installed (apt-get install iverilog; .ci/run does)")

SOURCE = '''
from tinygrad import dtypes


def dense(dtype, N=6, M=4, shape=(4, 6)):
    """y = W @ x in int32; `shape`, a default JSON cannot hold, is W's."""
    def forward(x, W):
        return W.cast(dtypes.int32) @ x.cast(dtypes.int32)
    return {"x": ((N,), dtype), "W": (shape, dtype)}, forward
'''

DATA = {"file": "data.npz"}
KINDS = {
    "builtin": {"builtin": "gemv", "params": {"M": 4, "K": 6}},
    "source": {"source": "dense.py:dense", "params": {"N": 6}},
    "source_weights": {"source": "dense.py:dense", "weights": "w.npz", "data": DATA},
    "weights": {"weights": "net.npz", "data": DATA},
    "onnx": {"onnx": "cnn.onnx", "data": {"file": "images.npz"}},
    "qonnx": {"onnx": "q.onnx", "data": DATA},
}
CONSTANT = ("source_weights", "weights")          # swept with weights: [memory, constant] too
SCHEDULE_BUSES = {"sequential": ("native", "axi-lite"), "dataflow": ("native", "axi-stream")}
CASES = [(kind, schedule, "memory", bus) for kind in KINDS for schedule, buses in SCHEDULE_BUSES.items()
         for bus in buses] + [("source_weights", "sequential", "constant", "native"),
                              ("weights", "dataflow", "constant", "axi-stream")]


def _qonnx(path: Path, rng: np.random.Generator) -> Path:
    """A QONNX dense network 6-4-3: 6-bit signed inputs (scale 1), 4-bit weights per output row,
    4-bit unsigned hidden activations."""
    f32 = np.float32
    q1, q2 = rng.integers(-7, 8, (4, 6)), rng.integers(-7, 8, (3, 4))
    consts = {"zero": np.array(0, f32), "one": np.array(1, f32), "b4": np.array(4, f32), "b6": np.array(6, f32),
              "W1": (q1 * 0.05).astype(f32), "s1": np.full((4, 1), 0.05, f32), "b1": np.full(4, 0.5, f32),
              "sa": np.array(0.5, f32), "W2": (q2 * 0.1).astype(f32), "s2": np.full((3, 1), 0.1, f32),
              "b2": np.zeros(3, f32)}

    def quant(inp, out, scale, bits, signed, narrow=0):
        return helper.make_node("Quant", [inp, scale, "zero", bits], [out], domain="qonnx.custom_op.general",
                                signed=signed, narrow=narrow, rounding_mode="ROUND")
    nodes = [quant("x", "xq", "one", "b6", 1), quant("W1", "W1q", "s1", "b4", 1, 1), quant("W2", "W2q", "s2", "b4", 1, 1),
             helper.make_node("Gemm", ["xq", "W1q", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             quant("r", "a", "sa", "b4", 0), helper.make_node("Gemm", ["a", "W2q", "b2"], ["y"], transB=1)]
    return save_onnx(path, nodes, consts, ["N", 6], ["N", 3], domains=("qonnx.custom_op.general",))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    rng = np.random.default_rng(1)
    x, y = rng.integers(-20, 21, (45, 6)).astype(np.float64), rng.integers(0, 3, 45)
    np.savez(root / "data.npz", x=x[:5], y=y[:5], x_train=x[5:], y_train=y[5:])
    images, labels = rng.integers(0, 17, (45, 64)).astype(np.float64), rng.integers(0, 10, 45)
    np.savez(root / "images.npz", x=images[:5], y=labels[:5], x_train=images[5:], y_train=labels[5:])
    np.savez(root / "w.npz", W=rng.integers(-100, 100, (4, 6)).astype(np.int8))
    np.savez(root / "net.npz", W1=rng.normal(0, .5, (4, 6)).astype(np.float32), b1=rng.normal(0, .1, 4).astype(np.float32),
             W2=rng.normal(0, .5, (3, 4)).astype(np.float32), b2=rng.normal(0, .1, 3).astype(np.float32))
    (root / "dense.py").write_text(SOURCE)
    cnn_onnx(root / "cnn.onnx", w={"conv.weight": rng.normal(0, .3, (2, 1, 3, 3)).astype(np.float32),
                                   "conv.bias": rng.normal(0, .1, 2).astype(np.float32),
                                   "fc.weight": rng.normal(0, .3, (10, 18)).astype(np.float32),
                                   "fc.bias": rng.normal(0, .1, 10).astype(np.float32)})
    _qonnx(root / "q.onnx", rng)
    return root


def _spec(root: Path, kind: str) -> Path:
    knobs = {"schedule": ["sequential", "dataflow"], **({"weights": ["memory", "constant"]} if kind in CONSTANT else {})}
    return write_spec(root, {"study": kind, "target": "ecp5", "models": [{"name": "m", **KINDS[kind]}],
                             "dtypes": ["int8"], "knobs": knobs, "objectives": ["cycles"],
                             "search": {"sampler": "grid"}}, name=f"{kind}.yaml")


def _sweep(spec: Path, results: Path, *extra: str) -> int:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("compiler.synth.area.synthesize", lambda design, target="ecp5", *a, **kw: fake_area(design, target))
        return main(["sweep", str(spec), "--results", str(results), "--sim", "pysim", "--progress", "off",
                     "--no-cache", *extra])


@pytest.fixture(scope="module")
def swept(files):
    """kind -> its results folder, each kind swept once (on first use)."""
    done: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in done:
            assert _sweep(_spec(files, kind), files / "results") == 0
            done[kind] = files / "results" / kind
        return done[kind]
    return get


def _trial(results: Path, schedule: str, weights: str) -> int:
    df = load_results(results)
    rows = df[(df["schedule"] == schedule) & (df.get("weights", "memory") == weights)]
    assert len(rows) == 1 and (rows["status"] == "OK").all(), df[["number", "status", "error"]]
    return int(rows["number"].iloc[0])


def _bank_values(out: Path, info: dict, buffer: int) -> list[np.ndarray]:
    """The element values of every input bank of `buffer`, from its memory files (first sample)."""
    b = next(b for b in info["buffers"] if b["buffer"] == buffer)
    bits = int("".join(c for c in b["dtype"] if c.isdigit()))
    banks = []
    for p in (p for p in info["host_ports"] if p["buffer"] == buffer and p["role"] == "input"):
        words = np.array([int(w, 16) for w in (out / p["file"]).read_text().split()[:b["elements"]]], np.int64)
        signed = p["sign_extend"] or (b["dtype"].startswith("int") and p["width"] == bits)
        banks.append(np.where(signed & (words >= 1 << (p["width"] - 1)), words - (1 << p["width"]), words))
    assert banks, f"no input bank holds buffer {buffer}"
    return banks


def _expected_outputs(out: Path, info: dict) -> np.ndarray:
    """(samples, elements): the outputs the testbench expects, from the expected*.hex files of
    the model's one output (a sequential design runs one sample; a dataflow one streams several)."""
    (p,) = [p for p in info["host_ports"] if p["role"] == "output"]
    b = next(b for b in info["buffers"] if b["buffer"] == p["buffer"])
    words = np.array([int(w, 16) for w in (out / p["file"]).read_text().split()], np.int64).reshape(p["samples"], -1)
    words = words[:, :b["elements"]]
    return np.where(p["sign_extend"] & (words >= 1 << (p["width"] - 1)), words - (1 << p["width"]), words)


def _reference_outputs(kind: str, root: Path, spec: Path, samples: int) -> np.ndarray | None:
    """The model's own outputs of the data's first samples, computed here from its files: the
    integer W @ x of the source with weights, the quantised network's logits of a trained one."""
    if kind == "source_weights":
        x = np.load(root / "data.npz")["x"][:samples].astype(np.int64)
        return x @ np.load(root / "w.npz")["W"].astype(np.int64).T
    if kind == "weights":
        model = load_spec(spec).model("m")
        return model.trained.quantized("int8").reference(model.real_inputs("int8").samples[:samples])
    return None


def _evaluated_weights(kind: str, root: Path, spec: Path) -> dict[str, np.ndarray]:
    """The weights the evaluation compiled the point with, found from the spec (not the study's
    record): a file of integers as it is; a trained network quantised; otherwise seeded data."""
    if kind == "source_weights":
        return {"W": np.load(root / "w.npz")["W"]}
    model = load_spec(spec).model("m")
    arrays, real = point_arrays(model, "int8", model.build("int8"), 0)
    data = set(model.runtime_inputs("int8"))
    return {k: v for k, v in (real.weights if real is not None else arrays).items() if k not in data}


def _run_testbench(out: Path) -> str:
    subprocess.run(["iverilog", "-g2012", "-o", "tb.vvp", "tinyhw_top.v", "tb.v"], cwd=out, check=True,
                   capture_output=True, text=True, timeout=120)
    run = subprocess.run(["vvp", "-n", "tb.vvp"], cwd=out, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "PASS" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    return run.stdout


@pytest.mark.slow
@needs_iverilog
@pytest.mark.parametrize("kind, schedule, weights, bus", CASES)
def test_a_trial_exports_as_evaluated_without_the_spec(swept, files, tmp_path, capsys, kind, schedule, weights, bus):
    results = swept(kind)
    trial = _trial(results, schedule, weights)
    out = tmp_path / "hw"
    assert main(["export", str(results), "--trial", str(trial), "--out", str(out), "--sim", "pysim",
                 "--bus", bus]) == 0, capsys.readouterr().err
    info = json.loads((out / "interface.json").read_text())
    inputs = info["source"]["inputs"]
    want = _evaluated_weights(kind, files, files / f"{kind}.yaml")
    assert want, "the model has weights to check"
    for name, array in want.items():
        if weights == "constant":
            assert inputs[name] is None, f"{name} is built in, no memory holds it"
            continue
        for bank in _bank_values(out, info, inputs[name]):
            assert np.array_equal(bank, np.asarray(array).astype(np.int64).ravel()), name
    if kind == "source_weights" and schedule == "sequential":     # the data file's first sample, not seeded data
        x = np.load(files / "data.npz")["x"][0]
        for bank in _bank_values(out, info, inputs["x"]):
            assert np.array_equal(bank, x.astype(np.int64))
    got = _expected_outputs(out, info)
    want_out = _reference_outputs(kind, files, files / f"{kind}.yaml", len(got))
    if want_out is not None:              # the weights built in, or in memory, are the file's
        assert np.array_equal(got, want_out), (got, want_out)
    stdout = _run_testbench(out)
    assert bus == "native" or f"over {bus}" in stdout, stdout

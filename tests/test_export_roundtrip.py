"""Every trial a sweep records exports exactly as it was evaluated, from the results folder alone
(`dse export RESULTS --trial N`, no --spec: dse.models.record): for each kind of model (a
builtin, a user's source, a source with weights and data files, a trained dense network, an
ONNX CNN, a QONNX network) in both schedules, behind the buses each can take, the memory files
hold the weights the evaluation used (the file's own, or its quantisation) and the testbench
passes in Icarus. A file changed after the sweep is refused by name, by the export and by the
sweep resuming; a study made before models were recorded needs --spec.

One sweep per kind of model (fake synthesis: the exports are the subject), shared by its cases."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dse.cli import main
from dse.evaluate import point_arrays
from dse.models.widths import Formats
from dse.models.record import file_problem, model_from_record, model_record, record_change
from dse.results import load_results
from dse.spec import load_spec
from helpers import cnn_onnx, fake_area, needs_iverilog, save_onnx, write_spec

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402


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
OWN_KNOBS = {"weights": {"weight_bits": [4], "weights@1": ["constant"]}}
"""Knobs a trial's row holds beside the hardware's model-wide ones: a format and a per-layer knob
(layer 1's weights, W2 and b2, built in)."""
BUILT_IN = {"weights": {"W2", "b2"}}
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
    knobs = {"schedule": ["sequential", "dataflow"], **({"weights": ["memory", "constant"]} if kind in CONSTANT else {}),
             **OWN_KNOBS.get(kind, {})}
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
        model = _evaluated_model(spec)
        return model.trained.quantized("int8").reference(model.real_inputs("int8").samples[:samples])
    return None


def _evaluated_model(spec_path: Path):
    """The spec's model with the widths its trials were evaluated with (single-valued format knobs)."""
    spec = load_spec(spec_path)
    return spec.model("m").with_formats(Formats.of({k.name: k.values[0] for k in spec.knobs}))


def _evaluated_weights(kind: str, root: Path, spec: Path) -> dict[str, np.ndarray]:
    """The weights the evaluation compiled the point with, found from the spec (not the study's
    record): a file of integers as it is; a trained network quantised; otherwise seeded data."""
    if kind == "source_weights":
        return {"W": np.load(root / "w.npz")["W"]}
    model = _evaluated_model(spec)
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
        if weights == "constant" or name in BUILT_IN.get(kind, ()):
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


@pytest.mark.slow
@needs_iverilog
def test_dse_eval_exports_a_trained_dataflow_point_behind_axi_stream(files, tmp_path, capsys):
    """`dse eval --export` of a trained network in dataflow: the data's samples streamed, the
    network's logits expected, PASS."""
    spec = _spec(files, "weights")
    out = tmp_path / "hw"
    assert main(["eval", str(spec), "--model", "m", "--dtype", "int8", "--set", "schedule=dataflow", "--no-synth",
                 "--sim", "pysim", "--workdir", str(tmp_path / "work"), "--json", "--export", str(out),
                 "--bus", "axi-stream"]) == 0
    got = _expected_outputs(out, json.loads((out / "interface.json").read_text()))
    assert len(got) == 4 and np.array_equal(got, _reference_outputs("weights", files, spec, 4))
    assert "over axi-stream" in _run_testbench(out)


# ---------------------------------------------------------------------------------------------
# the record: every kind of model, back as it was

def _onnx_graphs(root: Path) -> None:
    """A dense ONNX chain (the tool quantises it), and a graph that is no chain (a tanh at its
    end: run whole, in floats; a last Softmax would be left to the host, dse.models.chain)."""
    w = np.load(root / "net.npz")
    save_onnx(root / "dense.onnx", [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1),
                                    helper.make_node("Relu", ["h"], ["r"]),
                                    helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], transB=1)],
              dict(w), ["N", 6], ["N", 3])
    save_onnx(root / "whole.onnx", [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1),
                                    helper.make_node("Tanh", ["h"], ["y"])],
              {"W1": w["W1"], "b1": w["b1"]}, ["N", 6], ["N", 4])


RECORDED = {**KINDS,
            "builtin_weights": {"builtin": "gemv", "params": {"M": 4, "K": 6}, "weights": "w.npz", "data": DATA,
                                "input_range": {"min": -3, "max": 5}},
            "source_default": {"source": "dense.py:dense", "params": {"N": 6}, "dtypes": ["int8", "int16"]},
            "pruned": {"weights": "net.npz", "data": {**DATA, "samples": 3}, "prune": 0.5},
            "dense_onnx": {"onnx": "dense.onnx", "data": DATA},
            "whole_graph": {"onnx": "whole.onnx", "data": DATA, "dtypes": ["fp32"]}}


@pytest.mark.parametrize("kind", RECORDED)
def test_a_recorded_model_is_the_spec_model(files, kind):
    """model_from_record(model_record(m)) == m through JSON, for every kind of model: what
    `dse export` rebuilds is what the sweep ran (a source's default JSON cannot hold, `shape`,
    comes back from its source)."""
    _onnx_graphs(files)
    entry = RECORDED[kind]
    spec = load_spec(write_spec(files, {"study": "r", "target": "ecp5", "models": [{"name": "m", **entry}],
                                        **({} if "dtypes" in entry else {"dtypes": ["int8"]}),
                                        "objectives": ["cycles"], "search": {"sampler": "grid"}}, name="r.yaml"))
    model = spec.model("m")
    record = json.loads(json.dumps(model_record(model, spec.model_dtypes("m"))))
    assert model_from_record(record) == model
    assert file_problem(record) is None and record_change(record, record) is None
    if kind == "whole_graph":
        assert model.trained is None and model.onnx is not None      # the kind it is meant to be
    if kind == "source_default":
        assert record["params"] == {"N": 6, "M": 4} and model.params["shape"] == (4, 6)


# ---------------------------------------------------------------------------------------------
# a file changed after the sweep; a study made before models were recorded

def _study(root: Path, files: Path, models: list[dict], name: str = "spec.yaml") -> Path:
    for f in ("data.npz", "w.npz", "dense.py"):
        if not (root / f).exists():
            shutil.copy(files / f, root / f)
    return write_spec(root, {"study": "t", "target": "ecp5", "models": models, "dtypes": ["int8"],
                             "objectives": ["cycles"], "search": {"sampler": "grid"}}, name=name)


def _export(results: Path, out: Path, capsys, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["export", str(results), "--trial", "0", "--out", str(out), "--sim", "pysim", *extra])
    return rc, capsys.readouterr().err


def _exported_w(out: Path) -> np.ndarray:
    info = json.loads((out / "interface.json").read_text())
    (bank,) = _bank_values(out, info, info["source"]["inputs"]["W"])
    return bank.reshape(4, 6)


def test_a_weights_file_changed_after_the_sweep_is_refused_by_name(files, tmp_path, capsys):
    """The sweep resuming and the export both name the file; a copy of the file the sweep read
    exports through --spec; --fresh sweeps the new file; a file moved with its content is the
    same model."""
    model = {"name": "m", **KINDS["source_weights"]}
    spec = _study(tmp_path, files, [model])
    results, w = tmp_path / "results" / "t", tmp_path / "w.npz"
    assert _sweep(spec, tmp_path / "results") == 0
    old = np.load(w)["W"]
    (tmp_path / "kept").mkdir()
    shutil.copy(w, tmp_path / "kept" / "w.npz")
    then = hashlib.sha256(w.read_bytes()).hexdigest()[:12]
    np.savez(w, W=-old)                                     # the same name and place, other weights
    now = hashlib.sha256(w.read_bytes()).hexdigest()[:12]

    capsys.readouterr()
    assert _sweep(spec, tmp_path / "results") == 2
    assert capsys.readouterr().err == (
        f"error: study 't' in {results}/study.journal: model 'm': the weights file {w} is not the one its trials "
        f"were evaluated with (sha256 {then}... then, sha256 {now}... now): run with --fresh to evaluate them "
        "again (the evaluation cache keeps the points of unchanged models), or rename the study\n")
    rc, err = _export(results, tmp_path / "a", capsys)
    assert (rc, err) == (2, f"error: {results}: trial 0: model 'm' was swept with the weights file {w}, which has "
                            f"changed since: restore the file the sweep read, or pass --spec SPEC whose model 'm' "
                            f"reads a copy of it (sha256 {then}...)\n")
    rc, err = _export(results, tmp_path / "b", capsys, "--spec", str(spec))
    assert (rc, err) == (2, f"error: --spec: model 'm': the weights file {w} is not the one the sweep in {results} "
                            f"evaluated (sha256 {now}... there, sha256 {then}... in the sweep)\n")
    kept = _study(tmp_path, files, [{**model, "weights": "kept/w.npz"}], name="kept.yaml")
    assert _export(results, tmp_path / "c", capsys, "--spec", str(kept))[0] == 0
    assert np.array_equal(_exported_w(tmp_path / "c"), old)
    w.rename(tmp_path / "w.new")
    rc, err = _export(results, tmp_path / "d", capsys)
    assert rc == 2 and err.startswith(f"error: {results}: trial 0: model 'm' was swept with the weights file {w}, "
                                      "which is missing: restore it, or pass --spec SPEC")
    assert not any((tmp_path / d).exists() for d in "abd")

    (tmp_path / "w.new").rename(w)
    assert _sweep(spec, tmp_path / "results", "--fresh") == 0
    assert _export(results, tmp_path / "e", capsys)[0] == 0
    assert np.array_equal(_exported_w(tmp_path / "e"), -old)

    capsys.readouterr()
    samples = _study(tmp_path, files, [{**model, "data": {**DATA, "samples": 3}}], name="samples.yaml")
    assert _sweep(samples, tmp_path / "results") == 2
    assert "model 'm': data.samples is not the one its trials were evaluated with (not set then, 3 now)" \
        in capsys.readouterr().err

    (tmp_path / "moved").mkdir()
    w.rename(tmp_path / "moved" / "w.npz")                  # the same content elsewhere: the same model
    moved = _study(tmp_path, files, [{**model, "weights": "moved/w.npz"}], name="moved.yaml")
    capsys.readouterr()
    assert _sweep(moved, tmp_path / "results") == 0
    assert "this run 0 in" in capsys.readouterr().out
    assert _export(results, tmp_path / "f", capsys)[0] == 0     # from where the file is now
    assert np.array_equal(_exported_w(tmp_path / "f"), -old)


def test_a_study_made_before_models_were_recorded_needs_the_spec(files, tmp_path, capsys, monkeypatch):
    """Its journal describes a model in a line: enough for a builtin without files, not for a
    model with files (refused, naming --spec); resuming it says what it cannot notice."""
    spec = _study(tmp_path, files, [{"name": "g", **KINDS["builtin"]}, {"name": "m", **KINDS["source_weights"]}])
    results = tmp_path / "results" / "t"
    with monkeypatch.context() as mp:
        mp.setattr("dse.study.grid.MODELS_ATTR", "not-read")      # the study as an older tinyhw made it
        assert _sweep(spec, tmp_path / "results") == 0
    trials = load_results(results)
    number = {m: str(int(trials[trials["model"] == m]["number"].iloc[0])) for m in ("g", "m")}
    capsys.readouterr()
    assert main(["export", str(results), "--trial", number["m"], "--out", str(tmp_path / "a")]) == 2
    assert capsys.readouterr().err == (
        f"error: {results}: its study.journal describes model 'm' only as 'dense.py:dense(N=6, M=4, shape=(4, 6)), "
        "weights: w.npz, data: data.npz' (a sweep made before studies recorded their models' files): pass --spec "
        "SPEC (the spec the sweep ran)\n")
    assert main(["export", str(results), "--trial", number["g"], "--out", str(tmp_path / "b"), "--sim", "pysim"]) == 0
    assert main(["export", str(results), "--trial", number["m"], "--out", str(tmp_path / "c"), "--sim", "pysim",
                 "--spec", str(spec)]) == 0
    assert np.array_equal(_exported_w(tmp_path / "c"), np.load(tmp_path / "w.npz")["W"])
    capsys.readouterr()
    assert _sweep(spec, tmp_path / "results") == 0
    assert (f"note: study 't' in {results}/study.journal was made before studies recorded their models' files: a "
            "weights or data file changed since is not noticed, and `dse export` needs --spec; --fresh starts it "
            "over with them recorded\n") in capsys.readouterr().err

"""A tabular MLP 13-11-7-3 on scikit-learn's wine data, with its scaler in the graph: the model
a user exports from a scikit-learn pipeline or a PyTorch module whose first step standardises
the features (wine's features span 0.1 to 1,680, so one scale for all of them loses the small
ones). The same trained network in the forms users bring it:

    python models/wine_mlp.py DIR      # writes the five files below into DIR

- `raw.npz`: W1, b1, ... with the standardisation folded into W1 and b1 (the network takes the
  raw features);
- `subdiv.onnx`: `Sub(mean)` -> `Div(std)` -> Gemm -> Relu -> Gemm -> Relu -> Gemm;
- `batchnorm.onnx`: a `BatchNormalization` on the input (the standardisation) and one after the
  first hidden layer's ReLU (the second layer's input side);
- `qonnx.onnx`: QONNX `Quant` nodes as quantisation-aware training leaves them: `Sub`/`Div`,
  then the input quantised to 8 bits (signed), weights to 6 bits per output channel, hidden
  activations to 6 bits unsigned;
- `qcdq.onnx`: the same network in QCDQ (QuantizeLinear / Clip / DequantizeLinear).

Training: MLPClassifier (ReLU hidden layers 11 and 7, adam, random_state 0, 2,000 iterations) on
the standardised training split of `sklearn:wine` as dse.models.data splits it (75/25,
stratified, seed 0). Built on demand (tests and bench/bench_standardised.py), nothing committed.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

QONNX = "qonnx.custom_op.general"
FORMS = ("raw.npz", "subdiv.onnx", "batchnorm.onnx", "qonnx.onnx", "qcdq.onnx")


def train() -> dict[str, np.ndarray]:
    """The trained network on standardised features: mean, std (the scaler), W1, b1, ... float64."""
    from sklearn.neural_network import MLPClassifier
    from dse.models.data import DataSpec, load_dataset
    d = load_dataset(DataSpec(dataset="sklearn:wine"))
    mean, std = d.x_train.mean(0), d.x_train.std(0)
    clf = MLPClassifier(hidden_layer_sizes=(11, 7), activation="relu", random_state=0, max_iter=2000)
    clf.fit((d.x_train - mean) / std, d.y_train)
    out = {"mean": mean, "std": std}
    for i, (W, b) in enumerate(zip(clf.coefs_, clf.intercepts_), 1):
        out[f"W{i}"], out[f"b{i}"] = W.T.astype(np.float64), b.astype(np.float64)
    return out


def _f32(v) -> np.ndarray:
    return np.asarray(v, np.float32)


def _save(path: Path, nodes: list, consts: dict, domains: tuple[str, ...] = ()) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(nodes, "wine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 13])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


def _gemms(first: str) -> list:
    from onnx import helper
    return [helper.make_node("Gemm", [first, "W1", "b1"], ["h1"], transB=1), helper.make_node("Relu", ["h1"], ["r1"]),
            helper.make_node("Gemm", ["r1", "W2", "b2"], ["h2"], transB=1), helper.make_node("Relu", ["h2"], ["r2"]),
            helper.make_node("Gemm", ["r2", "W3", "b3"], ["y"], transB=1)]


def raw_npz(p: dict, path: Path) -> Path:
    """The scaler folded into the first layer: W1' = W1 / std, b1' = b1 - W1' mean."""
    W1 = p["W1"] / p["std"][None, :]
    np.savez(path, W1=_f32(W1), b1=_f32(p["b1"] - W1 @ p["mean"]),
             **{k: _f32(p[k]) for k in ("W2", "b2", "W3", "b3")})
    return path


def subdiv_onnx(p: dict, path: Path) -> Path:
    from onnx import helper
    consts = {"mean": _f32(p["mean"]), "std": _f32(p["std"]), **{k: _f32(p[k]) for k in ("W1", "b1", "W2", "b2", "W3", "b3")}}
    nodes = [helper.make_node("Sub", ["x", "mean"], ["c"]), helper.make_node("Div", ["c", "std"], ["s"]), *_gemms("s")]
    return _save(path, nodes, consts)


def batchnorm_onnx(p: dict, path: Path) -> Path:
    """BatchNormalization(x) standardises; a second one after the first ReLU, its inverse folded
    into W2, so the network computes the same function."""
    from onnx import helper
    rng = np.random.default_rng(0)
    a, c = rng.uniform(0.5, 2.0, 11), rng.normal(0, 0.2, 11)          # BN2: v -> a v + c
    W2 = p["W2"] / a[None, :]
    b2 = p["b2"] - W2 @ c
    eps = 1e-5
    consts = {"s0": _f32(np.ones(13)), "B0": _f32(np.zeros(13)), "m0": _f32(p["mean"]), "v0": _f32(p["std"] ** 2 - eps),
              "s1": _f32(a), "B1": _f32(c), "m1": _f32(np.zeros(11)), "v1": _f32(np.ones(11) - eps),
              "W1": _f32(p["W1"]), "b1": _f32(p["b1"]), "W2": _f32(W2), "b2": _f32(b2), "W3": _f32(p["W3"]),
              "b3": _f32(p["b3"])}
    nodes = _gemms("s")
    nodes.insert(0, helper.make_node("BatchNormalization", ["x", "s0", "B0", "m0", "v0"], ["s"], epsilon=eps))
    nodes.insert(3, helper.make_node("BatchNormalization", ["r1", "s1", "B1", "m1", "v1"], ["n1"], epsilon=eps))
    nodes[4] = helper.make_node("Gemm", ["n1", "W2", "b2"], ["h2"], transB=1)
    return _save(path, nodes, consts)


def _grid(W: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    qmax = 2 ** (bits - 1) - 1
    s = np.abs(W).max(axis=1) / qmax
    return np.clip(np.round(W / s[:, None]), -qmax, qmax), s


def quantised(p: dict, x_train: np.ndarray) -> dict:
    """The network on the grids a QAT export declares: input 8-bit signed on the standardised
    features, weights 6-bit per output channel, hidden activations 6-bit unsigned (scales from
    the training split, float32-exact)."""
    z = (x_train - p["mean"]) / p["std"]
    q = {"s_in": float(np.float32(np.abs(z).max() / 127))}
    h = np.clip(np.round(z / q["s_in"]), -127, 127) * q["s_in"]
    for i in (1, 2, 3):
        Wq, s = _grid(p[f"W{i}"], 6)
        q[f"q{i}"], q[f"s{i}"] = Wq, s.astype(np.float32).astype(np.float64)
        h = h @ (Wq * q[f"s{i}"][:, None]).T + p[f"b{i}"]
        if i < 3:
            h = np.maximum(h, 0)
            q[f"a{i}"] = float(np.float32(h.max() / 63))
            h = np.clip(np.round(h / q[f"a{i}"]), 0, 63) * q[f"a{i}"]
    return q


def qonnx_onnx(p: dict, q: dict, path: Path) -> Path:
    from onnx import helper

    def quant(inp, out, scale, bits, signed, narrow=0):
        return helper.make_node("Quant", [inp, scale, "zero", bits], [out], domain=QONNX, signed=signed,
                                narrow=narrow, rounding_mode="ROUND")
    consts = {"zero": _f32(0), "b8": _f32(8), "b6": _f32(6), "mean": _f32(p["mean"]), "std": _f32(p["std"]),
              "s_in": _f32(q["s_in"]), "a1": _f32(q["a1"]), "a2": _f32(q["a2"])}
    nodes = [helper.make_node("Sub", ["x", "mean"], ["c"]), helper.make_node("Div", ["c", "std"], ["z"]),
             quant("z", "s", "s_in", "b8", 1, narrow=1)]
    for i in (1, 2, 3):
        consts |= {f"W{i}": _f32(q[f"q{i}"] * q[f"s{i}"][:, None]), f"ws{i}": _f32(q[f"s{i}"][:, None]),
                   f"b{i}": _f32(p[f"b{i}"])}
        nodes.append(quant(f"W{i}", f"W{i}q", f"ws{i}", "b6", 1, narrow=1))
    gemms = _gemms("s")
    for node in gemms:
        if node.op_type == "Gemm":
            node.input[1] += "q"
    gemms[2].input[0], gemms[4].input[0] = "a1o", "a2o"
    nodes += [gemms[0], gemms[1], quant("r1", "a1o", "a1", "b6", 0), gemms[2], gemms[3], quant("r2", "a2o", "a2", "b6", 0),
              gemms[4]]
    return _save(path, nodes, consts, (QONNX,))


def qcdq_onnx(p: dict, q: dict, path: Path) -> Path:
    from onnx import helper
    i8 = np.int8
    consts = {"mean": _f32(p["mean"]), "std": _f32(p["std"]), "s_in": _f32(q["s_in"]), "zi": np.array(0, i8),
              "lo_in": np.array(-127, i8), "hi_in": np.array(127, i8), "lo": np.array(0, i8), "hi": np.array(63, i8),
              "a1": _f32(q["a1"]), "a2": _f32(q["a2"])}

    def qcdq(inp, out, scale, lo, hi):
        return [helper.make_node("QuantizeLinear", [inp, scale, "zi"], [out + "_q"]),
                helper.make_node("Clip", [out + "_q", lo, hi], [out + "_c"]),
                helper.make_node("DequantizeLinear", [out + "_c", scale, "zi"], [out])]
    nodes = [helper.make_node("Sub", ["x", "mean"], ["c"]), helper.make_node("Div", ["c", "std"], ["z"]),
             *qcdq("z", "s", "s_in", "lo_in", "hi_in")]
    for i in (1, 2, 3):
        n = len(q[f"s{i}"])
        consts |= {f"q{i}": q[f"q{i}"].astype(i8), f"ws{i}": _f32(q[f"s{i}"]), f"z{i}": np.zeros(n, i8),
                   f"b{i}": _f32(p[f"b{i}"])}
        nodes.append(helper.make_node("DequantizeLinear", [f"q{i}", f"ws{i}", f"z{i}"], [f"W{i}"], axis=0))
    g = _gemms("s")
    g[2].input[0], g[4].input[0] = "a1o", "a2o"
    nodes += [g[0], g[1], *qcdq("r1", "a1o", "a1", "lo", "hi"), g[2], g[3], *qcdq("r2", "a2o", "a2", "lo", "hi"), g[4]]
    return _save(path, nodes, consts)


def write_all(out: Path) -> dict[str, Path]:
    """The five forms in `out` (FORMS), from one training run."""
    from dse.models.data import DataSpec, load_dataset
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    p = train()
    q = quantised(p, load_dataset(DataSpec(dataset="sklearn:wine")).x_train)
    return {"raw.npz": raw_npz(p, out / "raw.npz"), "subdiv.onnx": subdiv_onnx(p, out / "subdiv.onnx"),
            "batchnorm.onnx": batchnorm_onnx(p, out / "batchnorm.onnx"),
            "qonnx.onnx": qonnx_onnx(p, q, out / "qonnx.onnx"), "qcdq.onnx": qcdq_onnx(p, q, out / "qcdq.onnx")}


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    for name, path in write_all(Path(sys.argv[1] if len(sys.argv) > 1 else ".")).items():
        print(f"wrote {path}")

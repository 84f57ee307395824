"""A small CNN for scikit-learn's digits (8x8), as an ONNX file: digits_cnn.onnx beside this file.

    python models/digits_cnn.py        # rebuilds digits_cnn.onnx (needs the `onnx` package)

Conv 3x3 (8 channels, no padding) -> ReLU -> MaxPool 2x2 -> Flatten -> Gemm (72 -> 10). The
filters are fixed random ones (seed 0; the 1/16 input scaling folded in, so the model takes raw
pixel values 0..16); the dense layer is fitted by scikit-learn's logistic regression on their
pooled features over the training split of dse.models.data (75%, stratified, seed 0). Deterministic;
names as PyTorch exports them (`conv.weight`, `fc.bias`), which are not Python identifiers.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ONNX_FILE = Path(__file__).with_name("digits_cnn.onnx")
CHANNELS = 8


def weights() -> dict[str, np.ndarray]:
    from sklearn.linear_model import LogisticRegression
    from dse.models.convnet import conv, max_pool
    from dse.models.data import DataSpec, load_dataset
    data = load_dataset(DataSpec(dataset="sklearn:digits"))
    rng = np.random.default_rng(0)
    cw = (rng.normal(0, 0.3, (CHANNELS, 1, 3, 3)) / 16).astype(np.float32)
    cb = rng.normal(0, 0.1, CHANNELS).astype(np.float32)

    def features(x: np.ndarray) -> np.ndarray:
        h = conv(x.reshape(-1, 1, 8, 8), cw.astype(np.float64), (1, 1), (0, 0, 0, 0)) + cb[None, :, None, None]
        return max_pool(np.maximum(h, 0), (2, 2), (2, 2)).reshape(len(x), -1)
    clf = LogisticRegression(max_iter=2000).fit(features(data.x_train), data.y_train)
    return {"conv.weight": cw, "conv.bias": cb, "fc.weight": clf.coef_.astype(np.float32),
            "fc.bias": clf.intercept_.astype(np.float32)}


def write_onnx(w: dict[str, np.ndarray], path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "digits_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                              [numpy_helper.from_array(v, k) for k, v in w.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    write_onnx(weights(), ONNX_FILE)
    print(f"wrote {ONNX_FILE}")

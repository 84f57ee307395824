"""Quantisation-aware fine-tuning against post-training quantisation: accuracy per number format
of the trained networks of models/, next to float, with the training time (issue 55).

Each row: the network quantised by the tool (dse/models/quantize.py, convnet.py) after training
(PTQ), and fine-tuned at the format first (QAT, dse/models/qat.py, `qat:` of a spec), scored on
the test split by the numpy integer model, which the hardware equals bit for bit (the accuracy
stage checks every sample: tests/test_qat.py, `dse eval`). `qat s` is the fine-tuning's wall
time on this machine (no cache).

    python bench/bench_qat.py                          # every model, every format below
    python bench/bench_qat.py --models kws --formats w3a3 --epochs 20
    python bench/bench_qat.py --models digits --formats w2a2 --seeds 5      # spread over seeds
    python bench/bench_qat.py --engines 2          # the training engine: numpy against tinygrad

Models: digits (the digits MLP 64-32-10), cnn (the digits CNN, conv 3x3 x8, max-pool, dense),
kws (the KWS-shaped 490-256-256-256-12 on its stand-in data, 1,000 test samples), jet (the
jet-shaped 16-64-32-32-5) and jet75 (the same, 75% pruned and retrained first, dse/models/prune.py;
its float column is the pruned network's, the dense one's in brackets).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "models"))

import numpy as np  # noqa: E402

from dse.models.chain import read_net  # noqa: E402
from dse.models.data import DataSpec, Dataset, load_dataset, read_weights  # noqa: E402
from dse.models.prune import prune  # noqa: E402
from dse.models.qat import QatOptions, fine_tune  # noqa: E402
from dse.models.quantize import DenseNet  # noqa: E402
from dse.models.widths import Formats  # noqa: E402

FORMATS = ("w8a8", "w6a6", "w4a4", "w3a3", "w2a2", "w4a8", "w2a4")


def _kws() -> Dataset:
    import kws_mlp
    d = kws_mlp.data()
    return Dataset("kws stand-in", d["x_train"].astype(np.float64), d["y_train"], d["x"].astype(np.float64)[:1000],
                   d["y"][:1000])


def _model(name: str):
    """(network, dataset, pruned, the dense network's float accuracy or None)."""
    models = ROOT / "models"
    if name in ("digits", "cnn"):
        data = load_dataset(DataSpec(dataset="sklearn:digits"))
        net = (DenseNet.from_arrays(read_weights(models / "digits_mlp.npz")) if name == "digits"
               else read_net(models / "digits_cnn.onnx"))
        return net, data, False, None
    if name == "kws":
        return DenseNet.from_arrays(read_weights(models / "kws_mlp.npz")), _kws(), False, None
    data = load_dataset(DataSpec(file=models / "jet_data.npz"))
    net = DenseNet.from_arrays(read_weights(models / "jet_mlp.npz"))
    if name == "jet":
        return net, data, False, None
    dense = _float(net, data)
    return prune(net, sparsity=0.75, x=data.x_train, y=data.y_train), data, True, dense


def _float(net, data) -> float:
    x = data.x_test.reshape(len(data.x_test), -1)
    return float((net.float_logits(x).argmax(1) == data.y_test).mean())


def _integer(net, data, dtype: str, formats=None) -> float:
    q = net.quantize(dtype=dtype, calibration=data.x_train.reshape(len(data.x_train), -1), formats=formats)
    x = data.x_test.reshape(len(data.x_test), -1)
    return float((q.dequantize(q.reference(q.quantize_input(x))).argmax(1) == data.y_test).mean())


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def engines(steps: int) -> None:
    """The training engine's choice, measured: `steps` Adam steps of the digits MLP 64-32-10 on a
    batch of 64 in tinygrad (its PYTHON device: the one that needs no C compiler; CPU where a
    clang binary is there) and in numpy (the fine-tuning's own forward and backward passes)."""
    import shutil
    from dse.models.qat import QatOptions as Options
    data = load_dataset(DataSpec(dataset="sklearn:digits"))
    x, y = data.x_train[:64] / 16.0, data.y_train[:64]
    net = DenseNet.from_arrays(read_weights(ROOT / "models" / "digits_mlp.npz"))
    t0 = time.perf_counter()
    fine_tune(net, dtype="int4", formats=None, x=data.x_train[:64 * steps], y=data.y_train[:64 * steps],
              options=Options(epochs=1))
    print(f"numpy (dse.models.qat, int4 fake quantisation): {steps} steps in {time.perf_counter() - t0:.2f} s")
    import os
    for device in ("PYTHON", "CPU"):
        if device == "CPU" and shutil.which("clang") is None:
            print("tinygrad CPU: not run (no clang binary on this machine)")
            continue
        os.environ["DEV"] = device
        from tinygrad import Context, Tensor, nn
        from tinygrad.nn.optim import Adam
        Tensor.manual_seed(0)
        l1, l2 = nn.Linear(64, 32), nn.Linear(32, 10)
        opt = Adam([l1.weight, l1.bias, l2.weight, l2.bias], lr=1e-3)
        xt, yt = Tensor(x.astype(np.float32), device=device), Tensor(y.astype(np.int32), device=device)
        t0 = time.perf_counter()
        with Context(TRAINING=1):     # tinygrad 0.14's optimiser steps only in training mode
            for _ in range(steps):
                opt.zero_grad()
                loss = l2(l1(xt).relu()).sparse_categorical_crossentropy(yt)
                loss.backward()
                opt.step()
                loss.realize()
        print(f"tinygrad {device} (float, no quantisation): {steps} steps in {time.perf_counter() - t0:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["digits", "cnn", "kws", "jet", "jet75"],
                    choices=["digits", "cnn", "kws", "jet", "jet75"])
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), help="wNaM or intN (the format knobs' widths)")
    ap.add_argument("--epochs", type=int, default=QatOptions().epochs)
    ap.add_argument("--learning-rate", type=float, default=QatOptions().learning_rate)
    ap.add_argument("--scale-digits", type=int, default=None, help="scale_digits of every hidden layer")
    ap.add_argument("--seeds", type=int, default=1, help="fine-tune with seeds 0..N-1: mean, least and most")
    ap.add_argument("--engines", type=int, metavar="STEPS", help="only time STEPS Adam steps in numpy and tinygrad")
    args = ap.parse_args()
    if args.engines:
        engines(args.engines)
        return
    formats = Formats.of({"scale_digits": args.scale_digits}) if args.scale_digits else None
    print("| model | format | float | PTQ | QAT | QAT - float | qat s | epochs |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        net, data, pruned, dense = _model(name)
        fl = _float(net, data)
        fl_text = _pct(fl) + (f" ({_pct(dense)} dense)" if dense is not None else "")
        for fmt in args.formats:
            ptq = _integer(net, data, fmt, formats)
            scores, seconds = [], []
            for seed in range(args.seeds):
                options = QatOptions(epochs=args.epochs, learning_rate=args.learning_rate, seed=seed)
                t0 = time.perf_counter()
                tuned = fine_tune(net, dtype=fmt, formats=formats, x=data.x_train, y=data.y_train, options=options,
                                  pruned=pruned)
                seconds.append(time.perf_counter() - t0)
                scores.append(_integer(tuned.net, data, fmt, formats))
            qat = _pct(scores[0]) if args.seeds == 1 else \
                f"{_pct(float(np.mean(scores)))} ({_pct(min(scores))} to {_pct(max(scores))}, {args.seeds} seeds)"
            print(f"| {name} | {fmt}{' scale_digits ' + str(args.scale_digits) if formats else ''} | {fl_text} | "
                  f"{_pct(ptq)} | {qat} | {100 * (float(np.mean(scores)) - fl):+.1f} | {np.mean(seconds):.1f} | "
                  f"{args.epochs} |", flush=True)


if __name__ == "__main__":
    main()

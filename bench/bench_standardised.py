"""Tabular data with its scaler in the graph: accuracy per number format, by the input map.

Part 1 (the hardware): the wine MLP 13-11-7-3 of models/wine_mlp.py in its five forms (raw
features in an .npz; ONNX with Sub/Div; ONNX with two BatchNorms; QONNX; QCDQ), every test
sample of sklearn's wine (45) through the CXXRTL simulation of each point
(dse.models.accuracy.run_samples: bit-exact against the point's golden model on every sample,
cycles equal to the cycle model). Columns: the float model; the integer formats behind the
per-tensor input map (one scale for the whole input: the tool's quantisation before the host's
input maps, dse/models/standardise.py) and behind the map the quantiser keeps.

Part 2 (`--others`, numpy integer models, which tests/test_model_formats.py and the hardware
runs keep bit-exact): the digits, jet- and KWS-shaped MLPs behind each map (tensor, scaled,
centred) and the one the quantiser keeps, on their test splits.

Usage: python bench/bench_standardised.py [--dtypes fp32 int8 int6 int4] [--others]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "models"))

import numpy as np  # noqa: E402

from dse.models.accuracy import run_samples  # noqa: E402
from dse.models.chain import read_net  # noqa: E402
from dse.models.data import DataSpec, Dataset, load_dataset, read_weights  # noqa: E402
from dse.models.quantize import DenseNet  # noqa: E402
from dse.models.standardise import KINDS  # noqa: E402
from dse.models.widths import Formats  # noqa: E402


def _net(path: Path):
    return read_net(path) if path.suffix == ".onnx" else DenseNet.from_arrays(read_weights(path))


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def wine(dtypes: list[str]) -> None:
    import wine_mlp
    data = load_dataset(DataSpec(dataset="sklearn:wine"))
    x_train = data.x_train
    with tempfile.TemporaryDirectory() as tmp:
        files = wine_mlp.write_all(Path(tmp))
        print("| form | dtype | float | per tensor | kept map | accuracy | samples bit-exact | cycles | s |")
        print("|---|---|---|---|---|---|---|---|---|")
        for form, path in files.items():
            net = _net(path)
            declared = getattr(net, "declared", False)
            for dtype in dtypes:
                if declared and dtype not in ("fp32", "int8"):
                    continue        # the file's 8-bit input quantiser needs int8 containers
                t0 = time.perf_counter()
                r = run_samples(net=net, dtype=dtype, data=data)
                seconds = time.perf_counter() - t0
                tensor = "-"
                if dtype.startswith("int") and not declared:
                    r_t = run_samples(net=net.standardised(x_train, "tensor"), dtype=dtype, data=data)
                    tensor = _pct(r_t.accuracy)
                kept = "-" if not dtype.startswith("int") else (r.quantization or "").split(";")[0]
                print(f"| {form} | {dtype} | {_pct(r.accuracy_float)} | {tensor} | {kept} | {_pct(r.accuracy)} | "
                      f"{r.samples}/{r.samples} | {r.cycles} | {seconds:.1f} |", flush=True)


def _kws() -> Dataset:
    import kws_mlp
    d = kws_mlp.data()
    return Dataset("kws stand-in", d["x_train"].astype(np.float64), d["y_train"], d["x"].astype(np.float64)[:1000],
                   d["y"][:1000])


def others() -> None:
    models = ROOT / "models"
    cases = [("digits MLP", models / "digits_mlp.npz", lambda: load_dataset(DataSpec(dataset="sklearn:digits"))),
             ("jet-shaped MLP", models / "jet_mlp.npz", lambda: load_dataset(DataSpec(file=models / "jet_data.npz"))),
             ("KWS-shaped MLP", models / "kws_mlp.npz", _kws)]
    formats = [("int8", {}), ("int6", {}), ("int4", {}), ("int3", {}), ("w4a8", {}), ("int8", {"weight_bits@0": 2}),
               ("int8", {"act_bits": 3})]
    print("\n| model | format | float | tensor | scaled | centred | kept |")
    print("|---|---|---|---|---|---|---|")
    for name, path, load in cases:
        net, data = DenseNet.from_arrays(read_weights(path)), load()

        def acc(n, dtype, f):
            q = n.quantize(dtype=dtype, calibration=data.x_train, formats=Formats.of(f) if f else None)
            return (q.reference(q.quantize_input(data.x_test)).argmax(1) == data.y_test).mean()
        fl = (net.float_logits(data.x_test).argmax(1) == data.y_test).mean()
        for dtype, f in formats:
            label = dtype + "".join(f" {k}={v}" for k, v in f.items())
            row = [acc(net.standardised(data.x_train, kind), dtype, f) for kind in KINDS] + [acc(net, dtype, f)]
            print(f"| {name} | {label} | {_pct(fl)} | " + " | ".join(_pct(v) for v in row) + " |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "fp16", "fp8e4m3", "int8", "int6", "int4", "int3"])
    ap.add_argument("--others", action="store_true", help="also the digits, jet- and KWS-shaped MLPs (numpy)")
    args = ap.parse_args()
    wine(args.dtypes)
    if args.others:
        others()


if __name__ == "__main__":
    main()

"""A 490-256-256-256-12 MLP, the shape of FINN's keyword-spotting MLP in MLPerf Tiny (49 x 10
MFCC features in, 12 classes out), trained on a synthetic stand-in for Google Speech Commands
(not available offline): scikit-learn's make_classification with 490 features and 12 classes,
seeded. The data are not stored (7.8 MB): `data()` makes them again, the same on every machine.

    python models/kws_mlp.py        # rewrites kws_mlp.npz (weights)

data(): x_train, y_train (3,000 samples: calibration) and x, y (1,000 test samples: accuracy),
float32, stratified split with seed 0. kws_mlp.npz: W1 (256, 490), b1, W2 (256, 256), b2,
W3 (256, 256), b3, W4 (12, 256), b4, float32. Training: MLPClassifier (ReLU hidden layers of
256, 256, 256, adam, alpha 1e-3, random_state 0, 200 iterations). It ends in logits.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WEIGHTS = HERE / "kws_mlp.npz"


def data() -> dict[str, np.ndarray]:
    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split
    x, y = make_classification(n_samples=4000, n_features=490, n_informative=60, n_redundant=20, n_classes=12,
                               n_clusters_per_class=1, class_sep=2.0, random_state=0)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return {"x_train": xtr.astype(np.float32), "y_train": ytr.astype(np.int64),
            "x": xte.astype(np.float32), "y": yte.astype(np.int64)}


def train(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from sklearn.neural_network import MLPClassifier
    clf = MLPClassifier(hidden_layer_sizes=(256, 256, 256), activation="relu", alpha=1e-3, max_iter=200,
                        random_state=0)
    clf.fit(d["x_train"].astype(np.float64), d["y_train"])
    out = {}
    for i, (W, b) in enumerate(zip(clf.coefs_, clf.intercepts_), 1):
        out[f"W{i}"], out[f"b{i}"] = W.T.astype(np.float32), b.astype(np.float32)
    return out


if __name__ == "__main__":
    np.savez_compressed(WEIGHTS, **train(data()))
    print(f"wrote {WEIGHTS}")

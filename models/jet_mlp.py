"""A 16-64-32-32-5 MLP, the shape of hls4ml's jet tagger (Duarte et al. 2018; Fahim et al. 2021),
trained on a synthetic stand-in for the jet data (not available offline): scikit-learn's
make_classification with 16 features and 5 classes, seeded.

    python models/jet_mlp.py        # rewrites jet_mlp.npz (weights) and jet_data.npz (data)

jet_data.npz: x_train, y_train (3,000 samples: calibration and pruning's training) and x, y
(1,000 test samples: accuracy), float32 features, stratified split with seed 0. jet_mlp.npz:
W1 (64, 16), b1, W2 (32, 64), b2, W3 (32, 32), b3, W4 (5, 32), b4, float32. Training:
MLPClassifier (ReLU hidden layers of 64, 32, 32, adam, random_state 0, 300 iterations). It
ends in logits (no softmax).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from synthetic import classification, train_mlp  # noqa: E402

WEIGHTS = HERE / "jet_mlp.npz"
DATA = HERE / "jet_data.npz"


def data() -> dict[str, np.ndarray]:
    return classification(n_features=16, n_informative=12, n_redundant=2, n_classes=5, n_clusters_per_class=2,
                          class_sep=1.0)


def train(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return train_mlp(d, (64, 32, 32), max_iter=300)


if __name__ == "__main__":
    d = data()
    np.savez(DATA, **d)
    np.savez(WEIGHTS, **train(d))
    print(f"wrote {DATA} and {WEIGHTS}")

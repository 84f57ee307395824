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
sys.path.insert(0, str(HERE))
from synthetic import classification, train_mlp  # noqa: E402

WEIGHTS = HERE / "kws_mlp.npz"


def data() -> dict[str, np.ndarray]:
    return classification(n_features=490, n_informative=60, n_redundant=20, n_classes=12, n_clusters_per_class=1,
                          class_sep=2.0)


def train(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return train_mlp(d, (256, 256, 256), alpha=1e-3, max_iter=200)


if __name__ == "__main__":
    np.savez_compressed(WEIGHTS, **train(data()))
    print(f"wrote {WEIGHTS}")

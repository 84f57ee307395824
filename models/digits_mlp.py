"""The digits MLP 64-32-10: trained deterministically on scikit-learn's digits, weights in
digits_mlp.npz beside this file (W1 (32, 64), b1, W2 (10, 32), b2, float32).

    python models/digits_mlp.py        # retrains and rewrites digits_mlp.npz

Training: scikit-learn's MLPClassifier (one hidden ReLU layer of 32, adam, random_state 0) on
the training split of dse.models.data (75%, stratified, seed 0), inputs scaled by 1/16; the scale is
folded into W1, so the model takes raw pixel values (0..16). It ends in logits (no softmax).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

WEIGHTS = Path(__file__).with_name("digits_mlp.npz")


def train() -> dict[str, np.ndarray]:
    from sklearn.neural_network import MLPClassifier
    from dse.models.data import DataSpec, load_dataset
    data = load_dataset(DataSpec(dataset="sklearn:digits"))
    clf = MLPClassifier(hidden_layer_sizes=(32,), activation="relu", max_iter=400, random_state=0)
    clf.fit(data.x_train / 16.0, data.y_train)
    (W1, W2), (b1, b2) = clf.coefs_, clf.intercepts_
    return {"W1": (W1.T / 16.0).astype(np.float32), "b1": b1.astype(np.float32),
            "W2": W2.T.astype(np.float32), "b2": b2.astype(np.float32)}


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    weights = train()
    np.savez(WEIGHTS, **weights)
    print(f"wrote {WEIGHTS}")

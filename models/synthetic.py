"""Stand-ins for datasets that are not available offline (the jet data, Google Speech Commands):
scikit-learn's make_classification, split and trained the same way for every model here."""
from __future__ import annotations

import numpy as np


def classification(**make_kw) -> dict[str, np.ndarray]:
    """make_classification(n_samples=4000, random_state=0, **make_kw), split 3,000 / 1,000
    (stratified, seed 0): x_train, y_train, x, y, float32 features."""
    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split
    x, y = make_classification(n_samples=4000, random_state=0, **make_kw)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return {"x_train": xtr.astype(np.float32), "y_train": ytr.astype(np.int64),
            "x": xte.astype(np.float32), "y": yte.astype(np.int64)}


def train_mlp(d: dict[str, np.ndarray], hidden: tuple[int, ...], **mlp_kw) -> dict[str, np.ndarray]:
    """An MLPClassifier (ReLU hidden layers `hidden`, adam, random_state 0) trained on d's
    training split: W1 (out, in), b1, ... float32, ending in logits (no softmax)."""
    from sklearn.neural_network import MLPClassifier
    clf = MLPClassifier(hidden_layer_sizes=hidden, activation="relu", random_state=0, **mlp_kw)
    clf.fit(d["x_train"].astype(np.float64), d["y_train"])
    out = {}
    for i, (W, b) in enumerate(zip(clf.coefs_, clf.intercepts_), 1):
        out[f"W{i}"], out[f"b{i}"] = W.T.astype(np.float32), b.astype(np.float32)
    return out

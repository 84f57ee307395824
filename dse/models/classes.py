"""What a classifier's outputs mean: the class it predicts and the loss it is trained on.

A network of two or more outputs scores one class each: it predicts the highest (argmax) and is
trained on softmax cross-entropy. A network of one output is a binary classifier, as
scikit-learn's MLPClassifier and a Keras `Dense(1, activation="sigmoid")` build one: the output
is class 1's logit (the sigmoid's input; the sigmoid itself is left to the host), class 1 where
it is positive and class 0 elsewhere, trained on the logistic loss. A threshold at zero does not
move with the output's scale, so an integer model's raw outputs predict what its real-valued
ones do.
"""
from __future__ import annotations

import numpy as np


def classes(outputs: int) -> int:
    """The classes of a network of `outputs` outputs (labels 0 to classes - 1)."""
    return max(outputs, 2)


def predicted(scores: np.ndarray) -> np.ndarray:
    """The class of each row of `scores` (samples, outputs)."""
    scores = np.asarray(scores)
    if scores.shape[-1] == 1:
        return (scores[..., 0] > 0).astype(np.int64)
    return scores.argmax(-1)


def cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, float]:
    """(mean loss over the batch, its gradient with respect to `logits`, accuracy) of labels `y`:
    softmax cross-entropy, or the logistic loss for one output (module docstring)."""
    n = len(y)
    if logits.shape[1] == 1:
        z = logits[:, 0]
        loss = float((np.logaddexp(0.0, z) - y * z).mean())     # -log sigmoid(z) or -log(1 - sigmoid(z))
        grad = ((0.5 * (1.0 + np.tanh(0.5 * z)) - y) / n)[:, None]   # sigmoid(z) - y, without overflow
    else:
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        loss = float(-np.log(np.maximum(p[np.arange(n), y], 1e-300)).mean())
        p[np.arange(n), y] -= 1
        grad = p / n
    return loss, grad, float((predicted(logits) == y).mean())

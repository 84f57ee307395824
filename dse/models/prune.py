"""Magnitude pruning of a dense network, for users who have not pruned theirs (a model's
`prune: S` in the spec: the fraction S of each layer's weights set to zero).

    pruned = prune(net, sparsity=0.75, x=x_train, y=y_train)      # a DenseNet, 75% zeros per layer

Zeros are free in hardware built with weights="constant" (compiler/passes/constants.py drops
their products and adder inputs), so a pruned network costs about (1 - S) of the dense one's
multipliers and adders. Pruning alone ruins a network (measured on the 16-64-32-32-5 jet-shaped
MLP of models/jet_mlp.py: 82.5% on its test split dense, 34.4% with 75% of each layer's smallest
weights zeroed), so, as in Zhu & Gupta's gradual pruning (arXiv 1710.01878), the sparsity grows
in STEPS steps to S and the surviving weights are trained between steps (and after the last)
with the zeros held: Adam on the softmax cross-entropy of the training split's labels (without
labels, of the dense network's own predictions), in mini-batches, all seeded, so the same
network and data always give the same pruned network.

Each layer keeps round((1 - S) * its weights) weights, the largest in magnitude (ties broken by
position); biases are kept. The pruned float network is what every dtype then builds: float
dtypes round its weights, int8/int16 quantise it (dse/models/quantize.py), and its accuracy is
measured on the test split like any network's.
"""
from __future__ import annotations

import numpy as np

from dse.models.classes import classes as n_classes, cross_entropy, predicted
from dse.models.quantize import Dense, DenseNet

STEPS = 4                 # sparsity raised in this many steps (S/4, S/2, 3S/4, S)
EPOCHS_PER_STEP = 40       # training epochs after each step
BATCH = 64
LEARNING_RATE = 1e-3
SEED = 0


def check_sparsity(sparsity) -> float:
    """`sparsity` as a float in [0, 1), else ValueError saying so (1 would zero every weight)."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0 <= sparsity < 1:
        raise ValueError(f"expected a sparsity from 0 (no pruning) up to, not including, 1 (the fraction of each "
                         f"layer's weights set to zero), got {sparsity!r}")
    return float(sparsity)


def check_keeps_weights(net: DenseNet, sparsity: float) -> None:
    """ValueError naming the first layer pruning to `sparsity` leaves without a weight (each
    keeps round((1 - S) * its weights)): its outputs would be its biases whatever the input."""
    for i, layer in enumerate(net.layers):
        n = layer.W.size
        if int(round((1 - sparsity) * n)) == 0:
            name = layer.name or f"layer{i}"
            raise ValueError(f"{sparsity:g} leaves layer {i + 1} ({name}, {n} weights) no weight (it keeps "
                             f"round({1 - sparsity:.4g} x {n}) = 0), so its outputs would be its biases whatever the "
                             f"input; a sparsity below {1 - 0.5 / n:.4g} keeps one")


def masks(net: DenseNet, sparsity: float) -> list[np.ndarray]:
    """Per layer: True where a weight survives magnitude pruning to `sparsity`."""
    out = []
    for layer in net.layers:
        w = np.abs(layer.W).reshape(-1)
        keep = int(round((1 - sparsity) * w.size))
        order = np.argsort(-w, kind="stable")          # largest first; ties by position
        m = np.zeros(w.size, bool)
        m[order[:keep]] = True
        out.append(m.reshape(layer.W.shape))
    return out


def prune(net: DenseNet, *, sparsity: float, x: np.ndarray, y: np.ndarray | None) -> DenseNet:
    """`net` with `sparsity` of each layer's weights zero, the rest trained on (x, y) (module
    docstring). sparsity 0: `net` itself."""
    sparsity = check_sparsity(sparsity)
    if sparsity == 0:
        return net
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    if y is None:                                   # no labels: the dense network's own answers
        y = predicted(net.float_logits(x))
    x = net.host_input(x)                           # what the layers read (a standardised network's map)
    y = np.asarray(y, np.int64)
    classes = n_classes(net.layers[-1].W.shape[0])
    if y.min() < 0 or y.max() >= classes:
        raise ValueError(f"labels from {y.min()} to {y.max()}, the network has {classes} classes")
    Ws = [layer.W.copy() for layer in net.layers]
    bs = [layer.b.copy() for layer in net.layers]
    adam = _Adam(Ws + bs)
    rng = np.random.default_rng(SEED)
    for step in range(1, STEPS + 1):
        current = DenseNet(tuple(Dense(W, b, layer.relu) for W, b, layer in zip(Ws, bs, net.layers)))
        keep = masks(current, sparsity * step / STEPS)
        for W, m in zip(Ws, keep):
            W *= m
        for _ in range(EPOCHS_PER_STEP):
            order = rng.permutation(len(x))
            for start in range(0, len(x), BATCH):
                batch = order[start:start + BATCH]
                gW, gb = _gradients(Ws, bs, [layer.relu for layer in net.layers], x[batch], y[batch])
                adam.step(Ws + bs, [g * m for g, m in zip(gW, keep)] + gb)
                for W, m in zip(Ws, keep):
                    W *= m
    return DenseNet(tuple(Dense(W.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64),
                                layer.relu, layer.name) for W, b, layer in zip(Ws, bs, net.layers)), net.input_map)


def _gradients(Ws, bs, relus, x, y):
    """Gradients of the mean cross-entropy over the batch (dse.models.classes.cross_entropy)."""
    hs = [x]
    for W, b, relu in zip(Ws, bs, relus):
        z = hs[-1] @ W.T + b
        hs.append(np.maximum(z, 0) if relu else z)
    g = cross_entropy(hs[-1], y)[1]
    gW, gb = [None] * len(Ws), [None] * len(Ws)
    for i in reversed(range(len(Ws))):
        gW[i] = g.T @ hs[i]
        gb[i] = g.sum(0)
        if i:
            g = (g @ Ws[i]) * (hs[i] > 0)
    return gW, gb


class _Adam:
    def __init__(self, params, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t, self.beta1, self.beta2, self.eps = 0, beta1, beta2, eps

    def step(self, params, grads) -> None:
        self.t += 1
        c1, c2 = 1 - self.beta1 ** self.t, 1 - self.beta2 ** self.t
        for p, g, m, v in zip(params, grads, self.m, self.v):
            m *= self.beta1
            m += (1 - self.beta1) * g
            v *= self.beta2
            v += (1 - self.beta2) * g * g
            p -= LEARNING_RATE * (m / c1) / (np.sqrt(v / c2) + self.eps)

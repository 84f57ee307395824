"""The compiler's test designs: each builds tinygrad output Tensors from seeded numpy data
and the numpy reference result computed with the same operations in the same order.

Shared by the compiler tests and the back-end equivalence tests (every back end must give
the same outputs and cycles on every design here).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from tinygrad import Tensor, dtypes


@dataclass(frozen=True)
class Case:
    outputs: tuple[Tensor, ...]
    reference: tuple[np.ndarray, ...]


def _rng(seed: int = 0):
    return np.random.default_rng(seed)


def _i8(rng, *shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def gemv_int8(M: int = 16, K: int = 8, seed: int = 0) -> Case:
    rng = _rng(seed)
    W, x = _i8(rng, M, K), _i8(rng, K)
    # cast before the matmul: W.matmul(x, dtype=int32) would still multiply in int8
    y = Tensor(W).cast(dtypes.int32) @ Tensor(x).cast(dtypes.int32)
    return Case((y,), (W.astype(np.int32) @ x.astype(np.int32),))


def gemv_bias_int8(M: int = 10, K: int = 12, seed: int = 11) -> Case:
    """y = W @ x + b: the bias is added after the REDUCE loop, a step of its own in the loop
    over outputs, and the weights' row offset i0 * K is not a power of two."""
    rng = _rng(seed)
    W, x = _i8(rng, M, K), _i8(rng, K)
    b = rng.integers(-1000, 1000, M).astype(np.int32)
    y = Tensor(W).cast(dtypes.int32) @ Tensor(x).cast(dtypes.int32) + Tensor(b)
    return Case((y,), (W.astype(np.int32) @ x.astype(np.int32) + b,))


def matmul_int32(M: int = 4, K: int = 6, N: int = 5, seed: int = 1) -> Case:
    rng = _rng(seed)
    A = rng.integers(-2**31, 2**31, (M, K), dtype=np.int64).astype(np.int32)
    B = rng.integers(-2**31, 2**31, (K, N), dtype=np.int64).astype(np.int32)
    y = Tensor(A) @ Tensor(B)
    ref = np.zeros((M, N), np.int32)
    with np.errstate(over="ignore"):
        for k in range(K):                     # int32 wraparound, accumulated in k order
            ref = ref + A[:, k:k + 1] * B[k:k + 1, :]
    return Case((y,), (ref,))


def add_relu(N: int = 16, seed: int = 2) -> Case:
    rng = _rng(seed)
    a, b = _i8(rng, N), _i8(rng, N)
    y = (Tensor(a) + Tensor(b)).relu()
    with np.errstate(over="ignore"):
        return Case((y,), (np.maximum(a + b, 0).astype(np.int8),))


def requant(h: np.ndarray, shift: int) -> np.ndarray:
    """int32 activations -> int8: relu, arithmetic shift, clamp to 127."""
    return np.minimum(np.maximum(h, 0) >> shift, 127).astype(np.int8)


def mlp_int8(IN: int = 784, HIDDEN: int = 128, OUT: int = 10, SHIFT: int = 8, seed: int = 3) -> Case:
    rng = _rng(seed)
    x, W1, W2 = _i8(rng, IN), _i8(rng, HIDDEN, IN), _i8(rng, OUT, HIDDEN)
    h = (Tensor(W1).cast(dtypes.int32) @ Tensor(x).cast(dtypes.int32)).relu()
    h8 = (h >> SHIFT).minimum(127).cast(dtypes.int8)
    y = Tensor(W2).cast(dtypes.int32) @ h8.cast(dtypes.int32)
    href = requant(W1.astype(np.int32) @ x.astype(np.int32), SHIFT)
    return Case((y,), (W2.astype(np.int32) @ href.astype(np.int32),))


def residual_mlp(N: int = 8, seed: int = 4) -> Case:
    """y = W2 @ h + h with h = relu(W1 @ x): the skip connection feeds the second kernel."""
    rng = _rng(seed)
    x, W1, W2 = _i8(rng, N), _i8(rng, N, N), _i8(rng, N, N)
    h = (Tensor(W1).cast(dtypes.int32) @ Tensor(x).cast(dtypes.int32)).relu()
    y = (Tensor(W2).cast(dtypes.int32) @ h) + h
    href = np.maximum(W1.astype(np.int32) @ x.astype(np.int32), 0)
    return Case((y,), (W2.astype(np.int32) @ href + href,))


def fan_out(N: int = 8, seed: int = 5) -> Case:
    """One producer, two consumers, two outputs."""
    rng = _rng(seed)
    x, W1, W2, W3 = _i8(rng, N), _i8(rng, N, N), _i8(rng, 4, N), _i8(rng, 4, N)
    h = (Tensor(W1).cast(dtypes.int32) @ Tensor(x).cast(dtypes.int32)).relu().contiguous()
    o1, o2 = Tensor(W2).cast(dtypes.int32) @ h, Tensor(W3).cast(dtypes.int32) @ h
    href = np.maximum(W1.astype(np.int32) @ x.astype(np.int32), 0)
    return Case((o1, o2), (W2.astype(np.int32) @ href, W3.astype(np.int32) @ href))


def conv2d_padded(C_IN: int = 1, C_OUT: int = 2, H: int = 5, W: int = 5, K: int = 3, PAD: int = 1,
                  seed: int = 6) -> Case:
    rng = _rng(seed)
    x = rng.integers(-8, 8, (1, C_IN, H, W)).astype(np.int32)
    w = rng.integers(-8, 8, (C_OUT, C_IN, K, K)).astype(np.int32)
    y = Tensor(x).conv2d(Tensor(w), padding=PAD)
    xp = np.pad(x, ((0, 0), (0, 0), (PAD, PAD), (PAD, PAD)))
    Ho, Wo = H + 2 * PAD - K + 1, W + 2 * PAD - K + 1
    ref = np.zeros((1, C_OUT, Ho, Wo), np.int32)
    for o in range(C_OUT):
        for i in range(Ho):
            for j in range(Wo):
                ref[0, o, i, j] = (xp[0, :, i:i + K, j:j + K] * w[o]).sum()
    return Case((y,), (ref,))


def sibling_loops(N: int = 10, seed: int = 7) -> Case:
    """x - max(x): a REDUCE loop, then a sibling output loop, in one kernel."""
    rng = _rng(seed)
    x = rng.integers(-100, 100, (N,)).astype(np.int32)
    return Case((Tensor(x) - Tensor(x).max(),), (x - x.max(),))


def divmod_signed(N: int = 16, seed: int = 8) -> Case:
    """Python-style // and % on signed ints: tinygrad emits CDIV/CMOD plus a sign fix."""
    rng = _rng(seed)
    a = rng.integers(-1000, 1000, (N,)).astype(np.int32)
    return Case(((Tensor(a) // 3) + (Tensor(a) % 5),), ((a // 3 + a % 5).astype(np.int32),))


def bitwise_uint8(N: int = 12, seed: int = 9) -> Case:
    """uint8 AND/OR/XOR/shifts/compare/where and a bool output."""
    rng = _rng(seed)
    a = rng.integers(0, 256, (N,)).astype(np.uint8)
    b = rng.integers(0, 256, (N,)).astype(np.uint8)
    ta, tb = Tensor(a), Tensor(b)
    y = ((ta & tb) | (ta ^ 0x5A)) + (ta >> 2) - (tb << 1)
    z = (ta < tb).where(ta, tb)
    with np.errstate(over="ignore"):
        ry = ((a & b) | (a ^ np.uint8(0x5A))) + (a >> 2) - (b << np.uint8(1))
    return Case((y, z, ta != tb), (ry.astype(np.uint8), np.where(a < b, a, b), a != b))


def mixed_int16(N: int = 10, seed: int = 10) -> Case:
    """int16 multiply that wraps, negation, max, cast to int8 and uint16."""
    rng = _rng(seed)
    a = rng.integers(-2**15, 2**15, (N,)).astype(np.int16)
    b = rng.integers(-2**15, 2**15, (N,)).astype(np.int16)
    ta, tb = Tensor(a), Tensor(b)
    y = (ta * tb).maximum(-ta)
    with np.errstate(over="ignore"):
        ry = np.maximum(a * b, -a)
    return Case((y, y.cast(dtypes.int8), ta.cast(dtypes.uint16)),
                (ry, ry.astype(np.int8), a.astype(np.uint16)))


# name -> builder, small enough for the Python simulator
SMALL: dict[str, Callable[[], Case]] = {
    "gemv_int8_16x8": gemv_int8,
    "matmul_int32": matmul_int32,
    "add_relu": add_relu,
    "mlp_int8_small": lambda: mlp_int8(IN=32, HIDDEN=16, OUT=4, SHIFT=6),
    "residual_mlp": residual_mlp,
    "fan_out": fan_out,
    "conv2d_padded": conv2d_padded,
    "sibling_loops": sibling_loops,
    "divmod_signed": divmod_signed,
    "bitwise_uint8": bitwise_uint8,
    "mixed_int16": mixed_int16,
}

# the full-size designs the issue names (~100k cycles each)
LARGE: dict[str, Callable[[], Case]] = {
    "gemv_int8_128x784": lambda: gemv_int8(128, 784),
    "mlp_int8_784_128_10": mlp_int8,
}


def host_port_peek(design, words) -> Callable:
    """peek(ctx, i, addr): in a pysim run of `design`, the element at `addr` of host port i's
    memory, as the bus writes it (its field of a packed word); `words`: input_words(design)."""
    refs = {(ref.kernel, ref.slot): ref for buf, w in words.items() for ref, _ in design.memory_words(buf, w)}

    def peek(ctx, i: int, addr: int) -> int:
        hp = design.host_ports[i]
        ref = refs[hp.kernel, hp.slot]
        mem = design.memory_parts(ref)[0][2]
        return (ctx.get(mem[addr]) >> ref.offset) & ((1 << ref.width) - 1)
    return peek


def run_on_host_bus(design, *, order: str = "bank", sample: int | None = None) -> np.ndarray:
    """Drive the top's host bus in pysim as a CPU would: write every input memory word by word
    (`order`: "bank", bank after bank; "word", address after address across the banks, so a
    word of a packed memory is written in back-to-back cycles; "pairs", two addresses of a bank
    (the higher first), then of the next, so the same word comes back every other cycle, from
    the last pair down: address 0 of the last bank, which a kernel reads first, is written last;
    "again", bank after bank, then the even banks once more address after address, so a packed
    word is partly rewritten in back-to-back cycles and its odd banks must keep what they hold),
    start at once, wait for done, then
    read every memory of the first output. Returns its words.

    `sample`: write only the first and last `sample` words of each memory of each bank through
    the bus, after loading every input word directly with those words inverted: a write that
    does not land shows in the output, at a fraction of the cycles of a large design's 100k
    words (each block RAM and each copy of the bus's address and data is still written)."""
    from compiler.sim.memory_io import input_words
    from compiler.sim.pysim import Harness, poke_bank
    top = design.top
    sel = {(p.kernel, p.slot): i for i, p in enumerate(design.host_ports)}
    out_buf = design.graph.outputs[0]
    got = {}

    async def bench(ctx):
        banks = [(ref, bank) for buf, words in input_words(design, None).items()
                 for ref, bank in design.memory_words(buf, words)]
        if sample is None:
            writes = [(a, sel[ref.kernel, ref.slot], v) for ref, bank in banks for a, v in enumerate(bank.tolist())]
        else:
            writes = []
            for ref, bank in banks:
                picked = sorted({a for _, start, mem in design.memory_parts(ref) for a in
                                 [*range(start, start + sample), *range(start + mem.depth - sample, start + mem.depth)]
                                 if 0 <= a < len(bank)})
                wrong = bank.copy()
                wrong[picked] = ~bank[picked] & ((1 << ref.width) - 1)
                poke_bank(ctx, design, ref, wrong)
                writes += [(a, sel[ref.kernel, ref.slot], int(bank[a])) for a in picked]
        arranged = {"bank": writes, "word": sorted(writes),
                    "pairs": sorted(writes, key=lambda w: (-(w[0] // 2), w[1], -w[0])),
                    "again": writes + [w for w in sorted(writes) if w[1] % 2 == 0]}[order]
        for a, s, v in arranged:
            ctx.set(top.host_sel, s)
            ctx.set(top.host_addr, a)
            ctx.set(top.host_wdata, v)
            ctx.set(top.host_we, 1)
            await ctx.tick()
        ctx.set(top.host_we, 0)
        ctx.set(top.start, 1)
        await ctx.tick()
        ctx.set(top.start, 0)
        await ctx.tick().until(top.done)
        await ctx.tick()
        banks = []
        for ref in design.home_memories(out_buf):
            ctx.set(top.host_sel, sel[ref.kernel, ref.slot])
            words = []
            for a in range(ref.depth):
                ctx.set(top.host_addr, a)
                await ctx.tick().repeat(top.host_read_latency)
                words.append(ctx.get(top.host_rdata))
            banks.append(words)
        got["y"] = design.buffer_words(out_buf, banks)

    Harness.of(design).simulate(bench)
    return got["y"]

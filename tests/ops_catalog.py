"""The forward cases of tinygrad's own op tests (test/backend/test_ops.py, `TestOps.test_*`),
at small shapes, as one catalog: what tests/test_ops_catalog.py asserts and what the table in
docs/ops.md is generated from (`python tests/ops_catalog.py --markdown`).

Each case names the test_ops test it comes from, the forward function (tinygrad only: there the
reference is torch, here it is tinygrad's own result on its PYTHON device), its inputs, and the
forward tolerance test_ops gives it (helper_test_op's default atol 1e-6, rtol 1e-3 unless the
test says otherwise). `expect` is what this hardware does with it, measured:

- "exact": bit for bit equal to tinygrad (shape, dtype, every bit, -0.0 and NaN included);
- "close": within the case's test_ops tolerance, not bit for bit (the table gives the error);
- "unsupported: <text>": compile_model refuses it with an UnsupportedError/CompileError whose
  message contains <text> (the table says why).

Shapes are small (a few dozen elements) so each case simulates in seconds; the op and the
kernels tinygrad makes for it are the same at any size.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler import CompileError, compile_model, simulate  # noqa: E402  (first: it picks tinygrad's device)
from dse.evaluate import ulp_distance  # noqa: E402
from tinygrad import Tensor, dtypes  # noqa: E402
from tinygrad_ref import Arg, make_inputs, tinygrad_outputs  # noqa: E402

F = dtypes.float32
I = dtypes.int32


@dataclass(frozen=True)
class Case:
    name: str                              # test_ops's test name, without "test_" (a suffix after "/" tells variants apart)
    forward: Callable
    args: tuple = ()                       # Arg or (shape, dtype) per input
    expect: str = "exact"
    atol: float = 1e-6                     # test_ops's forward tolerance for this case
    rtol: float = 1e-3
    note: str = ""
    reference: Callable | None = None      # numpy, where tinygrad's PYTHON device cannot run the case


NO_DEVICE = ("tinygrad realises this constant on its CPU device, which needs clang (absent here): "
             "compared with numpy")


def f(*shape, low=-2.0, high=2.0) -> Arg:
    return Arg(shape, F, low, high)


def i(*shape, low=-10, high=10) -> Arg:
    return Arg(shape, I, low, high)


def _cases() -> list[Case]:
    c = Case
    x34, x234 = (f(3, 4),), (f(2, 3, 4),)
    pos = (f(3, 4, low=0.1, high=2.0),)
    unit = (f(3, 4, low=-0.99, high=0.99),)
    two = (f(3, 4), f(3, 4))
    ints2 = (i(3, 4), i(3, 4))
    return [
        # creation
        c("full", lambda: Tensor.full((3, 4), 4)),
        c("full_like", lambda x: Tensor.full_like(x, 4), x34),
        c("zeros", lambda: Tensor.zeros(3, 4)),
        c("ones_like", lambda x: Tensor.ones_like(x), x34),
        c("eye", lambda: Tensor.eye(4), reference=lambda: np.eye(4, dtype=np.float32), note=NO_DEVICE),
        c("arange", lambda: Tensor.arange(5, 17, 3), reference=lambda: np.arange(5, 17, 3, dtype=np.int32), note=NO_DEVICE),
        c("linspace", lambda: Tensor.linspace(-1, 2, 7), reference=lambda: np.linspace(-1, 2, 7, dtype=np.float32),
          note=NO_DEVICE),
        c("split", lambda x: x.split(2, dim=1), x34),
        c("chunk", lambda x: x.chunk(3, dim=0), x34),
        c("unfold", lambda x: x.unfold(1, 2, 1), x34),
        c("meshgrid", lambda x, y: Tensor.meshgrid(x, y), (f(3), f(4))),
        # sums and reductions
        c("sum", lambda x: x.sum(), x34),
        c("sum/axis", lambda x: x.sum(axis=1), x234),
        c("sum_twice", lambda x: x.sum(axis=1).sum(), x234),
        c("sum_relu", lambda x: x.relu().sum(axis=0), x34),
        c("sum_dtype_arg", lambda x: x.sum(dtype=dtypes.int32), (i(3, 4),)),
        c("prod", lambda x: x.prod(axis=1), x34),
        c("max", lambda x: x.max(axis=1), x34),
        c("min", lambda x: x.min(), x34),
        c("mean", lambda x: x.mean(), x34),
        c("mean_axis", lambda x: x.mean(axis=(0, 2)), x234),
        c("var", lambda x: x.var(), x34),
        c("var_axis", lambda x: x.var(axis=1), x234),
        c("std", lambda x: x.std(), x34),
        c("std_axis", lambda x: x.std(axis=-1, keepdim=True), x234),
        c("std_mean", lambda x: x.std_mean(axis=1), x34),
        c("any", lambda x: (x > 1.5).any(axis=1), x34),
        c("all", lambda x: (x > -1.5).all(axis=0), x34),
        c("argmax", lambda x: x.argmax(axis=1), x34),
        c("argmin", lambda x: x.argmin(), x34),
        c("cumsum", lambda x: x.cumsum(axis=1), x34),
        c("cumprod", lambda x: x.cumprod(axis=0), x34),
        c("cummax", lambda x: x.cummax(axis=1)[0], x34),
        c("cummin", lambda x: x.cummin(axis=1)[0], x34),
        c("softmax", lambda x: x.softmax(), x34),
        c("softmax_other_axis", lambda x: x.softmax(axis=0), x34),
        c("log_softmax", lambda x: x.log_softmax(), x34),
        c("softmin", lambda x: x.softmin(), x34),
        c("logsumexp", lambda x: x.logsumexp(axis=1), x34),
        c("logcumsumexp", lambda x: x.logcumsumexp(axis=1), x34),
        c("normalize", lambda x: x.normalize(dim=1), x34),
        c("isclose", lambda x, y: x.isclose(y, rtol=0.5), two),
        # comparisons, selection
        c("where", lambda x, a, b: (x > 0).where(a, b), (f(3, 4), f(3, 4), f(3, 4))),
        c("cmp_eq", lambda x, y: x == y, ints2),
        c("cmp_gt", lambda x, y: x > y, two),
        c("cmp_ge", lambda x, y: x >= y, two),
        c("cmp_lt", lambda x, y: x < y, two),
        c("cmp_le", lambda x, y: x <= y, ints2),
        c("maximum", lambda x, y: x.maximum(y), two),
        c("minimum", lambda x, y: x.minimum(y), ints2),
        c("clip", lambda x: x.clip(-0.8, 1.2), x34),
        c("isinf", lambda x: (x * 1e38 * 10).isinf(), x34),
        c("isnan", lambda x: x.sqrt().isnan(), x34),
        c("isfinite", lambda x: (x * 1e38 * 10).isfinite(), x34),
        c("lerp", lambda x, y: x.lerp(y, 0.3), two),
        c("tril", lambda x: x.tril(), (f(4, 4),)),
        c("triu", lambda x: x.triu(1), (f(4, 4),)),
        # arithmetic
        c("add", lambda x, y: x + y, two),
        c("add/int", lambda x, y: x + y, ints2),
        c("add3", lambda x, y, z: x + y + z, (f(3, 4),) * 3),
        c("broadcasted_add", lambda x, y: x + y, (f(3, 4), f(3, 1))),
        c("sub", lambda x, y: x - y, two),
        c("scalar_rsub", lambda x: 2 - x, x34),
        c("neg", lambda x: -x, x34),
        c("mul", lambda x, y: x * y, two),
        c("mul/int", lambda x, y: x * y, ints2),
        c("div", lambda x, y: x / y, (f(3, 4), f(3, 4, low=0.5, high=2))),
        c("scalar_div", lambda x: x / 3, x34),
        c("div_int", lambda x, y: x // y, (i(3, 4), i(3, 4, low=1, high=5))),
        c("mod", lambda x, y: x % y, (i(3, 4), i(3, 4, low=1, high=5))),
        c("fmod", lambda x, y: x.fmod(y), (f(3, 4), f(3, 4, low=0.5, high=2))),
        c("pow", lambda x, y: x.pow(y), (f(3, 4, low=0.1, high=2), f(3, 4))),
        c("pow_const", lambda x: x ** 3, x34),
        c("pow_int", lambda x, y: x ** y, (i(3, 4, low=-5, high=5), i(3, 4, low=0, high=3)), "close", atol=1, rtol=0,
          reference=lambda x, y: x ** y,
          note="tinygrad has no integer pow (a TODO in 0.14): its kernel computes exp2(e * log2|b|) in float32 "
               "and stores the float into the int32 buffer, which its C backends convert by truncation (so does "
               "this compiler); its PYTHON device cannot run that kernel. Compared with numpy's exact powers: "
               "off by one where the float result falls just below the integer"),
        c("sqrt", lambda x: x.sqrt(), pos),
        c("rsqrt", lambda x: x.rsqrt(), pos),
        c("reciprocal", lambda x: x.reciprocal(), x34),
        c("trunc", lambda x: (x * 3).trunc(), x34),
        c("floor", lambda x: (x * 3).floor(), x34),
        c("ceil", lambda x: (x * 3).ceil(), x34),
        c("round", lambda x: (x * 2.5).round(), x34, "close",
          note="values exact; tinygrad's PYTHON device truncates through a Python int, so its zeros are +0.0 "
               "where IEEE (numpy, the FTrunc unit) gives -0.0"),
        c("abs", lambda x: x.abs(), x34),
        c("sign", lambda x: x.sign(), x34),
        c("copysign", lambda x, y: x.copysign(y), two),
        c("logical_not", lambda x: (x > 0).logical_not(), x34),
        c("xor", lambda x, y: x ^ y, ints2),
        c("and", lambda x, y: x & y, ints2),
        c("or", lambda x, y: x | y, ints2),
        c("bitwise_not", lambda x: ~x, (i(3, 4),)),
        c("lshift", lambda x: x << 3, (i(3, 4),)),
        c("rshift", lambda x: x >> 2, (i(3, 4, low=0, high=100),)),
        c("rshift_signed", lambda x: x >> 2, (i(3, 4, low=-100, high=100),)),
        # activations and transcendentals
        c("relu", lambda x: x.relu(), x34),
        c("leaky_relu", lambda x: x.leaky_relu(0.01), x34),
        c("relu6", lambda x: (x * 4).relu6(), x34),
        c("hardtanh", lambda x: x.hardtanh(-0.5, 0.5), x34),
        c("hardsigmoid", lambda x: x.hardsigmoid(), x34),
        c("hardswish", lambda x: x.hardswish(), x34),
        c("softsign", lambda x: x.softsign(), x34),
        c("exp", lambda x: x.exp(), x34),
        c("exp2", lambda x: x.exp2(), x34),
        c("log", lambda x: x.log(), pos),
        c("log2", lambda x: x.log2(), pos),
        c("log10", lambda x: x.log10(), pos),
        c("sin", lambda x: x.sin(), x34),
        c("cos", lambda x: x.cos(), x34),
        c("tan", lambda x: x.tan(), unit),
        c("asin", lambda x: x.asin(), unit, atol=1e-3),
        c("acos", lambda x: x.acos(), unit, atol=1e-3),
        c("atan", lambda x: x.atan(), x34),
        c("sinh", lambda x: x.sinh(), x34),
        c("cosh", lambda x: x.cosh(), x34),
        c("tanh", lambda x: x.tanh(), x34),
        c("asinh", lambda x: x.asinh(), x34),
        c("acosh", lambda x: x.acosh(), (f(3, 4, low=1.1, high=3),)),
        c("atanh", lambda x: x.atanh(), unit),
        c("sigmoid", lambda x: x.sigmoid(), x34),
        c("logsigmoid", lambda x: x.logsigmoid(), x34),
        c("silu", lambda x: x.silu(), x34),
        c("swish", lambda x: x.swish(), x34),
        c("mish", lambda x: x.mish(), x34),
        c("softplus", lambda x: x.softplus(), x34),
        c("celu", lambda x: x.celu(), x34),
        c("selu", lambda x: x.selu(), x34),
        c("elu", lambda x: x.elu(), x34),
        c("gelu", lambda x: x.gelu(), x34),
        c("quick_gelu", lambda x: x.quick_gelu(), x34),
        c("erf", lambda x: x.erf(), x34),
        c("logaddexp", lambda x, y: x.logaddexp(y), two),
        # matrix products
        c("dot_1d", lambda x, y: x.dot(y), (f(5), f(5))),
        c("dot", lambda x, y: x.dot(y), (f(3, 5), f(5, 2))),
        c("matmul", lambda x, y: x @ y, (f(4, 6), f(6, 3))),
        c("matmul/int", lambda x, y: x @ y, (i(4, 6), i(6, 3))),
        c("matmul_batched", lambda x, y: x @ y, (f(2, 3, 4), f(2, 4, 3))),
        c("matmul_batched_vector", lambda x, y: x @ y, (f(2, 3, 4), f(4))),
        c("einsum", lambda x, y: Tensor.einsum("ij,jk->ik", x, y), (f(3, 4), f(4, 2))),
        c("einsum_trace", lambda x: Tensor.einsum("ii", x), (f(4, 4),)),
        c("broadcastdot", lambda x, y: x @ y, (f(2, 3, 4), f(4, 2))),
        c("multidot", lambda x, y, z: x @ y @ z, (f(3, 4), f(4, 5), f(5, 2))),
        c("matvecmat", lambda x, y, z: (x @ y).relu() @ z, (f(4), f(4, 5), f(5, 3))),
        # movement
        c("transpose", lambda x: x.transpose(0, 2), x234),
        c("permute", lambda x: x.permute(2, 0, 1) + 1, x234),
        c("reshape", lambda x: x.reshape(4, 6), x234),
        c("flip", lambda x: x.flip((0, 2)), x234),
        c("squeeze", lambda x: x.squeeze(1), (f(3, 1, 4),)),
        c("unsqueeze", lambda x: x.unsqueeze(1) * 2, x34),
        c("flatten", lambda x: x.flatten(1), x234),
        c("unflatten", lambda x: x.unflatten(1, (2, 2)), x34),
        c("expand", lambda x: x.expand(3, 4) + 1, (f(3, 1),)),
        c("repeat", lambda x: x.repeat(2, 1), x34),
        c("repeat_interleave", lambda x: x.repeat_interleave(2, dim=1), x34),
        c("roll", lambda x: x.roll(1, 1), x34),
        c("diagonal", lambda x: x.diagonal(), (f(4, 4),)),
        c("diag", lambda x: x.diag(), (f(4),)),
        c("pad", lambda x: x.pad(((1, 1), (0, 2))), x34),
        c("pad_reflect_mode", lambda x: x.pad((1, 1, 1, 0), mode="reflect"), x34),
        c("pad_replicate_mode", lambda x: x.pad((2, 1, 0, 1), mode="replicate"), x34),
        c("pad_circular_mode", lambda x: x.pad((1, 1, 1, 1), mode="circular"), x34),
        c("slice_stride_gt_one", lambda x: x[::2, 1::2], (f(5, 6),)),
        c("slice_negative_strides", lambda x: x[::-1, ::-2], x34),
        c("slice_int_indexing", lambda x: x[1, 2:], x34),
        c("slice_ellipsis", lambda x: x[..., 1], x234),
        c("double_slice", lambda x: x[1:][:, 1:3], x34),
        c("cat", lambda x, y: x.cat(y, dim=1), two),
        c("stack", lambda x, y: Tensor.stack(x, y, dim=1), two),
        # convolution and pooling
        c("conv1d", lambda x, w: x.conv2d(w), (f(1, 2, 7), f(3, 2, 3)), atol=1e-4),
        c("simple_conv2d", lambda x, w: x.conv2d(w), (f(1, 2, 5, 5), f(2, 2, 3, 3)), atol=1e-4),
        c("conv2d/bias_padding_stride", lambda x, w, b: x.conv2d(w, b, padding=1, stride=2),
          (f(1, 2, 5, 5), f(3, 2, 3, 3), f(3)), atol=1e-4),
        c("depthwise_conv2d", lambda x, w: x.conv2d(w, groups=2), (f(1, 2, 5, 5), f(2, 1, 3, 3)), atol=1e-4),
        c("dilated_conv2d", lambda x, w: x.conv2d(w, dilation=2), (f(1, 1, 6, 6), f(1, 1, 2, 2)), atol=1e-4),
        c("simple_conv_transpose2d", lambda x, w: x.conv_transpose2d(w), (f(1, 2, 3, 3), f(2, 1, 2, 2)), atol=1e-4),
        c("max_pool2d", lambda x: x.max_pool2d(kernel_size=(2, 2)), (f(1, 1, 4, 6),)),
        c("max_pool2d_padding", lambda x: x.max_pool2d(kernel_size=3, stride=2, padding=1), (f(1, 1, 5, 5),)),
        c("avg_pool2d", lambda x: x.avg_pool2d(kernel_size=(2, 2)), (f(1, 1, 4, 6),)),
        c("avg_pool2d_padding", lambda x: x.avg_pool2d(kernel_size=3, stride=2, padding=1), (f(1, 1, 5, 5),)),
        c("global_avg_pool2d", lambda x: x.mean(axis=(2, 3)), (f(1, 2, 3, 3),)),
        c("interpolate_nearest", lambda x: x.interpolate((6, 6), mode="nearest"), (f(1, 1, 3, 3),)),
        c("interpolate_linear", lambda x: x.interpolate((7,), mode="linear"), (f(1, 1, 4),)),
        c("interpolate_bilinear", lambda x: x.interpolate((5, 5), mode="linear"), (f(1, 1, 3, 3),)),
        # indexing
        c("gather", lambda x, idx: x.gather(1, idx), (f(3, 4), i(3, 2, low=0, high=3))),
        c("slice_fancy_indexing", lambda x, idx: x[idx], (f(5, 3), i(4, low=0, high=4))),
        c("one_hot", lambda idx: idx.one_hot(5), (i(6, low=0, high=4),)),
        c("masked_fill", lambda x: x.masked_fill(x > 0.5, -3.0), x34),
        c("scatter", lambda x, idx, s: x.scatter(1, idx, s), (f(3, 4), i(3, 2, low=0, high=3), f(3, 2))),
        c("scatter_reduce", lambda x, idx, s: x.scatter_reduce(1, idx, s, reduce="sum"),
          (f(3, 4), i(3, 2, low=0, high=3), f(3, 2))),
        c("sort", lambda x: x.sort(dim=1)[0], x34),
        c("argsort", lambda x: x.argsort(dim=1), x34),
        c("topk", lambda x: x.topk(2, dim=1)[0], x34),
        # attention and losses
        c("scaled_dot_product_attention", lambda q, k, v: q.scaled_dot_product_attention(k, v),
          (f(1, 4, 8), f(1, 4, 8), f(1, 4, 8))),
        c("scaled_dot_product_attention_causal", lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
          (f(1, 4, 8), f(1, 4, 8), f(1, 4, 8))),
        c("binary_crossentropy", lambda x, y: x.sigmoid().binary_crossentropy(y),
          (f(3, 4), f(3, 4, low=0, high=1))),
        c("binary_crossentropy_logits", lambda x, y: x.binary_crossentropy_logits(y), (f(3, 4), f(3, 4, low=0, high=1))),
        c("cross_entropy_class_indices", lambda x, y: x.cross_entropy(y), (f(3, 5), i(3, low=0, high=4))),
        c("sparse_categorical_crossentropy", lambda x, y: x.sparse_categorical_crossentropy(y),
          (f(3, 5), i(3, low=0, high=4))),
        c("nll_loss", lambda x, y: x.log_softmax().nll_loss(y), (f(3, 5), i(3, low=0, high=4))),
        # more of test_ops
        c("max_unpool2d", lambda x: Tensor.max_unpool2d(*x.max_pool2d(2, return_indices=True), kernel_size=2),
          (f(1, 1, 4, 4),)),
        c("masked_select", lambda x: x.masked_select(x > 0.5), x34),
        c("nonzero", lambda x: (x > 0.5).nonzero(), x34, "unsupported: op IF",
          note="tinygrad builds it with a conditional store (IF): no data-dependent control flow in the hardware yet"),
        c("simple_conv3d", lambda x, w: x.conv2d(w), (f(1, 1, 3, 4, 4), f(2, 1, 2, 2, 2)), atol=1e-4),
        c("avg_pool3d", lambda x: x.avg_pool2d(kernel_size=(2, 2, 2)), (f(1, 1, 4, 4, 4),)),
        c("interpolate_nearest_exact", lambda x: x.interpolate((5, 5), mode="nearest-exact"), (f(1, 1, 3, 3),)),
        c("interpolate_trilinear", lambda x: x.interpolate((3, 3, 3), mode="linear"), (f(1, 1, 2, 2, 2),)),
        c("gemm_fp16", lambda x, y: x.half() @ y.half(), (f(4, 6), f(6, 3)), atol=5e-3, rtol=5e-3),
        c("add/fp16", lambda x, y: x.half() + y.half(), two,
          note="tinygrad's PYTHON device emulates half in float32: the casts inside the kernel do not round, the store "
               "does (numpy float16 is 1 fp16 ULP off on 5 of these 12 sums); the hardware computes the same"),
        c("mul/bf16", lambda x, y: x.cast(dtypes.bfloat16) * y.cast(dtypes.bfloat16), two),
        c("add/int64", lambda x, y: x.cast(dtypes.int64) + y.cast(dtypes.int64) * (1 << 40), ints2),
        c("add/uint8", lambda x, y: x.cast(dtypes.uint8) + y.cast(dtypes.uint8), (i(3, 4, low=0, high=200), i(3, 4, low=0, high=200))),
        c("cast/float64", lambda x: x.cast(dtypes.float64) * 3, x34, "unsupported: no hardware element type",
          note="no float64 units (FP32, FP16, BF16 only)"),
        c("idiv_shift_rewrite_negative", lambda x: x // 4, (i(3, 4, low=-50, high=50),)),
        c("div_rounding_mode/trunc", lambda x, y: x.div(y, rounding_mode="trunc"), (f(3, 4), f(3, 4, low=0.5, high=2))),
        c("div_rounding_mode/floor", lambda x, y: x.div(y, rounding_mode="floor"), (f(3, 4), f(3, 4, low=0.5, high=2))),
        c("sort/descending", lambda x: x.sort(dim=0, descending=True)[0], x34),
        c("topk/smallest", lambda x: x.topk(3, dim=1, largest=False)[1], x34),
        c("einsum_ellipsis", lambda x, y: Tensor.einsum("...ij,...jk->...ik", x, y), (f(2, 3, 4), f(2, 4, 2))),
        c("var_keepdim", lambda x: x.var(axis=0, keepdim=True), x34),
        c("sum_with_zeros_shape", lambda x: x.sum(axis=1), (f(3, 0),)),
        c("slice_fancy_indexing_with_tensors", lambda x, a, b: x[a, b], (f(4, 5), i(3, low=0, high=3), i(3, low=0, high=4))),
        c("cross_entropy_smoothing", lambda x, y: x.cross_entropy(y, label_smoothing=0.1), (f(3, 5), i(3, low=0, high=4))),
        c("binary_crossentropy_reductions", lambda x, y: x.sigmoid().binary_crossentropy(y, reduction="sum"),
          (f(3, 4), f(3, 4, low=0, high=1))),
        c("scaled_dot_product_attention/mask", lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m > 0),
          (f(1, 4, 8), f(1, 4, 8), f(1, 4, 8), f(4, 4))),
        c("stack_max", lambda x, y: Tensor.stack(x, y).max(0), two),
        c("cumsum_zero_axis", lambda x: x.cumsum(axis=0), (f(0, 3),), "unsupported: no elements",
          note="an empty output: nothing for the hardware to compute (a clear error, not an empty design)"),
        c("logical ops/and_or", lambda x, y: (x > 0) & (y < 0) | (x > 1), two),
        # casts
        c("cast", lambda x: (x * 10).cast(dtypes.int32), x34),
        c("cast/int_to_float", lambda x: x.cast(dtypes.float32) * 0.5, (i(3, 4),)),
        c("cast/bool", lambda x: x.cast(dtypes.bool), (i(3, 4, low=-1, high=1),)),
        c("bitcast", lambda x: x.bitcast(dtypes.int32), x34),
        c("cast_relu", lambda x: x.relu().cast(dtypes.int32), x34),
    ]


# Measured not bit-exact against tinygrad, within test_ops's tolerance: float sums and
# products rounded in another order (tinygrad's PYTHON device fuses multiply-adds and keeps
# some intermediates in Python floats) and, for the transcendentals, tinygrad's own
# EXP2/LOG2/SIN polynomials rounded once per float unit here. The table gives each one's error.
_CLOSE = {
    "mean_axis", "var_axis", "softmax", "softmax_other_axis", "log_softmax", "softmin", "logsumexp",
    "logcumsumexp", "normalize", "lerp", "div", "pow", "hardsigmoid", "softsign", "log", "log2", "log10",
    "sin", "cos", "tan", "atan", "asinh", "acosh", "atanh", "logsigmoid", "silu", "swish", "mish", "softplus",
    "gelu", "quick_gelu", "erf", "logaddexp", "dot", "matmul", "matmul_batched", "matmul_batched_vector",
    "einsum", "broadcastdot", "multidot", "matvecmat", "conv1d", "simple_conv2d", "conv2d/bias_padding_stride",
    "depthwise_conv2d", "dilated_conv2d", "simple_conv_transpose2d", "interpolate_linear",
    "interpolate_bilinear", "scaled_dot_product_attention", "scaled_dot_product_attention_causal",
    "simple_conv3d", "avg_pool3d", "interpolate_trilinear", "einsum_ellipsis", "var_keepdim",
    "scaled_dot_product_attention/mask",
}
CASES: dict[str, Case] = {case.name: (replace(case, expect="close") if case.name in _CLOSE else case)
                          for case in _cases()}
assert _CLOSE <= set(CASES), _CLOSE - set(CASES)


@dataclass
class Outcome:
    status: str                           # exact | close | mismatch | unsupported | error
    detail: str = ""                      # the error message, or the measured error
    max_abs: float = 0.0
    max_ulp: float = 0.0
    cycles: int | None = None
    seconds: float = 0.0


def ulp_error(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest distance in units in the last place of the output's format (fp16 or fp32)."""
    fmt = {np.dtype(np.float16): "fp16", np.dtype(np.float32): "fp32"}.get(got.dtype)
    return 0.0 if fmt is None else float(ulp_distance(got, ref.astype(got.dtype), fmt))


def run_case(case: Case, config=None, backend: str = "pysim") -> Outcome:
    """Compile and simulate one case, compared with tinygrad's result (module doc)."""
    t0 = time.perf_counter()
    arrays = make_inputs(case.args)
    if case.reference is None:
        want = tinygrad_outputs(case.forward, arrays)
    else:
        ref = case.reference(*arrays)
        want = [np.asarray(r) for r in (ref if isinstance(ref, (tuple, list)) else (ref,))]
    out = case.forward(*[Tensor(a) for a in arrays])
    try:
        design = compile_model(*(out if isinstance(out, (tuple, list)) else (out,)), config=config)
    except CompileError as exc:
        return Outcome("unsupported", str(exc), seconds=time.perf_counter() - t0)
    result = simulate(design, backend=backend)
    if result.cycles != design.cycle_model().total:
        return Outcome("error", f"simulated {result.cycles} cycles, the cycle model says {design.cycle_model().total}")
    outcome = Outcome("exact", cycles=result.cycles)
    for n, (got, ref) in enumerate(zip(result.outputs, want, strict=True)):
        if got.shape != ref.shape or got.dtype != ref.dtype:
            return Outcome("mismatch", f"output {n}: {got.dtype}{got.shape}, reference {ref.dtype}{ref.shape}")
        if np.array_equal(got, ref, equal_nan=got.dtype.kind == "f") and (
                got.dtype.kind != "f" or np.array_equal(np.signbit(got), np.signbit(ref))):
            continue                              # bit for bit (NaN payloads aside: -0.0 is not 0.0)
        if got.dtype.kind != "f" and not (case.expect == "close" and np.allclose(got, ref, atol=case.atol, rtol=case.rtol)):
            return Outcome("mismatch", f"output {n}: {int((got != ref).sum())} of {got.size} values differ")
        err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        err[np.isnan(got) & np.isnan(ref)] = 0
        outcome.max_abs = max(outcome.max_abs, float(np.nanmax(err, initial=0)))
        outcome.max_ulp = max(outcome.max_ulp, ulp_error(got, ref))
        if np.allclose(got, ref, atol=case.atol, rtol=case.rtol, equal_nan=True):
            outcome.status = "close"
        else:
            return Outcome("mismatch", f"output {n}: max abs error {outcome.max_abs:.3g} beyond atol {case.atol:g} "
                                       f"rtol {case.rtol:g}", outcome.max_abs, outcome.max_ulp, result.cycles)
    outcome.seconds = time.perf_counter() - t0
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the op catalog; print what each case does on the hardware.")
    ap.add_argument("names", nargs="*", help="cases to run (default all)")
    ap.add_argument("--markdown", action="store_true", help="print the docs/ops.md table (progress on stderr)")
    args = ap.parse_args(argv)
    rows = []
    for name in args.names or CASES:
        case = CASES[name]
        try:
            o = run_case(case)
        except Exception as exc:                  # a crash is a finding here, not the end of the run
            o = Outcome("error", f"{type(exc).__name__}: {exc}")
        rows.append((case, o))
        print(f"{name:40} {o.status:11} {o.seconds:5.1f}s cycles {o.cycles}  ulp {o.max_ulp:g} "
              f"abs {o.max_abs:.3g}  {o.detail[:150]}", file=sys.stderr if args.markdown else sys.stdout, flush=True)
    if args.markdown:
        print(markdown(rows))
    return 0


def markdown(rows) -> str:
    lines = ["| test_ops case | status | against | error | cycles | note |", "|---|---|---|---|---|---|"]
    for case, o in rows:
        if o.status == "exact":
            err = "bit-exact"
        elif o.status == "close":
            err = (f"max {o.max_ulp:g} ULP, {o.max_abs:.2g} abs" if o.max_ulp else f"max {o.max_abs:.2g} abs") \
                + f" (test_ops allows atol {case.atol:g}, rtol {case.rtol:g})"
        else:
            err = "-"
        status = "supported" if o.status in ("exact", "close") else o.status
        against = "-" if status != "supported" else "numpy" if case.reference else "tinygrad"
        note = case.note or (o.detail.split("\n")[0] if status != "supported" else "")
        lines.append(f"| `{case.name}` | {status} | {against} | {err} | {o.cycles if o.cycles is not None else '-'} | "
                     f"{note.replace('|', chr(92) + '|')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""User models for the spec and zoo tests: one good one, and each way a user's build can go wrong."""
from tinygrad import dtypes


def scale_add(dtype, N=8, SCALE=3):
    """y = SCALE * a + b, in int32 for integer dtypes."""
    def forward(a, b):
        if dtype.startswith(("int", "uint")):
            a, b = a.cast(dtypes.int32), b.cast(dtypes.int32)
        return a * SCALE + b
    return {"a": ((N,), dtype), "b": ((N,), dtype)}, forward


def needs_n(dtype, N):
    return {"x": ((N,), dtype)}, lambda x: x


def with_kwargs(dtype, **params):
    return {"x": ((params.get("N", 4),), dtype)}, lambda x: x


def only_ints(dtype, N=4):
    if dtype.startswith("fp") or dtype == "bf16":
        raise NotImplementedError(f"only integer dtypes, not {dtype}")
    return {"x": ((N,), dtype)}, lambda x: x


def not_a_tuple(dtype):
    return [1, 2, 3]


def bad_shape(dtype):
    return {"x": ((0, 4), dtype)}, lambda x: x


def int8_weights(dtype, N=4):
    """An int8 weight input whatever the spec's dtype: a spec range must fit int8 too."""
    return {"x": ((N,), dtype), "w": ((N,), "int8")}, lambda x, w: x * w.cast(x.dtype)


NOT_CALLABLE = 42

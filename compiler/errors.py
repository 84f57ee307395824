"""Errors the compiler raises for input it cannot turn into correct hardware."""
from __future__ import annotations


class CompileError(ValueError):
    """The model cannot be compiled; the message says what and where."""


class UnsupportedError(CompileError):
    """An op or dtype the hardware cannot do (yet). Never silently wrong hardware."""

    def __init__(self, kernel: str, op: str, dtype: str, why: str = ""):
        self.kernel, self.op, self.dtype = kernel, op, dtype
        detail = f": {why}" if why else ""
        super().__init__(f"kernel {kernel!r}: op {op} on dtype {dtype} is not supported by the hardware{detail}")

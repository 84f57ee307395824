"""`HardwareConfig`: the frozen record of hardware knobs a design is compiled with."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class HardwareConfig:
    """Hardware knobs. Every field is a knob the design-space explorer may vary.

    mem_read: "sync" (default) gives every memory a registered read port, as block RAM needs;
        the controller issues addresses one cycle ahead, so it costs no cycles. "comb" gives
        combinational read ports (LUT RAM or flip-flops), kept for comparison.
    fp_rounding: "rne" (default, IEEE round to nearest, ties to even) or "rtz" (toward zero:
        a little less logic; overflow gives the largest finite value, not inf).
    fp_subnormals: "keep" (default, IEEE gradual underflow) or "flush" (subnormal inputs read
        as zero, subnormal results become zero: less logic, less accuracy near zero).
    """
    mem_read: str = "sync"
    fp_rounding: str = "rne"
    fp_subnormals: str = "keep"

    def __post_init__(self) -> None:
        if self.mem_read not in ("sync", "comb"):
            raise ValueError(f"HardwareConfig.mem_read: expected 'sync' or 'comb', got {self.mem_read!r}")
        if self.fp_rounding not in ("rne", "rtz"):
            raise ValueError(f"HardwareConfig.fp_rounding: expected 'rne' or 'rtz', got {self.fp_rounding!r}")
        if self.fp_subnormals not in ("keep", "flush"):
            raise ValueError(f"HardwareConfig.fp_subnormals: expected 'keep' or 'flush', got {self.fp_subnormals!r}")

    @classmethod
    def knob_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "HardwareConfig":
        """Build from a mapping, rejecting unknown knob names with the list of known ones."""
        unknown = sorted(set(values) - set(cls.knob_names()))
        if unknown:
            raise ValueError(f"unknown hardware knob(s) {', '.join(map(repr, unknown))}; "
                             f"known knobs: {', '.join(cls.knob_names())}")
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

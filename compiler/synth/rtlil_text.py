"""A design's RTLIL for Yosys, without spelling out the contents of memories that start at zero.

Amaranth writes each memory's initial contents as one constant, bit by bit. The weight memory
of the GEMV 128x784 holds 100,352 words: in fp32 a 3.2-Mbit constant that takes 3.7 s of Python
to write (nearly all of `rtlil.convert`) and ~4 s of Yosys to carry through its passes
(measured on the one-lane fp32 GEMV: synth_ecp5 11.2 s with it, 6.9 s without). The compiler's
memories start at zero and are loaded by the host (the simulators poke them; an exported
design's users write them over the host bus), so `convert` writes a memory whose initial
contents are all zero as a one-word zero init, and the rest of its words are left undefined.

What Yosys builds from that has the same resources: on 11 designs (GEMVs int8/fp16 up to the
4x8 128x784, matmul, conv2d, mlp, layernorm, mlp_softmax, attention, mem_read=comb; ECP5, iCE40
and Xilinx) every LUT, FF, block-RAM and LUT-RAM count is equal, and the fp32 GEMV's mapped
netlist is byte-identical. The others differ in RAM init bits, undefined (x) where the full
form has 0, and one (mlp_softmax bf16 on iCE40) also in a few cells' names and LUT contents at
equal counts. A bitstream wants the zeros: compiler.pnr.bitstream synthesises with `exact_init`.
One word and not none, because abc9's LUT mapping depends on the order of the netlist's cells:
dropping the init cell moved the fp32 GEMV from 3,512 to 3,719 LUT4s.
tests/test_rtlil_text.py compares the two forms through synthesis.

A memory with any non-zero word keeps its full contents, and so does a ROM (ROM_ATTRIBUTE) of zeros. Amaranth's own conversion is used
for everything; only the memory being written is replaced by a one-word stand-in while its
init cell is emitted (amaranth.back.rtlil, pinned to 0.5.x in pyproject.toml).
"""
from __future__ import annotations

import contextlib
import contextvars
import types
import weakref

from amaranth.back import rtlil

_SHORT_ZERO_INIT = contextvars.ContextVar("tinyhw_short_zero_init", default=False)
ROM_ATTRIBUTE = "tinyhw_rom"
"""A read-only memory (weights="constant", hw/kernel.py): its zeros are its contents, kept."""

DUPLICATE_ATTRIBUTE = "tinyhw_dup"
"""Wire attribute of registers duplicated on purpose (hw.datapath.Copies, a float unit's own input
registers: fp.common.Pipe); compiler/synth/area.py marks the flip-flops that drive them `keep`,
which Yosys's opt_merge respects (it merges identical flip-flops)."""

DATA_ATTRIBUTE = "tinyhw_data"
"""Wire attribute of reset-less registers (data, hw.datapath.Datapath.register): nothing reads
what one holds before it is first written, so synth/area.py drops their initial value
(DATA_SCRIPT) and Yosys folds a bit whose input is constant into that constant. With the initial
value (Amaranth's 0) it kept a flip-flop per such bit, and opt_merge made them one across kernels
(AD08 at target_mhz 200: a constant-1 bit of three kernels' requantisation registers, one
flip-flop with 50 loads, the critical path at 9.2 ns of routing)."""


def convert(top, name: str = "top") -> str:
    """`amaranth.back.rtlil.convert(top, name=name)`, all-zero memory contents as one word.
    Kept while `top` lives: a sweep's point converts its design for the simulator and again for
    Yosys, and a 4-lane float GEMV takes 0.7 s to convert."""
    try:
        return _converted[top][name]
    except (KeyError, TypeError):       # not converted yet, or `top` cannot be weakly referenced
        pass
    token = _SHORT_ZERO_INIT.set(True)
    try:
        text = rtlil.convert(top, name=name)
    finally:
        _SHORT_ZERO_INIT.reset(token)
    with contextlib.suppress(TypeError):
        _converted.setdefault(top, {})[name] = text
    return text


_converted: "weakref.WeakKeyDictionary[object, dict[str, str]]" = weakref.WeakKeyDictionary()


def _install() -> None:
    emitter = rtlil.ModuleEmitter
    if getattr(emitter.emit_memory, "tinyhw_short_zero_init", False):
        return
    full = emitter.emit_memory

    def emit_memory(self, cell_idx, cell):
        if _SHORT_ZERO_INIT.get() and not any(cell.init) and ROM_ATTRIBUTE not in cell.attributes:
            cell = types.SimpleNamespace(init=(0,), width=cell.width, depth=1, src_loc=cell.src_loc)
        return full(self, cell_idx, cell)

    emit_memory.tinyhw_short_zero_init = True
    emitter.emit_memory = emit_memory


_install()      # at import (under Python's import lock): every other conversion is unchanged

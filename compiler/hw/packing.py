"""Packed memory words: several banks of one buffer in one memory (the mem_pack knob).

Banking (layout.py) gives every lane of an unrolled loop its own memory bank, one element per
word. A block RAM is sold by the block, not by the bit: an int8 bank of 392 words fills 4% of
an ECP5 DP16KD (18 Kbit), so the int8 GEMV 128x784 at lanes x reduce_unroll = 16 x 16 needs
256 block RAMs for 100 KB of weights (the LFE5U-85F has 208). Packing puts G banks side by
side in one memory whose word holds G elements (bank i of a group at bits [i*w, (i+1)*w)):
one read port then feeds G lanes per cycle, and Yosys maps the wide memory onto block RAMs
in their widest mode (36 bits x 512 words), 4 int8 banks per block.

A group shares its memory's ports, so banks are packed only where that is free:
  * every step that loads one bank of the group loads all of them at the same word addresses
    (the same index expressions, so the same read ports): true of lanes and unrolled
    reductions over affine indices, where every lane reads word `i div P ...`;
  * the kernel never stores to them (inputs and copy destinations: the host bus and the copy
    pass write one bank or all banks at one address, through per-element write enables);
  * no other kernel reads them in place (share_buffers), and they are not parts of a deep
    memory split for the pipeline (split_deep keeps those apart on purpose);
  * they are read in the same pipeline stage (a buffer read a stage late, Schedule.late, has
    one more register on its read address: every bank of a group, or none).
Elsewhere banks stay one memory each. Packing changes no cycle: the same reads happen in the
same cycles, only through fewer, wider ports.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from .. import ir
from .bram import block_rams
from ..config import HardwareConfig
from .kernel import read_ports
from .pipeline import FANOUT_LEVEL, schedule
from .program import Program
from .layout import Banking

@dataclass(frozen=True)
class Pack:
    """Banks of one buffer held by one memory: `slots[i]` (a bank's KernelIR slot) lives at
    bits [i * width, (i + 1) * width) of every word. `word_writes`: the memory is written a
    whole word at a time (subword.py: a write of one bank reads the word and writes it back
    with that bank's field replaced), so elements narrower than a block RAM's 9-bit byte share
    bytes (nine int4 weights in a 36-bit word, not four)."""
    slots: tuple[int, ...]
    width: int                   # bits per element
    depth: int                   # words (every bank's)
    name: str                    # the memory's module name
    word_writes: bool = False

    def offset(self, slot: int) -> int:
        return self.slots.index(slot) * self.width


def auto_pack(banks: int, depth: int, width: int, *, word_writes: bool = False) -> int:
    """The group size that needs the fewest block RAMs for `banks` banks (the smallest such),
    never stacking a group deeper than one bank alone: a deeper stack reads through a wider
    multiplexer (the int8 GEMV 128x784 at 4 x 4 packed 4 to a word in 512-word rows: 15 fewer
    block RAMs, 1,450 more LUTs), so packing pays only where a bank leaves a block's width unused."""
    alone, rows = block_rams(depth, 1, width)
    best, best_cost = 1, banks * alone
    for g in range(2, banks + 1):
        cost = ceil(banks / g) * block_rams(depth, g, width, rows, word_writes=word_writes)[0]
        if cost < best_cost:
            best, best_cost = g, cost
    return best


def plan_packs(kernel: ir.KernelIR, program: Program, banking: dict[int, Banking], config: HardwareConfig,
               not_packable: frozenset[int] = frozenset()) -> tuple[Pack, ...]:
    """The packed groups of one kernel's memories (groups of one bank are left out).
    `not_packable`: bank slots read in place by another kernel, or living in another kernel.
    Remembered per kernel, program, banking and model-wide knobs (ir.per_kernel)."""
    return _plan_packs(kernel, program, banking, config.model_wide, not_packable)


@ir.per_kernel
def _plan_packs(kernel: ir.KernelIR, program: Program, banking: dict[int, Banking], config: HardwareConfig,
                not_packable: frozenset[int]) -> tuple[Pack, ...]:
    if config.mem_pack == 1 or (config.mem_pack == "auto" and config.mem_read != "sync"):
        return ()
    decls = {b.slot: b for b in kernel.buffers}
    addresses = _read_addresses(kernel, program)
    late = schedule(kernel, config).late
    packs: list[Pack] = []
    for param, bk in sorted(banking.items()):
        slots = [s for s in bk.banks if s in decls]
        if len(slots) < 2 or bk.parts or len(slots) != len(bk.banks):
            continue
        if any(decls[s].stored or decls[s].rom is not None or s in not_packable for s in slots):
            continue
        if any(len({tuple(addresses[step].get(s, ())) for s in slots}) > 1 for step in addresses):
            continue
        if len({late.get(s, 0) for s in slots}) > 1:          # one port reads them all
            continue
        width, depth = decls[slots[0]].width, decls[slots[0]].size
        narrow = decls[slots[0]].width < decls[slots[0]].dtype.bits
        g, words = _grouping(len(slots), depth, width, config, narrow)
        for j in range(0, len(slots), g):
            group = tuple(slots[j:j + g])
            if len(group) > 1:
                packs.append(Pack(group, width, depth, f"mem_b{param}_w{j // g}", words))
    return tuple(packs)


def group_blocks(banks: int, g: int, depth: int, width: int, max_rows: int | None = None, *,
                 word_writes: bool = False) -> int:
    """Block RAMs of `banks` banks packed `g` to a memory (the last memory may hold fewer)."""
    full, rest = divmod(banks, g)
    blocks = full * block_rams(depth, g, width, max_rows, word_writes=word_writes)[0]
    return blocks + (block_rams(depth, rest, width, max_rows, word_writes=word_writes)[0] if rest else 0)


def _grouping(banks: int, depth: int, width: int, config: HardwareConfig, narrow: bool) -> tuple[int, bool]:
    """(banks per memory, whole-word writes) for a buffer's `banks` banks. Whole-word writes
    (Pack.word_writes) for a `narrow` buffer (stored in fewer bits than its dtype: an int4
    weight; a dtype's own 8, 16 or 32 bits keep a byte-aligned element per enable), where they
    save block RAMs, with block-RAM reads, from FANOUT_LEVEL: a write of one bank lands a cycle
    later there, when the host bus is registered and a kernel started right after the last
    write reads its memories later still (hw/top.py); below, a kernel may read in the cycle the
    write would land."""
    words_ok = narrow and config.mem_read == "sync" and config.fp_pipeline >= FANOUT_LEVEL
    if config.mem_pack == "auto":
        g = auto_pack(banks, depth, width)
        if not words_ok:
            return g, False
        gw = auto_pack(banks, depth, width, word_writes=True)
        if group_blocks(banks, gw, depth, width, word_writes=True) < group_blocks(banks, g, depth, width):
            return gw, True
        return g, False
    g = min(config.mem_pack, banks)
    return g, words_ok and group_blocks(banks, g, depth, width, word_writes=True) < group_blocks(banks, g, depth, width)


def _read_addresses(kernel: ir.KernelIR, program: Program) -> dict[int, dict[int, list[int]]]:
    """Per step: bank slot -> the ids of its distinct load indices, in read-port order."""
    out: dict[int, dict[int, list[int]]] = {s.index: {} for s in program.steps}
    port_of, _ = read_ports(kernel, program)
    for (step, buf, index), port in sorted(port_of.items(), key=lambda kv: kv[1]):
        out[step].setdefault(buf, []).append(index)
    return out

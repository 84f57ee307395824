"""Whole-word writes of a packed memory (packing.Pack.word_writes): elements narrower than a
block RAM's byte share bytes, so a write of one element reads the word and writes it back.

A block RAM's write enables cover 9-bit bytes (ECP5 DP16KD: four in its 36-bit mode). A packed
memory gives every bank its own enable, so each element takes a whole byte: eight int4 weights
with their own enables took two DP16KD, where their 32 bits fit one (measured, Yosys 0.70). So
such a memory is written a word at a time: its write port has one enable, and

  * a write of every bank at once (a copy moving whole words) writes the word as it comes;
  * a write of some banks (the host bus writes one bank a cycle, a copy one element) reads the
    word through read port 0 in the cycle it arrives (the kernel is not running then: the top
    never writes a running kernel's memories) and, a cycle later, writes it back with those
    banks' fields replaced. When the word read is the one written in that same cycle (two writes
    to one word back to back), the word just written is taken instead of the read data.

Every write therefore lands one cycle later than on a memory with per-bank enables; packing.py
asks for whole-word writes only from FANOUT_LEVEL, where the host bus is registered and a
kernel started right after the last write reads its memories later than that (hw/top.py), and
a copy's last write, a cycle before its reader starts, meets a read port that is transparent
to the write port (kernel.py `written_outside`). Cost per memory: the pending write and the
last word written (about two words of flip-flops), an address compare and a multiplexer per bit.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, Value

from .datapath import DATA, DUPLICATE_ATTRIBUTE, registered

_KEEP = {DUPLICATE_ATTRIBUTE: 1}

HIT_GROUP = 36
"""Word bits one copy of the write-hit flag selects: a block RAM's width (one copy there), and
on a wide memory of LUT RAM one per 36 bits (the next paragraph)."""


def read_modify_write(m: Module, name: str, wp, port0, own_addr: Value, *, waddr: Value,
                      fields: list[tuple[Value, Value]], width: int, kernel_reads: Value | None = None) -> None:
    """Drive write port `wp` (one enable) of memory `name` from per-bank writes `fields` ((data,
    enable) of bank i, at bits [i * width, (i + 1) * width)) at address `waddr`, borrowing read
    port `port0` (whose address is `own_addr` otherwise) for the word a partial write reads.
    `kernel_reads`, if given, is a register high exactly while `own_addr` is the kernel's
    (KernelHW._reading_flag): the port is then at `waddr` whenever the kernel leaves it."""
    n = len(fields)
    enables = Cat(*(en for _, en in fields))
    # Every memory's pending write is its own (DUPLICATE_ATTRIBUTE): the host bus gives each group
    # of memories the same address and data, and opt_merge would make one register drive the
    # write address of every block RAM across the die (the w4a8 GEMV 8 x 56: 9.1 ns of routing
    # from the merged address register, 89.4 MHz)
    valid = Signal(name=f"{name}_wr_valid", attrs=_KEEP)        # a write lands this cycle
    addr = Signal.like(waddr, name=f"{name}_wr_addr", reset_less=True, attrs=_KEEP | DATA)
    mask = Signal(n, name=f"{name}_wr_mask", reset_less=True, attrs=_KEEP | DATA)
    data = Signal(n * width, name=f"{name}_wr_data", reset_less=True, attrs=_KEEP | DATA)
    m.d.sync += [valid.eq(enables.any()), addr.eq(waddr), mask.eq(enables), data.eq(Cat(*(d for d, _ in fields)))]
    if kernel_reads is not None:
        # A partial write never arrives while the kernel reads (above), so the port can wait at
        # the write address whenever the kernel leaves it, the multiplexer selected by a
        # register. Selected by `partial`, the address came through the host ports' write
        # enables and their any/all tree (the fine-tuned KWS network: a `host_free` copy -> the
        # enables -> the address of a 320-bit word in LUT RAM, 13.4 ns, its critical path).
        m.d.comb += port0.addr.eq(Mux(kernel_reads, own_addr, waddr))
    else:
        partial = enables.any() & ~enables.all()
        m.d.comb += port0.addr.eq(Mux(partial, waddr, own_addr))
    # the word written last cycle, for a read of that word in the same cycle (undefined data).
    # Whether the word landing now is the one that landed last cycle is known a cycle ahead
    # (the pending write's address against the one arriving), so it is a register of its own:
    # computed once, where a compare of the two addresses inside `base` was copied by ABC into
    # every bit's multiplexer (the w4a6 GEMV 256x256 at 4 x 64: ~340 LUTs a memory, 29
    # memories; one LUT a bit with it registered)
    # One copy of it per HIT_GROUP bits: it selects every bit of the word, and a wide memory in
    # LUT RAM spreads over the die (the fine-tuned KWS network's 320-bit, 4-word weight memory:
    # 17.3 ns of routing from the one flag, the critical path of one placement in three)
    hit_next = valid & enables.any() & (addr == waddr)
    last_word = Signal(n * width, name=f"{name}_wr_last_word", reset_less=True, attrs=DATA)
    merged = Signal(n * width, name=f"{name}_wr_word")
    hits = [registered(m, hit_next, f"{name}_wr_hit{g // HIT_GROUP}", duplicate=True)
            for g in range(0, n * width, HIT_GROUP)]
    base = Cat(*(Mux(hit, last_word[g * HIT_GROUP:(g + 1) * HIT_GROUP], port0.data[g * HIT_GROUP:(g + 1) * HIT_GROUP])
                 for g, hit in enumerate(hits)))
    m.d.comb += merged.eq(Cat(*(Mux(mask[i], data[i * width:(i + 1) * width], base[i * width:(i + 1) * width])
                                for i in range(n))))
    m.d.comb += [wp.en.eq(valid), wp.addr.eq(addr), wp.data.eq(merged)]
    m.d.sync += last_word.eq(merged)

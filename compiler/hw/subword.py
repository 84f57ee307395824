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

From FANOUT_LEVEL the kernel's addresses are registered, and so is a flag that says when the
kernel reads (KernelHW._reading_flag): the read port waits at the write address whenever the
kernel is not reading, so no write enable lies on the way to its address. In block RAM, with a
`target_mhz` the unregistered path misses (timing_model.word_read_registered), the word read is
also registered (the block's own output register, compiler/pnr/bram_registers.py) and merged a
cycle later: the write lands two cycles after it arrives, still before a kernel
started in the cycle it arrived reads (its first address reaches the memory three cycles after
its start), and a word written in either of the two cycles before is forwarded from the words
last written. Cost: a second pending write, a second word and a third input per multiplexer.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Module, Mux, Signal, Value

from .datapath import DATA, DUPLICATE_ATTRIBUTE, registered

_KEEP = {DUPLICATE_ATTRIBUTE: 1}

HIT_GROUP = 36
"""Word bits one copy of the write-hit flag selects: a block RAM's width (one copy there), and
on a wide memory of LUT RAM one per 36 bits (the next paragraph)."""


def read_modify_write(m: Module, name: str, wp, port0, own_addr: Value, *, waddr: Value,
                      fields: list[tuple[Value, Value]], width: int, kernel_reads: Value | None = None,
                      registered_read: bool = False) -> None:
    """Drive write port `wp` (one enable) of memory `name` from per-bank writes `fields` ((data,
    enable) of bank i, at bits [i * width, (i + 1) * width)) at address `waddr`, borrowing read
    port `port0` (whose address is `own_addr` otherwise) for the word a partial write reads.
    `kernel_reads`, if given, is a register high exactly while `own_addr` is the kernel's
    (KernelHW._reading_flag): the port is then at `waddr` whenever the kernel leaves it.
    `registered_read` (a block RAM, with `kernel_reads`): the word read is registered before the
    merge and the write lands two cycles after it arrives (the module docstring)."""
    n = len(fields)
    enables = Cat(*(en for _, en in fields))
    # Every memory's pending write is its own (DUPLICATE_ATTRIBUTE): the host bus gives each group
    # of memories the same address and data, and opt_merge would make one register drive the
    # write address of every block RAM across the die (the w4a8 GEMV 8 x 56: 9.1 ns of routing
    # from the merged address register, 89.4 MHz)
    stages = 2 if registered_read else 1
    pending = [_pending(f"{name}_wr" if s == 0 else f"{name}_wr{s + 1}", n, width, waddr) for s in range(stages)]
    first, last = pending[0], pending[-1]
    m.d.sync += [first.valid.eq(enables.any()), first.addr.eq(waddr), first.mask.eq(enables),
                 first.data.eq(Cat(*(d for d, _ in fields)))]
    for a, b in zip(pending, pending[1:]):
        m.d.sync += [b.valid.eq(a.valid), b.addr.eq(a.addr), b.mask.eq(a.mask), b.data.eq(a.data)]
    if kernel_reads is not None:
        # A partial write never arrives while the kernel reads (module docstring), so the port can wait at
        # the write address whenever the kernel leaves it, the multiplexer selected by a
        # register. Selected by `partial`, the address came through the host ports' write
        # enables and their any/all tree (the fine-tuned KWS network: a `host_free` copy -> the
        # enables -> the address of a 320-bit word in LUT RAM, 13.4 ns, its critical path).
        m.d.comb += port0.addr.eq(Mux(kernel_reads, own_addr, waddr))
    else:
        partial = enables.any() & ~enables.all()
        m.d.comb += port0.addr.eq(Mux(partial, waddr, own_addr))
    # the words written in the last `stages` cycles, for a read of one of them made before it
    # landed (undefined data, or the word before). Whether the word landing now is one of those
    # is known a cycle ahead (the pending writes' addresses), so each such flag is a register of
    # its own: computed once, where a compare of the two addresses inside `base` was copied by
    # ABC into every bit's multiplexer (the w4a6 GEMV 256x256 at 4 x 64: ~340 LUTs a memory, 29
    # memories; one LUT a bit with it registered)
    # One copy of each per HIT_GROUP bits: it selects every bit of the word, and a wide memory in
    # LUT RAM spreads over the die (the fine-tuned KWS network's 320-bit, 4-word weight memory:
    # 17.3 ns of routing from the one flag, the critical path of one placement in three)
    merged = Signal(n * width, name=f"{name}_wr_word")
    if registered_read:
        # a word read, registered: the block RAM's own output register (compiler/pnr/
        # bram_registers.py) where nothing else reads the port; without it the read data (5.8
        # ns from the clock) went through the merge into the same block's write data (the w4a8
        # GEMV at 12 x 56, target_mhz 200: 11.4 ns, its critical path)
        word = registered(m, port0.data, f"{name}_wr_read", reset_less=True)
        before = Signal.like(waddr, name=f"{name}_wr3_addr", reset_less=True, attrs=_KEEP | DATA)
        before_valid = Signal(name=f"{name}_wr3_valid", attrs=_KEEP)
        m.d.sync += [before.eq(last.addr), before_valid.eq(last.valid)]
        # in the cycle before the merge: the write landing next (`first`) against the one
        # landing now (`last`) and the one that landed a cycle ago (`before`)
        newer = first.valid & last.valid & (first.addr == last.addr)
        older = first.valid & before_valid & (first.addr == before)
        candidates = [(newer, "hit"), (older, "hit_old")]
    else:
        word = port0.data
        candidates = [(first.valid & enables.any() & (first.addr == waddr), "hit")]
    lasts = []
    previous: Value = merged
    for k, (hit_next, what) in enumerate(candidates):
        written = Signal(n * width, name=f"{name}_wr_last_word" + (f"{k + 1}" if k else ""),
                         reset_less=True, attrs=DATA)
        m.d.sync += written.eq(previous)
        previous = written
        hits = [registered(m, hit_next, f"{name}_wr_{what}{g // HIT_GROUP}", duplicate=True)
                for g in range(0, n * width, HIT_GROUP)]
        lasts.append((hits, written))
    groups = []
    for g in range(0, n * width, HIT_GROUP):
        bits = slice(g, g + HIT_GROUP)
        chosen = word[bits]
        for hits, written in reversed(lasts):             # the newest last: it wins
            chosen = Mux(hits[g // HIT_GROUP], written[bits], chosen)
        groups.append(chosen)
    base = Cat(*groups)
    m.d.comb += merged.eq(Cat(*(Mux(last.mask[i], last.data[i * width:(i + 1) * width], base[i * width:(i + 1) * width])
                                for i in range(n))))
    m.d.comb += [wp.en.eq(last.valid), wp.addr.eq(last.addr), wp.data.eq(merged)]


@dataclass(frozen=True)
class _Pending:
    """A write on its way to the memory: whether there is one, its address, banks and fields."""
    valid: Signal
    addr: Signal
    mask: Signal
    data: Signal


def _pending(prefix: str, n: int, width: int, waddr: Value) -> _Pending:
    return _Pending(Signal(name=f"{prefix}_valid", attrs=_KEEP),
                    Signal.like(waddr, name=f"{prefix}_addr", reset_less=True, attrs=_KEEP | DATA),
                    Signal(n, name=f"{prefix}_mask", reset_less=True, attrs=_KEEP | DATA),
                    Signal(n * width, name=f"{prefix}_data", reset_less=True, attrs=_KEEP | DATA))

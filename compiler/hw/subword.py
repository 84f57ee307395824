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
    to one word back to back), the fields the earlier write set are taken from it instead of
    the read data.

The fields that replace the word read are an override, registered the cycle before the merge:
the write's own fields, then those of the earlier writes its read came too early to see (each
with the fields it took itself, newest first). So the merge is one multiplexer a bit between
the word read and a register, into the write data.

Every write therefore lands one cycle later than on a memory with per-bank enables; packing.py
asks for whole-word writes only from FANOUT_LEVEL, where the host bus is registered and a
kernel started right after the last write reads its memories later than that (hw/top.py), and
a copy's last write, a cycle before its reader starts, meets a read port that is transparent
to the write port (kernel.py `written_outside`). Cost per memory: the pending write's address
and the override (about a word of flip-flops), an address compare and two multiplexers per bit.

From FANOUT_LEVEL the kernel's addresses are registered, and so is a flag that says when the
kernel reads (KernelHW._reading_flag): the read port waits at the write address whenever the
kernel is not reading, so no write enable lies on the way to its address. In block RAM, with a
`target_mhz` the unregistered path misses (timing_model.word_read_registered), the word read is
also registered (the block's own output register, compiler/pnr/bram_registers.py) and merged a
cycle later: the write lands two cycles after it arrives, still before a kernel
started in the cycle it arrived reads (its first address reaches the memory three cycles after
its start), and the fields set by a write merged in either of the two cycles before are
forwarded from those writes' overrides. Cost: a second pending address, the write's fields
held a cycle, the earlier override and a third input per bit of the override's multiplexer.

Shared: the memories the host bus alone writes (weights) are written one bank a cycle, all
from copies of the same address and data registers, so at most one of them has a write in any
cycle. Block RAMs of one geometry (banks, width, depth) therefore share one read-modify-write,
HOST_GROUP block RAMs a group (share_groups; Design.write_groups picks the memories): the
pending addresses, the override and the write's held mask and data are the group's, each
memory keeps a flag per stage saying the write is its own (a third for the write two before),
its word read (always registered: the block's output register costs no flip-flop), its merge
multiplexers and its own register of which fields the override replaces, made from its own
stage flags (so no logic of the group drives every member's merge). A write takes fields from
an earlier one only if both went to the same memory: the address compare is registered as the
write arrives, the member compare a cycle later from a register per member (its term: the write
is its own, and so was the earlier one) made as the write arrives. The w4a8 GEMV
128x784 at 12 x 56, `target_mhz: 120`: 75 packed block RAMs, 54,341 -> 43,479 flip-flops, 37,165 -> 31,404 LUTs. A host-only memory alone holds
the bus's data once, not once per bank.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce
from typing import Callable

from amaranth.hdl import Cat, Module, Mux, Signal, Value

from .datapath import DATA, DUPLICATE_ATTRIBUTE, registered

_KEEP = {DUPLICATE_ATTRIBUTE: 1}

HIT_GROUP = 36
"""Word bits one copy of the write-hit flag selects: a block RAM's width (one copy there), and
on a wide memory of LUT RAM one per 36 bits (the next paragraph)."""


@dataclass(frozen=True)
class WordMemory:
    """One memory written a word at a time: its write port `wp` (one enable), its read port 0
    `port0` (whose address is `own_addr` when the kernel reads), the per-bank write `enables`
    (bank i at bits [i * width, (i + 1) * width)) and, if given, `kernel_reads`: a register high
    exactly while `own_addr` is the kernel's (KernelHW._reading_flag), the port then at the
    write address whenever the kernel leaves it."""
    name: str
    wp: object
    port0: object
    own_addr: Value
    enables: tuple[Value, ...]
    kernel_reads: Value | None = None


def read_modify_write(m: Module, name: str, members: list[WordMemory], *, waddr: Value, data: list[Value] | Value,
                      width: int, registered_read: bool = False) -> None:
    """Drive the write ports of `members` (memories of one geometry) from their per-bank writes
    at address `waddr`, each borrowing its read port 0 for the word a partial write reads.
    `data`: bank i's write data, or one value every bank is written (the host bus's). Several
    members share one read-modify-write (pending addresses, override, held fields): the host
    bus writes one bank a cycle, so at most one member has a write in any cycle, and every
    member sees the same `waddr` and `data` (module docstring, "Shared"); their writes are then
    told apart only by which member each went to. `registered_read` (block RAM, with
    `kernel_reads`; always with several members): the word read is registered before the
    merge and the write lands two cycles after it arrives (the module docstring)."""
    n, shared = len(members[0].enables), len(members) > 1
    assert not shared or (registered_read and isinstance(data, Value))
    first_data = data if isinstance(data, Value) else None
    enables = [Cat(*mem.enables) for mem in members]
    anys = [en.any() for en in enables]
    # Every memory's pending write is its own (DUPLICATE_ATTRIBUTE): the host bus gives each group
    # of memories the same address and data, and opt_merge would make one register drive the
    # write address of every block RAM across the die (the w4a8 GEMV 8 x 56: 9.1 ns of routing
    # from the merged address register, 89.4 MHz). A shared one drives its group's memories
    # (at most HOST_GROUP block RAMs: share_groups), as the host bus's address copy does.
    stages = 2 if registered_read else 1
    pending = [_address(f"{name}_wr" if s == 0 else f"{name}_wr{s + 1}", waddr) for s in range(stages)]
    first, last = pending[0], pending[-1]
    m.d.sync += first.eq(waddr)
    for a, b in zip(pending, pending[1:]):
        m.d.sync += b.eq(a)
    # whether each stage's write went to a member: one flag per member and stage (with several
    # members a third stage, for the write two before the one merged next)
    valid = [[Signal(name=f"{mem.name}_wr{'' if s == 0 else s + 1}_valid", attrs=_KEEP)
              for s in range(stages + (1 if shared else 0))] for mem in members]
    for flags, any_ in zip(valid, anys):
        m.d.sync += flags[0].eq(any_)
        m.d.sync += [b.eq(a) for a, b in zip(flags, flags[1:])]
    for mem, en, any_ in zip(members, enables, anys):
        if mem.kernel_reads is not None:
            # A partial write never arrives while the kernel reads (module docstring), so the port can wait at
            # the write address whenever the kernel leaves it, the multiplexer selected by a
            # register. Selected by `partial`, the address came through the host ports' write
            # enables and their any/all tree (the fine-tuned KWS network: a `host_free` copy -> the
            # enables -> the address of a 320-bit word in LUT RAM, 13.4 ns, its critical path).
            m.d.comb += mem.port0.addr.eq(Mux(mem.kernel_reads, mem.own_addr, waddr))
        else:
            m.d.comb += mem.port0.addr.eq(Mux(any_ & ~en.all(), waddr, mem.own_addr))
    # The merge takes each field from the word read or from an override, a register: the
    # write's own fields and those of the writes its read came too early to see (the words
    # merged in the last `stages` cycles, at its address), newest first. So the write data is
    # one multiplexer from registers and the word read; computed in the merge, from those
    # writes' merged words, it went through three (the w4a8 GEMV at 12 x 56, target_mhz 200:
    # a hit flag -> the merge -> a block RAM's write data, 10.0 ns, 8.6 of it routing).
    use = Signal(n, name=f"{name}_wr_use")
    over = Signal(n * width, name=f"{name}_wr_over", reset_less=True, attrs=DATA)
    mask_now = enables[0]
    for en in enables[1:]:
        mask_now = mask_now | en
    data_now = first_data if first_data is not None else Cat(*data)
    if registered_read:
        # the override is made the cycle before the merge, when `first` is the write merged
        # next (its banks and fields held that cycle); the writes it came too early to see are
        # merged now (`last`) and were a cycle ago. Data one value for every bank is held once
        # (a host write's banks all carry the bus's data).
        coming_mask = Signal(n, name=f"{name}_wr_mask", reset_less=True, attrs=_KEEP | DATA)
        coming_data = Signal(len(data_now), name=f"{name}_wr_data", reset_less=True, attrs=_KEEP | DATA)
        m.d.sync += [coming_mask.eq(mask_now), coming_data.eq(data_now)]
        earlier = [(first, "hit", use, over),
                   (last, "hit_old", registered(m, use, f"{name}_wr_use_old"),
                    registered(m, over, f"{name}_wr_over_old", reset_less=True))]
    else:
        # made as the write arrives; the write it came too early to see is merged now (`first`)
        coming_mask, coming_data = mask_now, data_now
        earlier = [(first, "hit", use, over)]

    def field(i: int) -> Value:
        return coming_data if first_data is not None else coming_data[i * width:(i + 1) * width]
    # whether the write merged next is at a given earlier write's address, one flag per
    # HIT_GROUP bits: it selects every field of the word, and a wide memory in LUT RAM spreads
    # over the die (the fine-tuned KWS network's 320-bit, 4-word weight memory: 17.3 ns of
    # routing from one flag, the critical path of one placement in three). With a registered
    # read it is known a cycle ahead (as the write arrives), so each flag is a register. Whether
    # a write arrives is left out (the any of every bank's enable, a tree of LUTs on the way): a
    # flag without one makes an override that no write uses (its merge is not written, and a
    # later write takes it only from a valid pending write). Shared, the address compare is
    # that register and the member is compared a cycle later, from a register per member made
    # as the write arrives: the write merged next went to the same member as the earlier one.
    groups = range(0, n * width, HIT_GROUP)
    hits, same_address = [], []
    for s, (pend, what, _, _) in enumerate(earlier):
        if not shared:
            same = valid[0][s] & (pend == waddr)
            hits.append([registered(m, same, f"{name}_wr_{what}{g // HIT_GROUP}", duplicate=True) for g in groups]
                        if registered_read else [same] * len(groups))
            continue
        # Each member's term of the compare is a register of its own, made as the write arrives
        # (its any-enable and stage flag then are its stage flags now), so the OR over the
        # members starts from registers the placer can keep by the override, not from the stage
        # flags, which sit by their block RAMs across the die (the KWS shape at w4a6,
        # target_mhz 92, seeds 1 and 3: a member's write-valid flag -> four LUTs of the compare
        # -> the override, 11.6 and 13.2 ns, 9.9 and 12.0 of it routing).
        terms = [registered(m, any_ & flags[s], f"{mem.name}_wr_{what}_same", duplicate=True)
                 for mem, flags, any_ in zip(members, valid, anys)]
        member = Signal(name=f"{name}_wr_{what}_member")
        m.d.comb += member.eq(Cat(*terms).any())
        same_address.append([registered(m, pend == waddr, f"{name}_wr_{what}{g // HIT_GROUP}", duplicate=True)
                             for g in groups])
        hits.append([hit & member for hit in same_address[-1]])

    def takes(stage_hits) -> list[list[Value]]:
        """Per field, per earlier write (in `earlier`'s order): whether the override takes the
        field from that write, given `stage_hits` (per earlier write, a flag per HIT_GROUP bits:
        it went to the word, and the memory, that the write merged next goes to)."""
        return [[hit[i * width // HIT_GROUP] & e_use[i] for hit, (_, _, e_use, _) in zip(stage_hits, earlier)]
                for i in range(n)]

    def selects(stage_hits) -> Value:
        """Which fields the override replaces: the write's own, and those `takes` finds."""
        return Cat(*(reduce(operator.or_, row, coming_mask[i]) for i, row in enumerate(takes(stage_hits))))
    over_next = []
    for i, row in enumerate(takes(hits)):
        bits = slice(i * width, (i + 1) * width)
        value = field(i)
        for h, (_, _, _, e_over) in reversed(list(zip(row, earlier))):      # the newest last: it wins
            value = Mux(h, e_over[bits], value)
        over_next.append(Mux(coming_mask[i], field(i), value))
    m.d.sync += [use.eq(selects(hits)), over.eq(Cat(*over_next))]
    for mem, flags in zip(members, valid):
        # Shared, each member selects its fields with a `use` of its own (a flip-flop a field):
        # the group's drove every member's merge across the die (the KWS shape at target 243,
        # target_mhz 100, seed 2: a group's `use` -> another member's block RAM, 11.1 ns, 10.1
        # of it routing). Each is made from the member's own stage flags, not from the group's
        # member compare (an OR over every member's flags, then the group's `use` logic, then a
        # route to every member: seed 3, 11.0 ns, routing 9.3; 12.3 ns at another placement):
        # the member merged next is the one whose write came in, so for it the two agree, and
        # another member's merge writes nothing. The override, a word of data, stays the group's.
        own_use = use
        if shared:
            own_use = Signal(n, name=f"{mem.name}_wr_use", attrs=_KEEP)
            m.d.sync += own_use.eq(selects([[same & flags[0] & flags[s + 1] for same in stage]
                                            for s, stage in enumerate(same_address)]))
        # a word read, registered: the block RAM's own output register (compiler/pnr/
        # bram_registers.py) where nothing else reads the port; without it the read data (5.6
        # ns from the clock) went through the merge into the same block's write data (the w4a8
        # GEMV at 12 x 56, target_mhz 200: 11.4 ns, its critical path)
        word = registered(m, mem.port0.data, f"{mem.name}_wr_read", reset_less=True) if registered_read \
            else mem.port0.data
        merged = Signal(n * width, name=f"{mem.name}_wr_word")
        m.d.comb += merged.eq(Cat(*(Mux(own_use[i], over[i * width:(i + 1) * width], word[i * width:(i + 1) * width])
                                    for i in range(n))))
        m.d.comb += [mem.wp.en.eq(flags[stages - 1]), mem.wp.addr.eq(last), mem.wp.data.eq(merged)]


def host_alone(banks, host_written, copied) -> bool:
    """Whether the host bus alone writes `banks` (slots, or places, of one packed memory): it
    writes each and no copy does. Such a memory holds the bus's data once, and its block RAMs
    may share a read-modify-write (module docstring, "Shared"): the kernel and the top module
    ask the same question of the same sets, each in its own coordinates."""
    return all(b in host_written and b not in copied for b in banks)


def share_groups(packs: list, members: Callable[[int, int, int], int]) -> list[tuple]:
    """Packed memories (packing.Pack, written a word at a time by the host bus alone) in groups
    that share one read-modify-write: those of one geometry, in order, at most
    `members(banks, width, depth)` a group (Design.write_groups: HOST_GROUP block RAMs, as many
    as share a copy of the bus's address, fewer where the delay model says the shared selects
    miss the target clock). Groups of one are left out."""
    by_shape: dict[tuple, list] = {}
    for p in packs:
        by_shape.setdefault((len(p.slots), p.width, p.depth), []).append(p)
    groups = []
    for shape, same in by_shape.items():
        per = members(*shape)
        groups += [tuple(same[j:j + per]) for j in range(0, len(same), per) if len(same[j:j + per]) > 1]
    return groups


def _address(name: str, waddr: Value) -> Signal:
    """A pending write's address register (its banks and fields are in the override by then;
    whether there is one, and to which member, the stage's flags)."""
    return Signal.like(waddr, name=f"{name}_addr", reset_less=True, attrs=_KEEP | DATA)

"""Block-RAM geometry: how many 18 Kbit blocks a memory takes, and which of its last words
are worth moving to LUT RAM (mem_tail). Pure arithmetic, imported by packing.py (mem_pack),
the kernel hardware (hw/kernel.py) and the area estimator (dse/estimate.py)."""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

# Block-RAM geometry mem_pack="auto" sizes groups for: an 18 Kbit block (ECP5 DP16KD, Xilinx
# RAMB18) as (port width in bits, words); 36 bits in pseudo-dual-port mode (one read, one
# write port, which is what a packed memory uses). iCE40's 4 Kbit blocks are 16 x 256 at their
# widest: set mem_pack explicitly there.
BRAM_MODES: tuple[tuple[int, int], ...] = ((1, 16384), (2, 8192), (4, 4096), (9, 2048), (18, 1024), (36, 512))

HOST_GROUP = 8
"""Host ports (weighted by their block RAMs) sharing one registered copy of the bus's address,
write data and idle flag, from FANOUT_LEVEL (hw/top.py TopHW.elaborate); here, beside the
geometry, because the delay model counts that copy's loads too (timing_model.write_hit_ns)."""


def block_rams(depth: int, elements: int, width: int, max_rows: int | None = None, *,
               word_writes: bool = False) -> tuple[int, int]:
    """(block RAMs, rows) of one memory of `depth` words, each `elements` elements of `width`
    bits, in its best 18 Kbit mode: rows of blocks stacked in depth (read through a
    multiplexer), each row as many blocks side by side as the word needs; only modes of at most
    `max_rows` rows when given. Several elements of a word each have their own write enable,
    and a block's enables cover whole 9-bit bytes: an element then takes whole bytes (Yosys
    leaves 4 bits of a 36-bit block unused for four int8 elements; measured: 256 int8 banks of
    392 words packed 4 or 256 to a word both take 64 blocks; eight int4 elements with their
    own enables took two blocks, not one) and never straddles two blocks. `word_writes`: the
    word is written whole (packing.py's read-modify-write), so its elements sit side by side
    (nine int4 elements in a 36-bit word)."""
    options = []
    # an element sharing a block's word with others takes whole bytes (its own enable)
    shared = enable_width(width) if elements > 1 and not word_writes else width
    for bits, words in BRAM_MODES:
        rows = ceil(depth / words)
        if max_rows is not None and rows > max_rows:
            continue
        if word_writes:
            across = ceil(elements * width / bits)
        else:
            across = ceil(elements / (bits // shared)) if shared <= bits else elements * ceil(width / bits)
        options.append((rows * across, rows))
    return min(options)


def enable_width(width: int) -> int:
    """Bits an element with its own write enable takes in a block RAM word: whole 9-bit bytes."""
    return 9 * ceil(width / 9)


def column_depth(bits: int) -> int:
    """Words of `bits` one block RAM holds in one column (wider words: several such columns side
    by side, no multiplexer): the deepest mode up to 18 bits wide that fits the word, 1024 words
    past that (ECP5 DP16KD: 16384x1, 8192x2, 4096x4, 2048x9, 1024x18). iCE40 (4 Kbit) and Xilinx
    (18/36 Kbit) blocks are shallower or deeper; splitting at this depth is still a whole number
    of their blocks or close to it."""
    return next((words for width, words in BRAM_MODES if bits <= width <= 18), 1024)


BLOCK_BITS = 18432            # an 18 Kbit block with its parity bits


def lut_tail(depth: int, width: int) -> int:
    """Words at the end of a memory of `depth` words of `width` bits that mem_tail="lut" moves
    to LUT RAM (0: none). A memory is stacked in rows of blocks; a last row holding a few
    words costs whole blocks, while the same bits in LUT RAM cost about one LUT4 per 16
    (ECP5's 16x4 distributed RAM) plus a read multiplexer. Over the block modes (rows of
    `words` words), the tail depth % words whose removal leaves the fewest blocks, when it
    saves some and holds at most 1/8 of the bits of the blocks it saves (the 3,136-word fp32
    bank: 64 words, 2 Kbit for one block; never 2,048 int8 words, 16 Kbit, for one)."""
    blocks, _ = block_rams(depth, 1, width)
    options = []
    for _, words in BRAM_MODES:
        tail = depth % words
        if depth > words and tail:
            saved = blocks - block_rams(depth - tail, 1, width)[0]
            if saved > 0 and 8 * tail * width <= saved * BLOCK_BITS:
                options.append((-saved, tail))
    return min(options, default=(0, 0))[1]


def memory_tail(config, depth: int, width: int, written: bool) -> int:
    """The LUT-RAM tail a memory gets under HardwareConfig `config` (what the kernel builds and
    the area estimator counts): lut_tail with mem_tail="lut", block-RAM reads and a memory
    its kernel never writes; else 0."""
    if config.mem_tail != "lut" or config.mem_read != "sync" or written:
        return 0
    return lut_tail(depth, width)


# Where Yosys puts a memory on ECP5. synth_ecp5's memory_libmap prices every way to build a
# memory and takes the cheapest: a block RAM costs 128, a LUT-RAM primitive (TRELLIS_DPR16X4, 16
# words x 4 bits, one read and one write port) 4, each bit of a read multiplexer over stacked
# rows 0.5, each write enable decoded over rows 0.5 (Yosys 0.70, techlibs/lattice brams_16kd.txt
# and lutrams.txt, passes/memory/memory_libmap.cc). Emulation is priced too (2 a unit), but the
# memories this compiler builds score the same on both sides: a `no_rw_check` port (collisions
# undefined) 1 a read port for either, a port transparent to the write port 4 for either.
# Bits alone do not decide it: a 36 x 32 memory (1,152 bits) is a block RAM (128 against 24
# primitives, a 3-row multiplexer and 3 rows' enables, 129.5); 32 x 32 is LUT RAM (64 + 16 + 1).
# The rule replaces a threshold of 1,536 bits that put AD08's 140 memories of 36 x 32 in LUT RAM
# where Yosys built 140 block RAMs. Checked against Yosys on 819 shapes (docs/estimator.md) and
# in tests/test_bram.py.
LIBMAP_BLOCK, LIBMAP_LUTRAM, LIBMAP_MUX, LIBMAP_DEMUX = 128, 4, 0.5, 0.5
LUTRAM_WORDS, LUTRAM_BITS = 16, 4


@dataclass(frozen=True)
class MemoryPlace:
    """How Yosys builds a memory: `kind` "bram" or "lutram", `cells` its block RAMs or LUT-RAM
    primitives (every read port's copy counted: either primitive reads at one port), `rows`
    the cells stacked in depth (each bit of a read port multiplexes that many)."""
    kind: str
    cells: int
    rows: int


def _padded(width: int, enables: int, byte: int) -> int:
    """Bits of a word whose `enables` equal fields each start at a multiple of `byte`."""
    field, bits = width // enables, 0
    for _ in range(enables):
        bits = ceil((bits + field) / byte) * byte
    return bits


def _libmap_option(depth: int, width: int, ports: int, enables: int, words: int, unit: int,
                   byte: int, cost: float) -> tuple[float, int, int]:
    rows = ceil(depth / words)
    cells = ceil(rows * _padded(width, enables, min(byte, unit)) / unit)
    price = cost * cells * ports + LIBMAP_MUX * ports * (rows - 1) * width
    price += LIBMAP_DEMUX * rows * enables if rows > 1 else 0
    return price, cells * ports, rows


BLOCK_STYLE = {"ram_style": "block"}
"""A memory's attribute that makes memory_libmap build it in block RAM whatever its price
(Design.block_reads: a LUT RAM whose read would not fit the target clock)."""


def ecp5_memory(depth: int, width: int, ports: int = 1, enables: int = 1, *, block: bool = False) -> MemoryPlace:
    """Where synth_ecp5 puts a writable memory of `depth` words of `width` bits read at `ports`
    clocked ports, written at one port with `enables` equal write-enable fields (a packed
    memory's banks): the cheapest by memory_libmap's prices (above), or with `block` (BLOCK_STYLE)
    its block RAMs. Not modelled: its third option, flip-flops and multiplexers at 1 a bit, which
    by the same prices wins only for the shallowest memories read at several ports (2 words of
    23 bits read at 2 ports: 46 against 48 + 4); they are counted as LUT RAM here."""
    lutram = _libmap_option(depth, width, ports, enables, LUTRAM_WORDS, LUTRAM_BITS, LUTRAM_BITS, LIBMAP_LUTRAM)
    # DP16KD at 1 to 18 bits (14 address bits less one per mode), PDPW16KD at 9 to 36: the
    # 36-bit write port writes narrower fields through its 9-bit byte enables
    blocks = [_libmap_option(depth, width, ports, enables, words, unit, 9, LIBMAP_BLOCK)
              for unit, words in BRAM_MODES]
    block_option = min(blocks)
    if block or block_option[0] < lutram[0]:
        return MemoryPlace("bram", block_option[1], block_option[2])
    return MemoryPlace("lutram", lutram[1], lutram[2])

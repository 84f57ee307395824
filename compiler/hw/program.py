"""The step program a kernel's controller executes: the loop tree cut into one-cycle steps.

A *step* is a group of stores that execute together in one clock cycle. Consecutive stores
of a loop body share a step unless one of them reads what an earlier one writes (an
accumulator or a buffer), or two write the same accumulator or buffer (one write port per
memory). Every step runs once per iteration of its enclosing loops, so the kernel takes

    cycles(kernel) = sum over steps of the product of the bounds of its enclosing loops

(plus one cycle for `done`, see kernel.py). For the sequential GEMV the steps are
`acc = 0`, `acc += W[i,k] * x[k]` and `y[i] = acc`: M * (K + 2).

After a step the controller moves on like an odometer: to the next item of the same body,
else it advances the innermost enclosing loop's counter and restarts its body, else the
counter wraps to 0 and the loop is finished, and so on outward. Counters return to 0 when
their loop ends, so entering a loop needs no reset.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from .. import ir


@dataclass(frozen=True, eq=False)
class Step:
    index: int
    stores: tuple[ir.Store, ...]
    loops: tuple[ir.Loop, ...]          # enclosing loops, outermost first


@dataclass(frozen=True)
class Advance:
    """If loop `loop`'s counter is below its last value: increment it and go to `target`."""
    loop: ir.Loop
    target: int


@dataclass(frozen=True)
class Transition:
    """What follows a step: try each Advance in order; the first that applies wins. If none
    does, every loop in the chain wraps to 0 and control goes to `fallthrough` (None: the
    kernel is done)."""
    advances: tuple[Advance, ...]
    fallthrough: int | None


@dataclass(frozen=True)
class Program:
    steps: tuple[Step, ...]
    transitions: tuple[Transition, ...]
    first: int | None                  # None: a kernel without stores

    @property
    def cycles(self) -> int:
        """Steps executed by one run of the kernel."""
        return sum(prod(l.bound for l in s.loops) for s in self.steps)


def _reads(value_roots) -> set[tuple[str, int]]:
    out = set()
    for v in ir.toposort(value_roots):
        if isinstance(v, ir.AccLoad):
            out.add(("acc", v.acc))
        elif isinstance(v, ir.Load):
            out.add(("buf", v.buf))
    return out


def _target(s: ir.Store) -> tuple[str, int]:
    return ("acc", s.acc) if isinstance(s, ir.AccStore) else ("buf", s.buf)


def split_into_steps(stores: list[ir.Store]) -> list[list[ir.Store]]:
    """Group a run of consecutive stores into as few one-cycle steps as is correct."""
    groups: list[list[ir.Store]] = []
    written: set[tuple[str, int]] = set()
    for s in stores:
        if groups and _target(s) not in written and not (_reads(ir.store_operands(s)) & written):
            groups[-1].append(s)
        else:
            groups.append([s])
            written = set()
        written.add(_target(s))
    return groups


@ir.per_kernel
def build_program(kernel: ir.KernelIR) -> Program:
    steps: list[Step] = []

    # Items of a body: ("step", index) or ("loop", loop, items)
    def items_of(body, enclosing) -> list:
        items, run = [], []

        def flush():
            for group in split_into_steps(run):
                steps.append(Step(len(steps), tuple(group), enclosing))
                items.append(("step", steps[-1].index))
            run.clear()
        for s in body:
            if isinstance(s, ir.Loop):
                flush()
                items.append(("loop", s, items_of(s.body, enclosing + (s,))))
            else:
                run.append(s)
        flush()
        return items

    root = items_of(kernel.body, ())

    def first_step(item) -> int:
        return item[1] if item[0] == "step" else first_step(item[2][0])

    transitions: dict[int, Transition] = {}

    def link(items, chain: list[tuple[ir.Loop, list]]):
        """`chain`: the enclosing loops (innermost last) with their item lists."""
        for pos, item in enumerate(items):
            nxt = first_step(items[pos + 1]) if pos + 1 < len(items) else None
            if item[0] == "loop":
                link(item[2], chain + [(item[1], item[2])])
                continue
            if nxt is not None:
                transitions[item[1]] = Transition((), nxt)
                continue
            advances, fall = [], None
            for loop, body in reversed(chain):
                advances.append(Advance(loop, first_step(body[0])))
                follow = loop_follow[id(loop)]
                if follow != "up":
                    fall = follow
                    break
            transitions[item[1]] = Transition(tuple(advances), fall)

    # where control goes when a loop finishes: a step, None (kernel done) or "up" (the end
    # of the enclosing loop's body)
    loop_follow: dict[int, int | None | str] = {}

    def record_follow(items, after):
        for pos, item in enumerate(items):
            if item[0] == "loop":
                nxt = first_step(items[pos + 1]) if pos + 1 < len(items) else after
                loop_follow[id(item[1])] = nxt
                record_follow(item[2], "up")

    record_follow(root, None)
    link(root, [])
    return Program(tuple(steps), tuple(transitions[s.index] for s in steps),
                   first_step(root[0]) if root else None)

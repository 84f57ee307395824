"""Per-kernel synthesis: each kernel of a design (a layer of a network, a stage of a dataflow
design: the submodules compiler/hw/top.py names `k0`, `k1`, ...) cut out of the RTLIL and
synthesised on its own, in parallel, and the resources summed.

The kernels are where a design's area is (its memories, datapath and counters); the top holds
the sequencer and the host bus. A flat synthesis of a large design is one Yosys run that grows
faster than the design (abc9 on the whole netlist); here each kernel is a design of its own, with
its ports as the design's ports, so nothing in it is optimised away that a flat run keeps
(every memory stays observable through its port), and each goes through the synthesis cache
keyed by its own RTLIL text (compiler.synth.area): a layer that is the same in two points of a
sweep (the same weights' shape, widths and folding) is synthesised once for both.

What is not done across a kernel's boundary: constant propagation from the top into a kernel
(its ports are free inputs), and removal of logic behind a kernel output the top never reads.
The counts are therefore those of a synthesis that keeps each kernel as a module
(`keep_hierarchy`); bench/bench_kernel_synth.py measures the difference from flat synthesis
(docs/synthesis.md). A netlist for place-and-route is always flat.
"""
from __future__ import annotations

import re

from .units import Split, cut_out

_KERNEL = re.compile(r"\\top\.k\d+")


def split_kernels(text: str) -> Split:
    """Cut each kernel instance (`top.k<i>` and its submodules) out of the design's RTLIL."""
    return cut_out(text, lambda name: bool(_KERNEL.fullmatch(name)), "kernel")

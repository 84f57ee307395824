"""`HardwareConfig`: the frozen record of hardware knobs a design is compiled with."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

MAX_ACC_WIDTH = 64
MAX_PARALLEL = 4096          # lanes * reduce_unroll: more multipliers than any FPGA here holds
MAX_FP_PIPELINE = 4          # at 3 every float unit has its most stages (FAdd 6 <= 2**3, FMul, FDiv, FSqrt 8 = 2**3);
                             # 4 adds a second register to integer products


@dataclass(frozen=True)
class HardwareConfig:
    """Hardware knobs. Every field is a knob the design-space explorer may vary.

    mem_read: "sync" (default) gives every memory a registered read port, as block RAM needs;
        the controller issues addresses one cycle ahead, so it costs no cycles. "comb" gives
        combinational read ports (LUT RAM or flip-flops), kept for comparison.
    fp_rounding: "rne" (default, IEEE round to nearest, ties to even) or "rtz" (toward zero:
        a little less logic; overflow gives the largest finite value, not inf).
    fp_subnormals: "keep" (default, IEEE gradual underflow) or "flush" (subnormal inputs read
        as zero, subnormal results become zero: less logic, less accuracy near zero).
    acc_width: bits of the accumulator registers of integer reductions (None, the default:
        the accumulator's dtype, e.g. 32). Why: an int8 dot product of length 784 needs 25 bits,
        not 32; a narrower register saves flip-flops and adder LUTs. Cost: the datapath wraps
        at this width, so results differ from the reference when the sum does not fit; the
        overflow proof (compiler.overflow) reports against this width whether it is safe.
        A width above the dtype's only adds flip-flops (the operations still wrap at the
        dtype, as tinygrad does).
    loop_fusion: fold accumulator initialisation stores before a loop nest into its first
        iteration and result stores after it into its last one (True, the default), so a
        sequential GEMV takes M*K + 1 cycles instead of M*(K + 2) + 1. Cost: a compare of the
        loop counters and a multiplexer per accumulator. Only applied where it is safe
        (compiler/passes/fuse.py says when); elsewhere the steps stay as they are.
    lanes: P output elements computed per cycle along the innermost output loop of each
        kernel (default 1). Why: P times fewer cycles for elementwise kernels, GEMV rows,
        output columns of matmul/conv. Cost: P copies of the datapath and accumulators, and
        every buffer the loop indexes is split into P banks (one block RAM or more each).
        Any P: a tail that does not fill all lanes is gated off.
    reduce_unroll: U products per cycle of the innermost reduction loop whose body is a
        single `acc = acc + f(k)` (or max), summed by a balanced adder tree (default 1).
        Cost: U copies of f, a tree of U - 1 adders, U banks for the buffers the loop
        indexes. Any U (tails gated to the identity). Float sums only with fp_sum="tree"
        (a tree sums in another order than the sequential reference); float max reductions
        are refused.
        Buffers whose index does not fit a banked layout (e.g. a convolution window, whose
        row and column counters step the same index) keep one bank with one read port per
        address (Yosys replicates the block RAM); a *written* buffer that does not fit makes
        the knob illegal for that kernel (a CompileError naming kernel, buffer and why).
    fp_sum: "sequential" (default) or "tree": the order float sums add in. "sequential" is
        tinygrad's order (k = 0..K-1), so reduce_unroll does not apply to a float sum (a
        CompileError; the explorer prunes such points before compiling, dse/spec.py).
        "tree" lets reduce_unroll sum U float products per cycle as a balanced tree,
        neighbours first (((t0+t1)+(t2+t3))+...), added to the accumulator once per step;
        terms past K read -0.0 (the identity of IEEE addition). Why: U times fewer cycles
        for float reductions. Cost: results differ from tinygrad's sequential sum by a few
        ULP (the golden model sums in the same tree order, so the design stays bit-exact
        against it; dse reports the distance to the sequential result as `ulp_vs_sequential`).
        No effect on integer reductions, whose addition is associative.
    mul: "auto" (default), "dsp" or "lut": where synthesis builds the multipliers (integer
        products and float mantissa products). "dsp": every one in DSP blocks (Yosys's
        mul2dsp, as the family script does). "lut": every one in LUTs (Yosys's Booth
        multiplier: ~200 LUT4s for an int8 product on ECP5). "auto": DSPs, widest products
        first, up to the DSP count of the target family's largest device (LFE5U-85F: 156,
        iCE40UP5K: 8), the rest in LUTs, so a design with more products than DSPs still fits;
        within the budget it is exactly "dsp". Xilinx: auto is dsp (no device list). No effect
        on the RTL, simulation or cycles: only on the synthesis script (compiler/synth/multipliers.py).
    mem_pack: "auto" (default) or G >= 1: banks of one buffer held side by side in one memory,
        G elements per word (compiler/hw/packing.py). Why: a block RAM is a whole block however
        little of it a bank uses; an int8 bank of 392 words fills 4% of an ECP5 DP16KD, and
        packing 4 such banks fills one 36-bit x 512-word block. 1: one memory per bank (as
        before). "auto": the G that needs the fewest 18 Kbit block RAMs (ECP5 DP16KD, Xilinx
        RAMB18; iCE40's 4 Kbit blocks want G set by hand), only with mem_read="sync". Applies
        only where it is free: banks every step reads at the same word address and the kernel
        never writes (inputs, copy destinations). No effect on cycles or results.
    mem_tail: "block" (default) or "lut": where the last, nearly empty block-RAM row of a
        memory goes. A memory is stacked in rows of block RAMs (ECP5 512 words x 36 bits at
        its widest); a bank of 3,136 fp32 words (the GEMV 128x784 at 32 products a cycle)
        fills 6 rows and 64 words of a 7th, so 32 such banks take 224 blocks where 192 are
        nearly full. "lut" moves such a tail (when it saves blocks and holds at most 1/8 of
        their bits; compiler/hw/bram.py lut_tail) into a second memory of LUT RAM (`<name>_tail`, ram_style
        "distributed"), read through a registered select: one block RAM row fewer per memory
        for about one LUT4 per 16 bits of tail plus its read multiplexer. Only memories the
        kernel itself never writes (inputs, copy destinations: the host bus and copies write
        either part by address), only with mem_read="sync". iCE40 has no LUT RAM: there the
        tail is a small memory of its own, which Yosys puts in a block RAM (no saving). No
        effect on cycles or results.
    share_buffers: a kernel that reads a buffer another kernel writes (or an input another
        kernel already holds) reads that memory directly instead of its own copy (default
        False). Saves the copy pass (one cycle per element or word) and one memory per
        consumer. Only where both sides use the same banked layout and the reader needs one
        read port per bank; elsewhere the copy stays.
    fp_pipeline: pipeline register levels P in the datapath (default 0: every step computes
        and stores in the cycle it issues). Why: the single-cycle int8 GEMV closes at ~42 MHz
        and the fp32 one at ~10 MHz on an ECP5; see compiler/hw/pipeline.py and docs/pipeline.md.
        The controller still issues one step per cycle. What each level adds:
          P >= 1: read data registered; every float unit cut into min(2**P, its maximum)
                  stages (FAdd up to 6, FMul, FDiv, FSqrt up to 8, conversions up to 2) with a registered
                  result; float sums interleave L >= min(2**P, 6) output rows (below).
          P >= 2: integer products registered; read addresses registered before they fan
                  out; memories deeper than one block RAM split into block-RAM-sized parts
                  (each part's data registered next to it) read through a multiplexer tree
                  registered at every level.
          P >= 3: every integer product registers its own copy of its operands (a value
                  broadcast to many lanes reaches each through a nearby register; Yosys keeps
                  the copies), and every integer add of data values is registered (the adder
                  trees of unrolled reductions). The int8 GEMV 128x784 at lanes x
                  reduce_unroll = 8x8 goes from 76 to 111 MHz on an ECP5-85F, 4 cycles more.
          P >= 4: integer products registered twice (a DSP product's second register lands
                  it in the fabric; a LUT product holds both inside): one cycle more a run
                  and more flip-flops; float units as at 3.
        Cycles: a step's stores commit C cycles after it issues (C: the deepest stage on the
        way to them; GEMV 128x784: int8 C = 1 at P=1, 9 at P=2, 10 at P=3; fp32 C = 4, 16, 22 at
        P=1, 2, 3), so each kernel run takes C more cycles (once per run, not per step:
        `done` rises C cycles later), plus the gated rows of interleaving, if any (L is the
        value from min(2**P, 6) to twice that which pads the rows least: 128 rows at P=3 take
        L = 8 and no padding, where L = 6 would compute 132).
        Accumulators: logic that reads an accumulator runs in one cycle, so `acc = acc + x`
        keeps its one-cycle loop, except float sums in a fused reduction nest (loop_fusion),
        whose adder is pipelined too: the nest *interleaves* L output rows (the innermost
        output loop around the reduction moves inside it; each accumulator becomes a ring of
        L registers, one per row in flight, the adder's stages plus a delay line). Each row
        is still summed in the reference order,
        so results stay bit-exact; rows past the end are gated off, so ceil(N / L) * L rows
        are computed instead of N. A float sum with no output loop around it, or unfused,
        keeps a single-cycle adder (which then limits the clock).
        Flip-flops: every value crossing a register level (about the width of the datapath per
        level), counters and step ids delayed C cycles, L - 1 more registers per interleaved
        accumulator, and for a split memory two data words per part (the part's register and
        its tree node): the fp32 GEMV 128x784 goes from ~230 to ~7,700 FFs at P=2..3, the
        int8 one from 180 to ~1,300.
        A kernel that reads a buffer it also writes is refused when C > 0 (a later step could
        read a location an earlier step has not stored yet): a CompileError naming the kernel.
    """
    mem_read: str = "sync"
    fp_rounding: str = "rne"
    fp_subnormals: str = "keep"
    acc_width: int | None = None
    loop_fusion: bool = True
    lanes: int = 1
    reduce_unroll: int = 1
    share_buffers: bool = False
    fp_pipeline: int = 0
    fp_sum: str = "sequential"
    mul: str = "auto"
    mem_pack: int | str = "auto"
    mem_tail: str = "block"

    def __post_init__(self) -> None:
        if self.mem_read not in ("sync", "comb"):
            raise ValueError(f"HardwareConfig.mem_read: expected 'sync' or 'comb', got {self.mem_read!r}")
        if self.fp_rounding not in ("rne", "rtz"):
            raise ValueError(f"HardwareConfig.fp_rounding: expected 'rne' or 'rtz', got {self.fp_rounding!r}")
        if self.fp_subnormals not in ("keep", "flush"):
            raise ValueError(f"HardwareConfig.fp_subnormals: expected 'keep' or 'flush', got {self.fp_subnormals!r}")
        if self.mul not in ("auto", "dsp", "lut"):
            raise ValueError(f"HardwareConfig.mul: expected 'auto', 'dsp' or 'lut', got {self.mul!r}")
        if self.mem_pack != "auto" and not (_is_int(self.mem_pack) and 1 <= self.mem_pack <= MAX_PARALLEL):
            raise ValueError(f"HardwareConfig.mem_pack: expected 'auto' or an integer from 1 to {MAX_PARALLEL} "
                             f"(elements per memory word), got {self.mem_pack!r}")
        if self.mem_tail not in ("block", "lut"):
            raise ValueError(f"HardwareConfig.mem_tail: expected 'block' or 'lut', got {self.mem_tail!r}")
        if self.fp_sum not in ("sequential", "tree"):
            raise ValueError(f"HardwareConfig.fp_sum: expected 'sequential' or 'tree', got {self.fp_sum!r}")
        if self.acc_width is not None and not (_is_int(self.acc_width) and 1 <= self.acc_width <= MAX_ACC_WIDTH):
            raise ValueError(f"HardwareConfig.acc_width: expected None (the accumulator's dtype) or an "
                             f"integer from 1 to {MAX_ACC_WIDTH}, got {self.acc_width!r}")
        for name in ("loop_fusion", "share_buffers"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"HardwareConfig.{name}: expected True or False, got {getattr(self, name)!r}")
        for name in ("lanes", "reduce_unroll"):
            v = getattr(self, name)
            if not (_is_int(v) and 1 <= v <= MAX_PARALLEL):
                raise ValueError(f"HardwareConfig.{name}: expected an integer from 1 to {MAX_PARALLEL}, got {v!r}")
        if not (_is_int(self.fp_pipeline) and 0 <= self.fp_pipeline <= MAX_FP_PIPELINE):
            raise ValueError(f"HardwareConfig.fp_pipeline: expected an integer from 0 to {MAX_FP_PIPELINE} "
                             f"(pipeline register levels; at {MAX_FP_PIPELINE} every unit is fully pipelined), "
                             f"got {self.fp_pipeline!r}")
        if self.lanes * self.reduce_unroll > MAX_PARALLEL:
            raise ValueError(f"HardwareConfig: lanes={self.lanes} with reduce_unroll={self.reduce_unroll} is an "
                             f"illegal combination: {self.lanes * self.reduce_unroll} operations per cycle is more "
                             f"than the {MAX_PARALLEL} any supported FPGA can build; lower one of them")

    def inapplicable(self, *, float_sums: bool) -> str:
        """Why these knobs cannot apply to a model whose reductions are float sums (or not),
        "" when they can. The explorer prunes such points before compiling (dse/spec.py)."""
        if float_sums and self.reduce_unroll > 1 and self.fp_sum == "sequential":
            return ("reduce_unroll > 1 with fp_sum=sequential: a float sum keeps tinygrad's sequential "
                    "order (fp_sum=tree unrolls it)")
        return ""

    @classmethod
    def knob_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "HardwareConfig":
        """Build from a mapping, rejecting unknown knob names with the list of known ones."""
        unknown = sorted(set(values) - set(cls.knob_names()))
        if unknown:
            raise ValueError(f"unknown hardware knob(s) {', '.join(map(repr, unknown))}; "
                             f"known knobs: {', '.join(cls.knob_names())}")
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)

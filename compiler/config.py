"""`HardwareConfig`: the frozen record of hardware knobs a design is compiled with."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from .devices import DEVICES, FAMILIES, SPEED_GRADES, dsp_blocks, find_device

MAX_ACC_WIDTH = 64
MAX_PARALLEL = 4096          # lanes * reduce_unroll: more multipliers than any FPGA here holds
LAYER_KNOBS = ("lanes", "reduce_unroll", "weights")
"""Knobs a layer (one kernel of the model) may set for itself, written `<knob>@<layer>`: a 64-32-10
MLP can give its 64-input layer more lanes than its 10-output one."""
WEIGHTS = ("memory", "constant")
FOLD_FACTORS = ("divisors", "padded")
ADDER_GRAPHS = ("auto", "shared", "per_product")
MAX_ADDER_DEPTH = 64
MAX_ADDER_LEVELS = 64
FP_SEMANTICS = ("tinygrad", "op")
_LAYER_KEY = re.compile(r"^([a-z_]+)@([A-Za-z0-9_.-]+)$")
MAX_TARGET_MHZ = 1000       # target_mhz: above any clock an ECP5 or iCE40 fabric path closes at
TARGET_LEVEL = 3            # the least fp_pipeline target_mhz places its registers on top of
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
    fp_semantics: where fp16, bf16 and fp8 arithmetic rounds. "tinygrad" (default): where
        tinygrad's PYTHON device rounds, the reference every design is checked against
        (compiler/passes/float_semantics.py): `a * b + c` rounds once (a fused multiply-add
        unit), and fp16 (emulated by tinygrad in float32 below Python 3.12) computes in float32
        units, rounding to half at its stores only. "op": every op rounds to its dtype, as the
        lowered kernel is written (IEEE units of the dtype: cheaper, and checked against a
        per-op model). fp32 rounds every op in both (see docs/float-units.md).
    acc_width: bits of the accumulator registers of integer reductions (None, the default:
        the bounds the overflow proof derives for the inputs' declared ranges, compiler/bounds.py,
        else the accumulator's dtype, e.g. 32: an int8 dot product of length 784 gets 25 bits).
        Set, every integer accumulator takes this width. Cost: the datapath wraps
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
    dsp_pack: "none" (default), "auto" or "all": narrow products of one shared operand built by
        one DSP block, their other operands packed into its 18-bit input at field offsets and
        the products taken apart from its output (compiler/hw/dsp_pack.py): two w4a8 products a
        block (fields of 12 bits), three w3a3. Only products built as units of their own
        (fp_pipeline >= 3) in one stage whose other operand no other product reads (a GEMV's
        weights, the x element shared). "auto": when the design's products need more blocks
        than `mul: auto` has (the family's largest part), as many packs as bring the need down
        to it, so more products are in blocks and fewer in LUTs; "all": every product that
        can pack (fewer blocks; with `mul: dsp` a design that would not fit); "none": none. Same
        cycles and results (with target_mhz a product register more where the fields' carry
        needs it); no effect with `mul: lut`.
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
    adder_levels: from fp_pipeline 3, the levels of integer adders and compares a pipeline stage
        holds before a register (default 1: every level of an adder tree registered, as
        fp_pipeline 3 describes). Why: a fully unrolled constant-weight layer is a tree of
        shift-and-add products and sums 8 to 12 adders deep; registering every level makes a
        model of four layers ~50 cycles long, where 2 or 3 levels a stage (an ECP5 carry chain
        of 16 to 20 bits takes ~2.5 ns with its routing) keep the clock near 100 MHz in a third
        of the cycles. A product by a constant left to a DSP counts two levels. Applies where
        fp_pipeline >= 3; below, it changes nothing.
    adder_graph: "auto" (default), "shared" or "per_product": how weights="constant" builds a
        layer's products by its weights. "shared": the layer's weights as one constant matrix,
        whose matrix-vector product becomes one adder graph in which partial sums that several
        outputs need are computed once (da4ml's CMVM solver, compiler/passes/adder_graph.py;
        the pruned jet-shaped MLP: 1,529 adders against 2,126, docs/area.md); needs the da4ml
        package. "per_product": every product its own shift-and-add of the weight's signed
        digits, then an adder tree per output. "auto": shared when da4ml is installed, else
        per_product. No effect on results or cycles of a design without constant weights; with
        them, the results are the same bit for bit and the cycles follow the graph's depth.
    adder_depth: None (default) or D >= 0: with adder_graph shared, a layer's graph takes at
        most D adder levels more than the least its matrix needs (da4ml's hard delay
        constraint). Why: a deeper graph shares more partial sums (fewer adders) but is more
        pipeline stages long (docs/area.md measures the trade). None: no bound.
    target_mhz: the clock the datapath is pipelined for (None, the default: off). From fp_pipeline 3
        (TARGET_LEVEL; below it a ValueError), instead of a register every `adder_levels` levels,
        the compiler registers a value where the next op would make the path longer than the
        period on `device` (its family and speed grade), by the delay model of
        compiler/timing_model.py: cell delays from the part's timing database, routing
        calibrated on nextpnr runs of this project's designs. Integer adders, compares, max and
        clips, multiplexers and shifts are counted; a value the next ops read more than
        pipeline.FANOUT_USES times reaches them through registered copies (as with
        adder_levels > 1). Float units take every register boundary they have, the ones only a
        target clock uses too (their CLOCK_CUTS: FAdd 10 stages, FMul 10, FWideMul 10, FMulAdd
        16, FloatToFloat 4, IntToFloat 5, FloatToInt 3, FDiv and FSqrt up to a stage a
        recurrence row and four in their rounding and operands: p + 8 and p + 7;
        pipeline.float_stages), but a float
        sum's unit (FAdd; FMulAdd for a fused multiply-add, 8 rows at least), whose ring has as
        many stages as rows interleaved, takes those that cut most first (their CLOCK_ORDER); a
        float sum with no output loop around it takes padding rows (interleave); the delay
        model places no register inside a float unit (the estimate times them:
        compiler/float_timing.py). Why: every latency and throughput figure is cycles / Fmax,
        and a stage holding a multiplier, an adder tree and a route across the die halves the
        clock.
        Cost: cycles (a stage per register level, once per kernel run) and flip-flops. The
        cycle model stays exact and results bit-exact (only where registers go changes).
        `Design.timing_estimate()` gives the model's Fmax for the built design (a row's
        `fmax_estimate_mhz`, beside nextpnr's `fmax_mhz`). adder_levels must stay 1 with it.
    device: the FPGA part the design is for, with its speed grade: "LFE5U-85F-8" (None, the
        default: LFE5U-85F at speed grade 6, the slowest). target_mhz's delay model uses its
        family and grade; with `timing: true` (dse) place-and-route places on this part instead
        of choosing one by the design's size (compiler.devices.find_device reads the name).
    weights: "memory" (default) or "constant": where a trained model's weights live. "memory":
        in memories the host writes before a run, like any input. "constant": every input that
        holds data at compile time and is not given at run time (compile_model's `stream`) is
        built into the datapath (compiler/passes/constants.py): a load at an address the unrolled
        loops fix becomes a constant, a product by a constant a shift-and-add network (canonical
        signed digits; a DSP where that is cheaper), by zero nothing, by a power of two a wire; a
        load whose address still varies reads a ROM (a memory initialised with the data, off the
        host bus). Why: with lanes and reduce_unroll at a layer's sizes each layer is one step of
        constant-coefficient adder trees, no memory reads, and pruned (zero) weights cost
        nothing. Cost: the design is compiled for the weights it carries; new weights are new
        hardware (the caches key on them: they are constants of the IR). A model none of whose
        inputs holds data at compile time has nothing to build in: a CompileError.
    schedule: "sequential" (default) or "dataflow": how the kernels share time. "sequential" runs
        one kernel after another on one sample, with copies between them: the next sample starts
        when the last kernel is done (interval = cycles). "dataflow" makes every kernel a stage
        running concurrently on its own sample in fixed-length *beats*: stage k works on sample n
        while stage k-1 works on sample n+1, and buffers between stages rotate through 2 (or, across
        a skip, more) banks, so a stage writes one bank while its consumer reads another (no copy
        at all where the consumer reads the producer's memory in place; elsewhere the copy runs
        inside the beat, beside the stages). Interval = the beat = the slowest stage (or copy);
        latency = beats from input to output x the beat (compiler/hw/dataflow.py, docs/dataflow.md).
        A graph that cannot be pipelined (a model output that later kernels also read) stays
        sequential and says why (Design.schedule_note).
    stage_overlap: with schedule="dataflow", whether a stage takes its next sample while its
        pipeline still drains the last one (False, the default: a beat is at least each stage's
        whole run, its pipeline's fill and drain included). True: a beat is at least the
        stage's loop, from its start to its last step and that step's reads; its last stores
        land in the next beat or beats, from the bank of the sample they belong to, and its
        consumers wait for them (a beat of latency more for each beat a drain spills into).
        Why: at a small interval the fill and drain are most of a stage's run (the 30-16-8-2
        MLP at target_mhz 200: 25 of 26 cycles), so without overlap a short interval is bought
        with parallelism; with it, as an HLS dataflow pipeline at II 1, the interval is the
        loop's steps. Cost: a bank register per pipeline stage per output ring; latency in
        beats. A kernel that loads a buffer it stores, or reads a gather, keeps its whole run.
        Only with schedule="dataflow" (refused with sequential, where it would do nothing).
    fold: "manual" (default) or "auto": with "auto" compile_model chooses each layer's lanes and
        reduce_unroll itself (compiler/fold.py), the cheapest folding (its products lanes x
        reduce_unroll, and a product more per lane) that brings the layer's run to at most
        `target_interval` cycles, from divisors of its loop
        bounds (FINN's SetFolding does the same per layer; more factors: `fold_factors`), so the stages balance; a target no
        folding reaches is a CompileError naming the closest interval. Needs target_interval;
        per-layer settings given with it are refused (the fold chooses them).
    target_interval: cycles per sample `fold: auto` aims at (None unless fold is "auto").
    fold_factors: the factors `fold: auto` splits a loop by: "divisors" (default) of its bound, as
        FINN's SetFolding, so no lane idles; "padded" also the least factor for every count of
        steps, ceil(bound / steps), whose last step leaves a few lanes idle (a 256 x 256 layer in
        243 cycles: 9 x 32 = 288 multipliers, where divisors need 512). Padded layouts hand
        over in place only to a reader split the same way, else by a copy of groups of
        consecutive elements (hw/layout.group_width), often one a cycle: the fold counts the
        copies in the beat and prefers hand-overs in place at equal parallelism.
    fold_budget: instead of target_interval, the multipliers `fold: auto` may spend (lanes x
        reduce_unroll summed over the layers: the multiply-accumulates per cycle, the area's
        first-order term): the fold of the least interval within it (compiler/fold.py).
    layers: per-layer settings of the LAYER_KNOBS: ((layer, ((knob, value), ...)), ...), a
        layer by its index or its name; written `lanes@1: 4` or `lanes@k1_r_10_32: 4` in
        from_dict/as_dict (a model's layers are its kernels, in the order compile_model runs
        them, named k<index>_<tinygrad's name>; `dse layers SPEC` lists them; compile_model
        resolves names and refuses a layer the model does not have, listing its layers). A
        layer without its own value takes the model-wide one. Why: a layer's cycles are its own work divided by
        its parallelism, so a small layer next to a large one needs less of it.
    """
    mem_read: str = "sync"
    fp_rounding: str = "rne"
    fp_subnormals: str = "keep"
    fp_semantics: str = "tinygrad"
    acc_width: int | None = None
    loop_fusion: bool = True
    lanes: int = 1
    reduce_unroll: int = 1
    share_buffers: bool = False
    fp_pipeline: int = 0
    fp_sum: str = "sequential"
    mul: str = "auto"
    dsp_pack: str = "none"
    mem_pack: int | str = "auto"
    mem_tail: str = "block"
    adder_levels: int = 1
    adder_graph: str = "auto"
    adder_depth: int | None = None
    target_mhz: float | None = None
    device: str | None = None
    weights: str = "memory"
    schedule: str = "sequential"
    stage_overlap: bool = False
    fold: str = "manual"
    target_interval: int | None = None
    fold_budget: int | None = None
    fold_factors: str = "divisors"
    layers: tuple[tuple[int | str, tuple[tuple[str, Any], ...]], ...] = ()

    def __post_init__(self) -> None:
        if self.mem_read not in ("sync", "comb"):
            raise ValueError(f"HardwareConfig.mem_read: expected 'sync' or 'comb', got {self.mem_read!r}")
        if self.fp_rounding not in ("rne", "rtz"):
            raise ValueError(f"HardwareConfig.fp_rounding: expected 'rne' or 'rtz', got {self.fp_rounding!r}")
        if self.fp_subnormals not in ("keep", "flush"):
            raise ValueError(f"HardwareConfig.fp_subnormals: expected 'keep' or 'flush', got {self.fp_subnormals!r}")
        if self.fp_semantics not in FP_SEMANTICS:
            raise ValueError(f"HardwareConfig.fp_semantics: expected 'tinygrad' or 'op', got {self.fp_semantics!r}")
        if self.mul not in ("auto", "dsp", "lut"):
            raise ValueError(f"HardwareConfig.mul: expected 'auto', 'dsp' or 'lut', got {self.mul!r}")
        if self.dsp_pack not in ("auto", "all", "none"):
            hint = " (YAML reads off and no as false: write none)" if self.dsp_pack is False else ""
            raise ValueError(f"HardwareConfig.dsp_pack: expected 'none', 'auto' or 'all', got {self.dsp_pack!r}{hint}")
        if self.mem_pack != "auto" and not (_is_int(self.mem_pack) and 1 <= self.mem_pack <= MAX_PARALLEL):
            raise ValueError(f"HardwareConfig.mem_pack: expected 'auto' or an integer from 1 to {MAX_PARALLEL} "
                             f"(elements per memory word), got {self.mem_pack!r}")
        if self.mem_tail not in ("block", "lut"):
            raise ValueError(f"HardwareConfig.mem_tail: expected 'block' or 'lut', got {self.mem_tail!r}")
        if not (_is_int(self.adder_levels) and 1 <= self.adder_levels <= MAX_ADDER_LEVELS):
            raise ValueError(f"HardwareConfig.adder_levels: expected an integer from 1 to {MAX_ADDER_LEVELS} (adder "
                             f"levels between pipeline registers), got {self.adder_levels!r}")
        if self.adder_graph not in ADDER_GRAPHS:
            raise ValueError(f"HardwareConfig.adder_graph: expected one of {', '.join(map(repr, ADDER_GRAPHS))}, "
                             f"got {self.adder_graph!r}")
        if self.adder_depth is not None and not (_is_int(self.adder_depth) and 0 <= self.adder_depth <= MAX_ADDER_DEPTH):
            raise ValueError(f"HardwareConfig.adder_depth: expected None (no bound) or an integer from 0 to "
                             f"{MAX_ADDER_DEPTH} (adder levels beyond the least a layer's graph needs), "
                             f"got {self.adder_depth!r}")
        if self.weights not in WEIGHTS:
            raise ValueError(f"HardwareConfig.weights: expected 'memory' or 'constant', got {self.weights!r}")
        if self.schedule not in ("sequential", "dataflow"):
            raise ValueError(f"HardwareConfig.schedule: expected 'sequential' or 'dataflow', got {self.schedule!r}")
        if self.stage_overlap is True and self.schedule != "dataflow":
            raise ValueError(f"HardwareConfig.stage_overlap=True is how schedule='dataflow' runs its stages, and "
                             f"schedule is {self.schedule!r}: set schedule to 'dataflow' with it")
        if self.fold not in ("manual", "auto"):
            raise ValueError(f"HardwareConfig.fold: expected 'manual' or 'auto', got {self.fold!r}")
        if self.target_interval is not None and not (_is_int(self.target_interval) and self.target_interval >= 1):
            raise ValueError(f"HardwareConfig.target_interval: expected a positive integer (cycles per sample), "
                             f"got {self.target_interval!r}")
        if self.fold_budget is not None and not (_is_int(self.fold_budget) and self.fold_budget >= 1):
            raise ValueError(f"HardwareConfig.fold_budget: expected a positive integer (multipliers: lanes x "
                             f"reduce_unroll summed over the layers), got {self.fold_budget!r}")
        aims = (self.target_interval is not None) + (self.fold_budget is not None)
        if (self.fold == "auto") != (aims > 0):
            raise ValueError("HardwareConfig: fold='auto' needs target_interval (cycles per sample) or fold_budget "
                             "(multipliers), and each of them needs fold='auto'")
        if aims > 1:
            raise ValueError("HardwareConfig: fold='auto' aims at target_interval or at fold_budget, not both; "
                             "drop one")
        if self.fold_factors not in FOLD_FACTORS:
            raise ValueError(f"HardwareConfig.fold_factors: expected {' or '.join(map(repr, FOLD_FACTORS))}, "
                             f"got {self.fold_factors!r}")
        if self.fold_factors != "divisors" and self.fold != "auto":
            raise ValueError(f"HardwareConfig.fold_factors={self.fold_factors!r} is how fold='auto' chooses, and fold "
                             f"is {self.fold!r}: set fold to 'auto' with it")
        if self.fp_sum not in ("sequential", "tree"):
            raise ValueError(f"HardwareConfig.fp_sum: expected 'sequential' or 'tree', got {self.fp_sum!r}")
        if self.acc_width is not None and not (_is_int(self.acc_width) and 1 <= self.acc_width <= MAX_ACC_WIDTH):
            raise ValueError(f"HardwareConfig.acc_width: expected None (the accumulator's dtype) or an "
                             f"integer from 1 to {MAX_ACC_WIDTH}, got {self.acc_width!r}")
        for name in ("loop_fusion", "share_buffers", "stage_overlap"):
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
        self._check_target()
        self._check_layers()

    def _check_target(self) -> None:
        if self.device is not None:
            if not isinstance(self.device, str):
                raise ValueError(f"HardwareConfig.device: expected a part name such as 'LFE5U-85F-8', got {self.device!r}")
            part(self.device)                       # ValueError naming the known parts
        if self.target_mhz is None:
            return
        if isinstance(self.target_mhz, bool) or not isinstance(self.target_mhz, (int, float)) \
                or not 0 < self.target_mhz <= MAX_TARGET_MHZ:
            raise ValueError(f"HardwareConfig.target_mhz: expected a clock in MHz above 0 and at most "
                             f"{MAX_TARGET_MHZ}, or None (off), got {self.target_mhz!r}")
        if self.fp_pipeline < TARGET_LEVEL:
            raise ValueError(f"HardwareConfig: target_mhz={self.target_mhz:g} places registers on top of "
                             f"fp_pipeline {TARGET_LEVEL}'s; set fp_pipeline to {TARGET_LEVEL} or "
                             f"{MAX_FP_PIPELINE} (got {self.fp_pipeline})")
        if self.adder_levels != 1:
            raise ValueError(f"HardwareConfig: target_mhz={self.target_mhz:g} decides how many adder levels a "
                             f"stage holds; drop adder_levels (got {self.adder_levels})")

    def timing_part(self):
        """The device target_mhz's delay model times the design at (`device`, else the default:
        LFE5U-85F, speed grade 6)."""
        return part(self.device or DEFAULT_PART)

    def dsp_blocks(self, family: str) -> int | None:
        """The DSP blocks `mul: auto` and `dsp_pack: auto` fill on `family`: the named `device`'s
        when it is of that family (the design must fit that part: products past its blocks go to
        LUTs), else the family's largest part's (the smallest part that holds the design is chosen
        after synthesis); None for a family without a device list (there `auto` is `dsp`)."""
        if family not in DEVICES:
            return None
        named = part(self.device) if self.device is not None else None
        return dsp_blocks(family, named if named is not None and named.family == family else None)

    def _check_layers(self) -> None:
        if not isinstance(self.layers, tuple):
            raise ValueError(f"HardwareConfig.layers: expected a tuple of (layer, settings), got {self.layers!r}")
        seen = []
        for entry in self.layers:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], tuple)
                    and ((_is_int(entry[0]) and entry[0] >= 0) or (isinstance(entry[0], str) and entry[0]))):
                raise ValueError(f"HardwareConfig.layers: expected (layer index >= 0 or name, ((knob, value), ...)), "
                                 f"got {entry!r}")
            seen.append(entry[0])
            for knob, _ in entry[1]:
                if knob not in LAYER_KNOBS:
                    raise ValueError(f"HardwareConfig: {knob}@{entry[0]}: {knob!r} cannot be set per layer; "
                                     f"per-layer knobs: {', '.join(LAYER_KNOBS)}")
            try:
                self.for_layer(entry[0])        # each layer's own combination is legal
            except ValueError as e:
                raise ValueError(f"layer {entry[0]}: {e}") from None
        if seen != sorted(set(seen), key=_layer_order):
            raise ValueError(f"HardwareConfig.layers: layers must be given once each, in order, got {seen}")

    def for_layer(self, layer: int | str) -> "HardwareConfig":
        """The knobs `layer` (an index, or a name before compile_model resolves it) is built
        with: the model-wide ones and its own settings."""
        own = dict(dict(self.layers).get(layer, ()))
        return replace(self, layers=(), **own) if own or self.layers else self

    @functools.cached_property
    def model_wide(self) -> "HardwareConfig":
        """These knobs without the per-layer settings. Once compile_traced has built each
        layer's own lanes, reduce_unroll and weights into its kernel, the model-wide knobs are
        all a kernel's derivations read (its schedule, step checks, delay paths, features), so
        they are remembered on these (ir.per_kernel): a layer built alike in designs that differ
        only in another layer's settings is derived once."""
        return replace(self, layers=()) if self.layers else self

    def resolve_layers(self, names: list[str]) -> "HardwareConfig":
        """The same settings with every layer given by its index, for a model whose layers are
        `names`; ValueError naming the layer and listing the model's layers for one it does
        not have (or one given twice, by index and by name)."""
        if not self.layers:
            return self
        listing = ", ".join(f"{i} ({n})" for i, n in enumerate(names))
        out: dict[int, dict[str, Any]] = {}
        for layer, settings in self.layers:
            index = layer if isinstance(layer, int) else (names.index(layer) if layer in names else None)
            if index is None or index >= len(names):
                raise ValueError(f"{settings[0][0]}@{layer}: the model has no layer {layer!r}; its "
                                 f"{len(names)} layer{'s' * (len(names) != 1)}: {listing}")
            own = out.setdefault(index, {})
            for knob, value in settings:
                if knob in own:
                    raise ValueError(f"{knob}@{layer}: layer {index} ({names[index]}) is given {knob} twice "
                                     "(by index and by name)")
                own[knob] = value
        return replace(self, layers=tuple((i, tuple(sorted(s.items()))) for i, s in sorted(out.items())))

    def not_applicable(self, *, float_sums: bool) -> str:
        """Why these knobs cannot apply to a model whose reductions are float sums (or not),
        "" when they can. The explorer prunes such points before compiling (dse/spec.py)."""
        unrolls = {self.reduce_unroll} | {v for _, s in self.layers for k, v in s if k == "reduce_unroll"}
        if float_sums and max(unrolls) > 1 and self.fp_sum == "sequential":
            return ("reduce_unroll > 1 with fp_sum=sequential: a float sum keeps tinygrad's sequential "
                    "order (fp_sum=tree unrolls it)")
        if float_sums and self.fp_sum == "tree" and len(unrolls) > 1:
            return ("per-layer reduce_unroll with fp_sum=tree on float sums: the golden model sums every "
                    "layer in trees of one width")
        return ""

    @classmethod
    def knob_names(cls) -> tuple[str, ...]:
        """The model-wide knobs (per-layer settings are `<knob>@<layer>` of LAYER_KNOBS)."""
        return tuple(f.name for f in fields(cls) if f.name != "layers")

    @classmethod
    def is_knob(cls, name: str) -> bool:
        """A model-wide knob, or `<knob>@<layer>` of a per-layer one."""
        m = _LAYER_KEY.match(name)
        return name in cls.knob_names() or bool(m and m.group(1) in LAYER_KNOBS)

    @classmethod
    def known_knobs_text(cls) -> str:
        return (f"{', '.join(cls.knob_names())} (and per layer: "
                f"{', '.join(k + '@<layer>' for k in LAYER_KNOBS)})")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "HardwareConfig":
        """Build from a flat mapping of knobs and `<knob>@<layer index>` settings, rejecting
        unknown knob names with the list of known ones."""
        plain, layers = {}, {}
        for key, value in values.items():
            m = _LAYER_KEY.match(key) if isinstance(key, str) else None
            if m:
                if m.group(1) not in LAYER_KNOBS:
                    raise ValueError(f"{key}: {m.group(1)!r} cannot be set per layer; per-layer knobs: "
                                     f"{', '.join(LAYER_KNOBS)}")
                layer = int(m.group(2)) if m.group(2).isdigit() else m.group(2)
                layers.setdefault(layer, {})[m.group(1)] = value
            else:
                plain[key] = value
        unknown = sorted(set(plain) - set(cls.knob_names()))
        if unknown:
            raise ValueError(f"unknown hardware knob(s) {', '.join(map(repr, unknown))}; "
                             f"known knobs: {cls.known_knobs_text()}")
        return cls(**plain, layers=tuple((i, tuple(sorted(s.items())))
                                         for i, s in sorted(layers.items(), key=lambda kv: _layer_order(kv[0]))))

    def as_dict(self) -> dict[str, Any]:
        """The flat form from_dict reads: every model-wide knob, then each `<knob>@<layer>`."""
        out = {name: getattr(self, name) for name in self.knob_names()}
        for index, settings in self.layers:
            out.update({f"{knob}@{index}": value for knob, value in settings})
        return out


DEFAULT_PART = "LFE5U-85F"
"""The part a design is timed for without `device` (speed grade 6, the slowest: find_device)."""


def part(name: str):
    """compiler.devices.Device of a part name of any family ("LFE5U-85F-8", "iCE40HX8K");
    ValueError naming the known parts otherwise."""
    for family in FAMILIES:
        try:
            return find_device(family, name)
        except ValueError as e:
            if "unknown speed grade" in str(e):  # the part is known, its grade is not
                raise ValueError(f"HardwareConfig.device: {e}") from None
    known = ", ".join(d.name for f in FAMILIES for d in DEVICES[f])
    raise ValueError(f"HardwareConfig.device: unknown part {name!r}; known: {known} (an ECP5 part may end in "
                     f"its speed grade, {SPEED_GRADES['ecp5'][0]} by default: LFE5U-85F-8)")


def _layer_order(layer: int | str) -> tuple[int, int | str]:
    """Indices first, in order, then names."""
    return (0, layer) if isinstance(layer, int) else (1, layer)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)

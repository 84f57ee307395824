"""The delay model: how long a register-to-register path takes on a part, before synthesis.

Two users: pipeline.schedule, which with `target_mhz` (HardwareConfig) registers a value where
the next op would make its path longer than the period, and `estimate`, which gives a built
design's expected Fmax (Design.timing_estimate(), a row's `fmax_estimate_mhz` beside nextpnr's
`fmax_mhz`).

A path is a register's clock-to-out, then per op its input route and its own logic, then the
setup of the register it ends at. Cell delays are the part's (`DELAYS`, per family and speed
grade: the timing database nextpnr-ecp5 signs off with, as its reports show them):

  * an integer add, subtract, negation or compare of width w is a carry chain: an operand into
    the first CCU2C (`carry_in`), the carry through one CCU2C per two bits (`carry2`), the last
    sum out (`carry_out`); a max is a compare and a multiplexer LUT; an equality a LUT tree;
  * a multiplexer (where, a variable shift per level), and, or, xor: a LUT4 (`lut`);
  * casts, bitcasts, shifts by a constant: wires.

Routing is what the database does not say: it depends on where the placer puts the cells. It is
modelled per net as `route` plus `route_fanout` per doubling of the net's loads, calibrated on
nextpnr's reports of this project's designs (docs/timing.md "The delay model"); the figures
are those of a net inside a design of tens of thousands of LUTs, where a stage's routes, not
its cells, are most of the period. Float units are not modelled here (their stages are fixed by
fp_pipeline and target_mhz; compiler/float_timing.py times them from the units placed alone),
nor are the controller's counters.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from . import ir
from .config import HardwareConfig
from .devices import Device
from .hw.bram import HOST_GROUP, ecp5_memory
from .pnr.lutram_fanout import GROUP as LUTRAM_GROUP
from .ranges import acc_ranges, analyze

K = ir.OpKind


@dataclass(frozen=True)
class Delays:
    """Delays in ns of one family at one speed grade."""
    family: str
    speed: int | None
    clk_q: float             # a fabric flip-flop's clock to Q
    setup: float             # its setup (and the clock skew nextpnr books against it)
    lut: float               # a LUT4, input to output
    carry_in: float          # an operand into a carry chain (CCU2C A/B -> FCO)
    carry2: float            # the carry through one CCU2C (two bits)
    carry_out: float         # the carry into the last sum out (CCU2C FCI -> F)
    route: float             # a net to a load in a design of tens of thousands of LUTs
    route_fanout: float      # more per doubling of the net's loads
    route_local: float       # a net between LUTs packed side by side (a LUT RAM's read multiplexer)
    route_chain: float       # a carry chain's sums into another carry chain in the same stage
    dsp: float               # MULT18X18D, inputs to product, no registers
    dsp_clk_q: float         # its output register's clock to out
    dsp_route: float         # a route between a DSP block's column and the fabric logic around it
    dsp_route_far: float     # a DSP block's output to an adder tree placed with a kernel's LUT products
    bram_clk_q: float        # DP16KD clock to data out without its output register
    bram_clk_q_reg: float    # with it

    def route_ns(self, fanout: int, *, local: bool = False) -> float:
        """A net's routing to its farthest load, with `fanout` loads (`local`: loads packed
        beside its driver, from `route_local`)."""
        return (self.route_local if local else self.route) + self.route_fanout * math.log2(max(1, fanout))

    def carry_ns(self, width: int) -> float:
        """A carry chain `width` bits wide, operand in to the top sum out."""
        return self.carry_in + self.carry2 * max(0, (width + 1) // 2 - 1) + self.carry_out

    @property
    def overhead(self) -> float:
        """What every register-to-register path pays besides its logic and routes."""
        return self.clk_q + self.setup


ROUTE_CHAIN = 2.2
"""ns, grade 6: a carry chain's sums into the operands of another chain, in the same stage, that
spans more than two tiles (CHAIN_LONG_BITS). Each chain climbs a column two bits a slice,
CHAIN_TILE_BITS a tile, and the placer cannot line up every pair of such long chains (the second
takes other operands too), so these nets run across and along columns: on the MLP 64-32-10 at
target_mhz 150 (LFE5U-45F, seeds 1-3) a product's register -> an adder -> an adder's register,
chains of 17 and 18 bits, took 6.7-7.6 ns with 4.1-4.8 of routing over the two nets (one of them
2.44 alone on an earlier netlist), where route's 1.3 each made it 5.7. With 1.3 the MLP closed at
144.8 MHz (median of three seeds) against 150; with a register after each adder at 188.7
(docs/timing.md). Shorter chains keep `route`: with this at every width, the jet MLP (adders of 4
to 12 bits; stages of three chains had 5.4 ns of routing at 115 MHz) took 16 cycles at
target_mhz 110, not 13, and closed no faster (113.9 MHz: 140 ns, not 113); from 9 bits, 15
cycles and 113.5 MHz (132 ns)."""
CHAIN_TILE_BITS = 8
"""Bits of carry chain in one ECP5 logic tile (four slices, a CCU2C of two bits each)."""
CHAIN_LONG_BITS = 2 * CHAIN_TILE_BITS
"""A chain wider than this spans more than two tiles: the nets into it take ROUTE_CHAIN."""


def _ecp5(speed: int, scale: float) -> Delays:
    # Grade 6 from nextpnr-ecp5 0.11's critical-path reports (prjtrellis timing database): FF
    # clock-to-Q 0.525, LUT4 0.236, CCU2C B->FCO 0.447, FCI->FCO 0.071 per cell, FCI->F 0.44;
    # MULT18X18D 3.9 and DP16KD 5.6 / 1.0 (docs: anchors). The faster grades scale the cells
    # and the routing alike (the database's grade 8 LUT4 is 0.18).
    return Delays("ecp5", speed, clk_q=0.525 * scale, setup=0.1 * scale, lut=0.236 * scale,
                  carry_in=0.447 * scale, carry2=0.071 * scale, carry_out=0.44 * scale,
                  route=1.3 * scale, route_fanout=0.35 * scale, route_local=0.7 * scale,
                  route_chain=ROUTE_CHAIN * scale, dsp=3.9 * scale, dsp_clk_q=0.74 * scale,
                  dsp_route=4.0 * scale, dsp_route_far=7.9 * scale,
                  bram_clk_q=5.6 * scale, bram_clk_q_reg=1.0 * scale)


DELAYS: Mapping[tuple[str, int | None], Delays] = {
    ("ecp5", 6): _ecp5(6, 1.0),
    ("ecp5", 7): _ecp5(7, 0.87),
    ("ecp5", 8): _ecp5(8, 0.76),
    # iCE40 HX (icestorm timing): LUT4 ~0.45, carry ~0.13 per bit; routing as slow or slower
    ("ice40", None): Delays("ice40", None, clk_q=0.54, setup=0.2, lut=0.45, carry_in=0.4, carry2=0.26,
                            carry_out=0.4, route=1.5, route_fanout=0.4, route_local=0.9, route_chain=1.5,
                            dsp=6.0, dsp_clk_q=1.0,
                            dsp_route=3.0, dsp_route_far=3.0,
                            bram_clk_q=2.2, bram_clk_q_reg=2.2),
}


@dataclass(frozen=True)
class ProductSite:
    """Where an integer product is built, for its stages' delays: in LUTs, or in a DSP block
    whose output is routed to its adder tree beside the block (`far` False) or to one placed with
    the kernel's LUT products, across the die (True)."""
    lut: bool
    far: bool = False

    def dsp_route(self, d: Delays) -> float:
        """A route between the DSP block and the fabric, at this site."""
        return d.dsp_route_far if self.far else d.dsp_route


LUT_SITE, DSP_SITE, FAR_DSP_SITE = ProductSite(True), ProductSite(False), ProductSite(False, True)


def product_sites(mul: str, products: int, blocks: int | None, *, kernel: bool = False) -> tuple[ProductSite, ...]:
    """Where `mul` puts `products` integer products (compiler/synth/multipliers.py), as timed:
    in DSP blocks (dsp; auto within the part's `blocks`, HardwareConfig.dsp_blocks: None for a
    family without a device list, where auto is dsp), in LUTs (lut), or past the DSP
    blocks (auto) some in each, the DSP blocks' outputs routed far: the adder tree sums LUT
    products too, so the placer keeps it with them while the DSP blocks spread over the die's DSP
    rows (the KWS shape at w4a6, fold 32x11 6x32 32x6 2x4, target_mhz 85: a DSP block's output to
    three adders, 13.9 ns, 7.85 of it one route from x=114 to x=36, where a DSP product beside its
    tree routes in about 4), and the operand copies the LUT products share with them. The
    products of one `kernel` (the pipeline's registers): auto within the DSP blocks timed as LUT
    products, since the design's other kernels may take the blocks."""
    if mul == "dsp":
        return (DSP_SITE,)
    if mul == "auto" and blocks is not None and products > blocks:
        return (LUT_SITE, FAR_DSP_SITE)
    return (LUT_SITE,) if mul == "lut" or kernel else (DSP_SITE,)


def delays(device: Device) -> Delays:
    """The delays of `device`'s family at its speed grade (ECP5 grade 6 when it has none)."""
    if device.family == "ecp5":
        return DELAYS[("ecp5", device.speed or 6)]
    return DELAYS[(device.family, None)]


def target_period(config: HardwareConfig) -> tuple[float, Delays] | None:
    """(period in ns, the part's delays) of `config`'s target_mhz, None without one."""
    return None if config.target_mhz is None else (1000.0 / config.target_mhz, delays(config.timing_part()))


WIRE_OPS = frozenset({K.CAST, K.BITCAST})
CARRY_OPS = frozenset({K.ADD, K.SUB, K.NEG, K.CMPLT})
CHAIN_OUT = frozenset({K.ADD, K.SUB, K.NEG})                     # sums out of a carry chain
CHAIN_IN = frozenset({K.ADD, K.SUB, K.NEG, K.CMPLT, K.MAX})      # operands into one
ABSORBED_OPS = frozenset({K.WHERE, K.AND, K.OR, K.XOR})


def logic_ns(v: ir.Op, width: int, d: Delays) -> float:
    """The logic of integer op `v` whose result (for a compare its operands, for a shift by a
    variable amount that amount) is `width` bits wide: 0 for wires (casts, constant shifts), else
    its cells (module docstring)."""
    consts = [isinstance(s, ir.Const) for s in v.srcs]
    if v.op in WIRE_OPS or (v.op in (K.SHL, K.SHR) and consts[1]):
        return 0.0
    if (test := ir.bit_test(v)) is not None:   # +-2**k: a LUT tree on x's high bits; 0: x's sign
        k = max(0, abs(test[1]).bit_length() - 1)
        tree = math.ceil(math.log(max(2, width - k), 4)) if test[1] else 0
        return d.lut * (tree + (v.op is K.MAX))    # and a max's select
    if v.op in CARRY_OPS:
        return d.carry_ns(width)
    if v.op is K.MAX:                          # compare, then the select's multiplexer
        return d.carry_ns(width) + d.lut
    if v.op in (K.CMPEQ, K.CMPNE):
        return d.lut * max(1, math.ceil(math.log(max(2, width), 4)))
    if v.op in (K.SHL, K.SHR):                 # a barrel shifter: a multiplexer level per bit of amount
        return d.lut * max(1, width)
    if v.op is K.MUL:                          # by a constant (mul_const's few adds, or a DSP)
        return 2 * d.carry_ns(width)
    if v.op in (K.CDIV, K.CMOD):
        return 4 * d.carry_ns(width)
    return d.lut                               # where, and, or, xor


def index_ns(index: ir.Value, width: Callable[[ir.Value], int], d: Delays,
             registered: Callable[[ir.Value], bool]) -> float:
    """The path of a memory index computed from the step's counters (a read address, a store's
    index) into the register that follows it (from fp_pipeline 2 a read address's first,
    pipeline.Schedule.address_levels; a store's index its stage register): from a counter's
    register, or a value `registered` in a register of its own (with target_mhz a counter times a
    constant, or a sum of such multiples: kernel._Scaled), through each op's logic and a route before it, local after the
    first; 0 for a constant index (a gather's, through a load, is not this path). The
    sequential digits CNN at target_mhz 200 had such a path as its critical one: a scaled
    counter through three adders into a read address register, 7.0 ns (2.8 logic, 3.7 routing;
    this says 7.5), where the model timed the datapath alone (compiler/passes/indices.py now
    sums such an index as a tree)."""
    memo: dict[int, float | None] = {}

    def arrive(v: ir.Value) -> float | None:
        if id(v) in memo:
            return memo[id(v)]
        out: float | None = None
        if isinstance(v, ir.Counter) or registered(v):
            out = d.clk_q
        elif isinstance(v, ir.Op) and not v.dtype.is_float:
            ins = [arrive(x) for x in v.srcs]
            if any(t is not None for t in ins):
                consts = [int(x.value) for x in v.srcs if isinstance(x, ir.Const)]
                shift = v.op is K.MUL and consts and abs(consts[0]) & (abs(consts[0]) - 1) == 0
                own = 0.0 if shift else logic_ns(v, width(v), d)      # a power of two: wiring
                t = max(t for t in ins if t is not None)
                # a route from the registers, then local ones between the index's few cells
                out = t + ((d.route_ns(1) if t <= d.clk_q else d.route_local) + own if own else 0.0)
        memo[id(v)] = out
        return out
    t = arrive(index)
    return 0.0 if t is None or t <= d.clk_q else t + d.route_local + d.setup


def _range_check_ns(width: int, inside: bool, d: Delays) -> float:
    """A read address's check that it is inside its memory (kernel._index_ok: two compares, then
    the address or 0 by a LUT), after the address, where its interval can leave the memory."""
    return 0.0 if inside else d.route_local + d.carry_ns(width) + d.lut


def read_index_ns(index: ir.Value, inside: bool, width: Callable[[ir.Value], int], d: Delays,
                  registered: Callable[[ir.Value], bool]) -> float:
    """index_ns of a read address as a tree of adders, with its range check where it can leave
    the memory (not `inside`); 0 for a constant index."""
    t = index_ns(index, width, d, registered)
    return t + _range_check_ns(width(index), inside, d) if t else 0.0


def sum_register_ns(width: int, inside: bool, d: Delays) -> float:
    """A read address built as a register of its own (kernel._Scaled._sum), `width` bits: its next
    value, which the address register takes, is the register plus a step picked by registered
    flags (a LUT a bit), then the range check where the address can leave its memory."""
    return (d.clk_q + d.route_ns(1) + d.lut + d.route_local + d.carry_ns(width)
            + _range_check_ns(width, inside, d) + d.setup)


@dataclass(frozen=True)
class Estimate:
    """The model's slowest register-to-register path of a design."""
    period_ns: float
    where: str               # what the path is, e.g. "k0: 3 adds (16 bits), 5.9 ns"
    placement: bool = False  # the period is placement's bound (`placed`), not a modelled path

    @property
    def fmax_mhz(self) -> float:
        return 1000.0 / self.period_ns if self.period_ns > 0 else float("inf")


class Paths:
    """The paths through one kernel's integer ops, by stage. `arrival` holds, for each op of a
    stage, when its value is ready after the clock edge (ns, from the launching register's
    clock-to-out); a value from a register (a load, a unit's result, an earlier stage's value, a
    counter) starts at the register's clock-to-out plus its route.

    Scheduling (`decide`, pipeline.schedule with target_mhz): an op is registered where one of
    its users would end later than the period allows, looking through wires (casts, constant
    shifts) to the user that has logic. Estimating (`measure`): the slowest path of a built
    schedule."""

    def __init__(self, kernel: ir.KernelIR, d: Delays, order: list[ir.Value], operands, config: HardwareConfig,
                 skip: set[int] = frozenset(), *, limit_mhz: float | None = None, load_clk_q: float | None = None):
        self.d = d
        self.limit = 1000.0 / limit_mhz - d.setup if limit_mhz else float("inf")
        self.ranges = analyze(kernel, acc_ranges(kernel, config))     # id(value) -> its interval
        self.widths = {i: r.shape.width for i, r in self.ranges.items()}
        self.users: dict[int, list[ir.Value]] = {}
        for v in order:
            for o in operands(v):
                self.users.setdefault(id(o), []).append(v)
        self.skip = skip
        self.load_clk_q = d.clk_q if load_clk_q is None else load_clk_q
        self.arrival: dict[int, float] = {}
        self.tails: dict[int, float] = {}         # id(product) -> product_tail_ns (product_tails)
        self.via: dict[int, ir.Value] = {}         # id(op) -> its operand the path comes through
        self.logic: dict[int, float] = {}
        self.ahead: dict[int, float] = {}        # id(value) -> the slowest user's route and logic after it
        self.writes = store_routes(kernel, self.width, d)
        for v in reversed(order):
            # no user in the kernel's ops: a register (a chain's, an accumulator) packed beside
            # it, or a memory's write port (store_routes)
            self.ahead[id(v)] = max([self.writes.get(id(v), 0.0)]
                                    + [self._after(v, u) for u in self.users.get(id(v), ())])

    def width(self, v: ir.Value) -> int:
        return self.widths.get(id(v), v.dtype.bits)

    def product_tails(self, products, registers: int, sites: tuple[ProductSite, ...]) -> None:
        """Each of `products` (integer products of data, `registers` cycles long, built at any of
        `sites`) hands its users its Y product_tail_ns after its last register, the latest of its
        sites': an ECP5 LUT product's last levels and the adders after it are one stage (the KWS
        3-bit shape at target_mhz 100: a 3x3 product's second carry chain, a LUT and three adders,
        10.8 ns, where the stage was modelled from the product's register), and so are a DSP
        block's output route and those adders."""
        for v in products:
            a, b = self.width(v.srcs[0]), self.width(v.srcs[1])
            self.tails[id(v)] = max(product_tail_ns(min(a, b), max(a, b), registers, s, self.d) for s in sites)

    def fanout(self, v: ir.Value) -> int:
        """The loads of `v`'s net: one per user, the width of a multiplexer it selects."""
        return max(1, sum(self.width(u) if self._selects(v, u) else 1 for u in self.users.get(id(v), ())))

    @staticmethod
    def _selects(v: ir.Value, u: ir.Value) -> bool:
        """Whether one bit of `v` selects each bit of `u`: a where's condition, a ReLU's or a
        clamp's operand (its sign, or a LUT tree on its high bits: ir.bit_test)."""
        if not isinstance(u, ir.Op):
            return False
        return u.op is K.WHERE and u.srcs[0] is v or \
            u.op is K.MAX and (test := ir.bit_test(u)) is not None and test[0] is v

    def own(self, v: ir.Value) -> float:
        """The logic of op `v` alone (0 for float ops, counted by their units)."""
        if id(v) not in self.logic:
            plain = isinstance(v, ir.Op) and not v.dtype.is_float and not any(s.dtype.is_float for s in v.srcs)
            if plain and self.absorbed(v):
                self.logic[id(v)] = 0.0
            elif plain:
                wide = v.op in CARRY_OPS or v.op is K.MAX
                width = max([self.width(v)] + ([self.width(s) for s in v.srcs] if wide else []))
                if v.op in (K.SHL, K.SHR) and not isinstance(v.srcs[1], ir.Const):
                    width = self.width(v.srcs[1])
                self.logic[id(v)] = logic_ns(v, width, self.d)
            else:
                self.logic[id(v)] = 0.0
        return self.logic[id(v)]

    def is_wire(self, u: ir.Value) -> bool:
        return isinstance(u, ir.Op) and (self.own(u) == 0 and u.op in WIRE_OPS | {K.SHL, K.SHR} or self.absorbed(u))

    def absorbed(self, v: ir.Op) -> bool:
        """A LUT of at most two nets (an accumulator's reset select `where(first, 0, acc)`, a
        mask) whose every user is an add or subtract: on ECP5 the chains' own LUT4s compute it
        (compiler/pnr/carry_chains.absorb_operand_luts), so its operands' nets go straight into
        the chains."""
        if self.d.family != "ecp5" or v.op not in ABSORBED_OPS or v.dtype.is_float \
                or sum(not isinstance(s, ir.Const) for s in v.srcs) > 2:
            return False
        users = self.users.get(id(v), ())
        return bool(users) and all(isinstance(u, ir.Op) and u.op in (K.ADD, K.SUB) and not u.dtype.is_float
                                   for u in users)

    def _after(self, v: ir.Value, u: ir.Value) -> float:
        if self.is_wire(u):
            return self.ahead[id(u)]            # the same net, on to u's users
        return self._route(v, u, self.fanout(v)) + (self.own(u) if id(u) not in self.skip else 0.0)

    def _route(self, o: ir.Value, u: ir.Value | None, loads: int) -> float:
        """The net from `o`'s logic to user `u`'s (its register's: route_ns): route_chain
        where both are carry chains and `u`'s spans more than two tiles (a sum into a wide add, a
        subtract or a compare: CHAIN_LONG_BITS)."""
        into_chain = isinstance(u, ir.Op) and u.op in CHAIN_IN and not u.dtype.is_float and ir.bit_test(u) is None \
            and max(self.width(x) for x in (u, *u.srcs)) > CHAIN_LONG_BITS
        return max(self.d.route_chain, self.d.route_ns(loads)) if into_chain and self._chain_out(o) \
            else self.d.route_ns(loads)

    def _chain_out(self, o: ir.Value) -> bool:
        """Whether `o`'s net is a carry chain's sums (through wires: casts, constant shifts)."""
        if not isinstance(o, ir.Op) or o.dtype.is_float:
            return False
        if o.op in CHAIN_OUT:
            return self.own(o) > 0
        return self.is_wire(o) and not self.absorbed(o) and bool(o.srcs) and self._chain_out(o.srcs[0])

    def start(self, o: ir.Value, r: int | None, ready, fanout, *, routed: bool = True,
              user: ir.Value | None = None) -> float:
        """When operand `o` of op `user`, whose inputs are in stage `r`, is there (ns): at its
        driver's output, plus its route unless not `routed` (a wire: casts and shifts are the
        same net)."""
        if isinstance(o, ir.Const):
            return 0.0
        if r is not None and ready.get(id(o)) == r and id(o) in self.arrival and id(o) not in fanout:
            out, loads = self.arrival[id(o)], self.fanout(o)
            if routed and out > self.from_register(o):        # o's logic in this stage: its net
                return out + self._route(o, user, loads)
        elif ready.get(id(o), 0) is None and not isinstance(o, ir.Load):
            # counters and constants only: each user has its own copy (Datapath.local), whose
            # loads are the user's (a select's: its multiplexer's bits)
            out, loads = self.d.clk_q, max((self.width(u) for u in self.users.get(id(o), ()) if self._selects(o, u)),
                                           default=1)
        else:                                          # from a register: a fan-out value's copy drives its share
            # read data taken in a later stage than it arrives in comes from a fabric register
            at_read = isinstance(o, ir.Load) and (r is None or ready.get(id(o)) is None or ready[id(o)] >= r)
            out = self.load_clk_q if at_read else self.from_register(o)
            loads = fanout.get(id(o), self.fanout(o))
        return out + (self.d.route_ns(loads) if routed else 0.0)

    def from_register(self, v: ir.Value) -> float:
        """When `v` leaves its register: clock-to-out, and a LUT product's Y its tail later (the
        chain's levels after its last register: product_tails)."""
        return self.d.clk_q + self.tails.get(id(v), 0.0)

    def _arrive(self, v: ir.Op, r: int | None, ready, operands, fanout) -> float:
        wire = self.is_wire(v)
        starts = [(self.start(o, r, ready, fanout, routed=not wire, user=v), o) for o in operands(v)]
        if not starts:
            return self.own(v)
        t, o = max(starts, key=lambda p: p[0])
        self.via[id(v)] = o
        return t + self.own(v)

    def describe(self, v: ir.Value) -> str:
        """The ops of the path that ends at `v`, first to last: "load -> add 12b -> max 12b"."""
        chain = []
        while v is not None and len(chain) < 64:
            chain.append(v)
            v = self.via.get(id(v)) if id(v) in self.arrival and self.arrival[id(v)] > self.d.clk_q or \
                chain[-1] is v and len(chain) == 1 else None
        names = [f"{x.op.value} {self.width(x)}b" if isinstance(x, ir.Op) else type(x).__name__.lower()
                 for x in reversed(chain)]
        return " -> ".join(names)

    def decide(self, v: ir.Op, r: int, ready, operands, latency: dict[int, int], fanout, *,
               free: bool = True) -> None:
        """Whether integer op `v`, whose operands are ready in stage `r`, ends its stage with a
        register: when its value and the slowest route and logic after it pass the period, or
        when it is a fan-out value with logic in its stage (its copies are a register more).
        A register the schedule placed for another reason (a unit's, a read multiplexer's) stays;
        an adder-tree level's (fp_pipeline 3) is this decision's. Not `free`: the op is on an
        accumulator's one-cycle loop, its value only followed."""
        structural = latency.get(id(v), 0) > 0 and v.op not in (K.ADD, K.SUB)
        if v.dtype.is_float or any(s.dtype.is_float for s in v.srcs) or structural:
            self.arrival[id(v)] = self.from_register(v)        # float logic, a registered unit
            return
        arrive = self._arrive(v, r, ready, operands, fanout)
        has_logic = self.own(v) > 0 or any(id(o) in self.arrival and self.arrival[id(o)] > self.d.clk_q
                                           for o in operands(v) if ready.get(id(o)) == r)
        # a wire (a cast, a constant shift) is its operand's net: a register on it is one on that
        # operand, which decided for itself; a fan-out wire's copies are a register anyway
        late = arrive + self.ahead[id(v)] > self.limit and not self.is_wire(v)
        if free and (late or (id(v) in fanout and has_logic)):
            latency[id(v)] = 1
            self.arrival[id(v)] = self.d.clk_q
        else:
            latency.pop(id(v), None)
            self.arrival[id(v)] = arrive

    def measure(self, order: list[ir.Value], ready, latency, fanout, operands, skip: set[int],
                stored: set[int] = frozenset()) -> tuple[float, str]:
        """(ns, what) of the slowest register-to-register path through the kernel's integer ops
        as scheduled (`ready`, `latency`: pipeline.Schedule's), each ending at the register beside
        its last op (the path through a user in the same stage is the user's), or for a value in
        `stored` (taken by its store in the stage it is computed) at its memory's write port.
        Float ops, counters and constants (`skip`) are left out."""
        worst, what = 0.0, ""
        for v in order:
            if not isinstance(v, ir.Op) or id(v) in skip:
                continue
            lat = latency.get(id(v), 0)
            if v.dtype.is_float or any(s.dtype.is_float for s in v.srcs) or (lat and v.op not in (K.ADD, K.SUB)):
                self.arrival[id(v)] = self.from_register(v)    # a unit's register (its stages: product_ns)
                continue
            r = None if ready.get(id(v)) is None else ready[id(v)] - lat
            arrive = self._arrive(v, r, ready, operands, fanout)
            # into a register beside it (its own, a chain's, an accumulator), or a memory's write
            # port where its store takes it unregistered
            write = self.writes.get(id(v), 0.0) if id(v) in stored and not lat else 0.0
            end = arrive + write + self.d.setup
            self.arrival[id(v)] = self.d.clk_q if lat else arrive
            if end > worst:
                worst, what = end, self.describe(v) + (" -> a memory's write data" if write else "")
        return worst, what


def store_routes(kernel: ir.KernelIR, width: Callable[[ir.Value], int], d: Delays) -> dict[int, float]:
    """id(value) -> the route from a buffer store's data to its memory's write port (to every
    row of a LUT RAM: each bit's write data goes to the cell of each row that holds it; or to its
    block RAMs), for an integer op computed from read data alone (no accumulator behind it).
    A store in the stage such a value is computed takes it straight from the logic that the read
    data's block RAM output register feeds: the elementwise relu(a + b), N = 300, at target_mhz
    150 (two lanes, a 150 x 8 output in LUT RAM of 10 rows) had read data -> add -> ReLU -> the
    write port as its critical path on every seed, 7.3-7.4 ns with 4.9-5.0 of routing, where the
    model, ending the path at a register beside the ReLU, timed it at 6.2: the routes out of a
    block RAM and into a memory are the longer ones (docs/timing.md). After an accumulator the
    model already times such a path long: an MLP's clip (max -> compare -> where) into its
    output LUT RAM, 5.0 ns placed, is 5.3 without the route."""
    sizes = {b.slot: b.size for b in kernel.buffers}
    stores = [s for s, _ in kernel.stores() if isinstance(s, ir.BufStore)]
    post = ir.after_accumulators(ir.toposort([s.value for s in stores]))
    out: dict[int, float] = {}
    for s in stores:
        if isinstance(s.value, ir.Op) and not s.value.dtype.is_float and id(s.value) not in post:
            place = ecp5_memory(sizes[s.buf], width(s.value)) if d.family == "ecp5" else None
            loads = place.rows if place is not None and place.kind == "lutram" else 1
            out[id(s.value)] = max(out.get(id(s.value), 0.0), d.route_ns(loads))
    return out


def product_ns(a_bits: int, b_bits: int, registers: int, site: ProductSite, d: Delays,
               unpack: int = 0) -> tuple[float, str]:
    """(ns, what) of the slowest stage of an integer product `registers` cycles long, from its
    registered operand copies (hw/datapath.Product), up to and including the adder it feeds when
    its last levels are not registered. In a MULT18X18D: the copies move into its input
    registers and its first register into its output register (compiler/pnr/dsp_registers.py), so
    its stages are the multiplier itself and its output routed to the adder (or, from two
    registers, to a landing register in the fabric), the routes far ones at a far `site`. In
    LUTs on ECP5 (lut_multiplier.chain_module): a row per bit of the narrower operand on carry
    chains, cut where chain_cuts says (_chain_stages); elsewhere (the radix-4 module): the
    multiples A and 3A, a 4:1 multiplexer row per two bits of B, a tree of adders; one register
    in the tree's middle, from two one after the multiples, with three one on Y. `unpack`: a
    pack's field width (hw/dsp_pack.py), each field's borrow added on a carry chain that wide
    before its last register: on the block's output route with one or two registers, after the
    landing register with three."""
    width = a_bits + b_bits
    adder = d.route_ns(1) + d.carry_ns(width)                       # the adder the product feeds
    if not site.lut:
        # far: the operand copies, which the LUT products share, are placed with them too (AD08,
        # fold 76, target_mhz 200, seed 1: a copy into a DSP block's input register, 8.4 ns of
        # one route, its critical path)
        route = site.dsp_route(d)
        # the register before the operand copies into the block's input registers; the block
        inside = max(d.overhead + route, d.overhead + d.dsp)
        land = d.dsp_clk_q + route + d.setup                        # its output to a landing register
        if max(a_bits, b_bits) > 18:   # pieces of a DSP block each: their sum in the fabric
            sum_ns = d.route_ns(1) + d.carry_ns(width) + d.setup
            if registers >= 3:         # each piece registered in its block and landed, then summed (Product.split)
                return max(inside, land, d.clk_q + sum_ns), f"a {a_bits}x{b_bits} DSP product in pieces"
            if registers == 2:         # each piece registered in its block, summed the next cycle
                return max(inside, d.dsp_clk_q + route + sum_ns - d.route_ns(1)), \
                    f"a {a_bits}x{b_bits} DSP product in pieces"
            return d.overhead + d.dsp + route + sum_ns - d.route_ns(1), \
                f"a {a_bits}x{b_bits} DSP product summed unregistered"
        out = land if registers >= 2 else d.dsp_clk_q + route + d.carry_ns(width) + d.setup
        if unpack and registers >= 3:      # taken apart between the landing register and the last
            out = max(out, d.clk_q + d.route_ns(1) + d.carry_ns(unpack) + d.setup)
        elif unpack:                       # on the block's output route
            out += d.carry_ns(unpack)
        return max(inside, out), f"a {a_bits}x{b_bits} DSP product" + (f" of {unpack}-bit fields" if unpack else "")
    if d.family == "ecp5":
        return d.overhead + max(_chain_stages(a_bits, b_bits, registers, d)), f"a {a_bits}x{b_bits} LUT product"
    rows = (b_bits + 1) // 2
    levels = max(0, (rows - 1).bit_length())
    multiples = d.route_ns(10) + d.carry_ns(a_bits + 2)            # the operand copy into 3A
    rows_ns = d.route_ns(rows) + 2 * d.lut                          # a row's 4:1 multiplexer (LUT, PFUMX)
    level_ns = d.route_ns(1) + d.carry_ns(width)
    first = (levels + 1) // 2 if registers else levels
    stages = [multiples + rows_ns + first * level_ns] if registers < 2 else [multiples, rows_ns + first * level_ns]
    tail = (levels - first) * level_ns
    stages.append(tail + d.route_ns(1) if registers >= 3 else tail + adder)
    return d.overhead + max(stages), f"a {a_bits}x{b_bits} LUT product"


def _chain_levels(a_bits: int, b_bits: int, d: Delays) -> list[float]:
    """Each level of an ECP5 LUT product's tree (lut_multiplier.chain_module: a row per bit of
    the narrower operand, added two at a time on carry chains whose LUTs compute the rows' ANDs):
    the first from the operand copies, whose bits go to every row."""
    rows = min(a_bits, b_bits)
    width = a_bits + b_bits
    levels = max(1, (rows - 1).bit_length())
    return [d.route_ns(rows) + d.carry_ns(width)] + [d.route_ns(1) + d.carry_ns(width)] * (levels - 1)


def _chain_split(a_bits: int, b_bits: int, registers: int, d: Delays) -> tuple[list[float], float]:
    """(the logic and routes of each stage of an ECP5 LUT product `registers` cycles long that
    ends at one of its registers, those of its levels after the last register): cut where
    lut_multiplier.chain_cuts cuts it; the second is 0 when Y is a register."""
    from .synth.lut_multiplier import chain_cuts
    levels = _chain_levels(a_bits, b_bits, d)
    stages, at = [], 0
    for c in sorted({c for c in chain_cuts(len(levels), registers) if c <= len(levels)}):
        stages.append(sum(levels[at:c]))
        at = c
    return stages, sum(levels[at:])


def _chain_stages(a_bits: int, b_bits: int, registers: int, d: Delays) -> list[float]:
    """The stages of _chain_split, the last up to and including the adder the product feeds
    when Y is not a register."""
    stages, tail = _chain_split(a_bits, b_bits, registers, d)
    if tail:                                                          # Y from logic: into its adder
        stages.append(tail + d.route_ns(1) + d.carry_ns(a_bits + b_bits))
    return stages


def product_tail_ns(a_bits: int, b_bits: int, registers: int, site: ProductSite, d: Delays) -> float:
    """How much later than a register's output a product's Y is, before its route to its users:
    an ECP5 LUT product's levels after its last register when Y is not one (a 3x3 product with
    one register: the second of its two levels, a carry chain), a DSP block's output register
    and its route to the fabric from one register (the fabric's own route counted by the user);
    0 where Y is a register in the fabric (paths in the adder tree start there)."""
    if registers <= 0:
        return 0.0
    if not site.lut:
        return 0.0 if registers >= 2 else d.dsp_clk_q - d.clk_q + site.dsp_route(d) - d.route_ns(1)
    if d.family != "ecp5":
        return 0.0
    return _chain_split(a_bits, b_bits, registers, d)[1]


# Placement. The paths above are a design's cells and short routes; on a placed design of
# thousands of LUTs the slowest path is mostly one long route, however little logic its stage
# holds (the pipelined bench designs: 4-11 ns of routing on one or two nets). How long, by the
# design's size: PLACED_PERIOD_NS, the period nextpnr (router2; the median over the heap and
# static placers and the seeds measured) closes the project's designs at, by their LUT4s as
# synthesised, on the LFE5U-85F at speed grade 6 (docs/timing.md "Placement in the estimate"
# lists the designs; refitted after the netlist rewrites of 2026-12-01's third session, which
# took the small designs from 6.8-7.2 ns to 4.8-6.7; the two largest points refitted on
# 2026-12-04 to the pipelined designs of 31k-48k LUTs, AD08 and the KWS shapes at `target_mhz`,
# 9.0-11.1 ns, where 10.2 and 13.4 had come from earlier netlists). Between the points it is
# interpolated in log2(LUTs); past the last it stays flat.
PLACED_PERIOD_NS: Mapping[str, tuple[tuple[int, float], ...]] = {
    "ecp5": ((600, 4.85), (1_800, 5.8), (3_400, 6.55), (16_600, 9.8), (31_000, 9.8), (51_000, 10.8)),
}
PLACED_GRADE = 6            # the speed grade PLACED_PERIOD_NS was measured at; others scale as the cells
# its error against nextpnr, measured (docs/timing.md), as `dse eval --estimate` says it
PLACED_ERROR = ("against nextpnr 6% median and 26% largest error where placement decides (the 14 designs it was "
                "fitted to), 5-24% where the modelled path does")


def placed_period_ns(luts: float, d: Delays) -> float | None:
    """The shortest period a placed design of `luts` LUT4s closes at (PLACED_PERIOD_NS), for the
    family and grade of `d`; None where the family has no calibration."""
    points = PLACED_PERIOD_NS.get(d.family)
    if not points:
        return None
    scale = d.clk_q / DELAYS[(d.family, PLACED_GRADE)].clk_q
    x = math.log2(max(luts, 1.0))
    xs = [math.log2(n) for n, _ in points]
    if x <= xs[0]:
        return points[0][1] * scale
    for (x0, (_, y0)), (x1, (_, y1)) in zip(zip(xs, points), zip(xs[1:], points[1:])):
        if x <= x1:
            return (y0 + (y1 - y0) * (x - x0) / (x1 - x0)) * scale
    return points[-1][1] * scale


def placed(estimate: Estimate, luts: float | None, d: Delays) -> Estimate:
    """`estimate` (the slowest modelled path) or, where it is faster, what placement allows a
    design of `luts` LUT4s (placed_period_ns): the estimate of a row's `fmax_estimate_mhz`."""
    floor = placed_period_ns(luts, d) if luts else None
    if floor is None or floor <= estimate.period_ns:
        return estimate
    where = (f"placement: the longest routes of a placed design of ~{luts:,.0f} LUT4s, {floor:.1f} ns "
             f"(compiler/timing_model.py PLACED_PERIOD_NS; modelled path {estimate.period_ns:.1f} ns: {estimate.where})")
    return Estimate(floor, where, placement=True)


def memory_to_dsp_ns(d: Delays) -> float:
    """A block RAM's output register straight to a DSP block's input register: read data that
    is a product's operand with no copy between (Datapath.product), both registers in hard
    blocks, so nothing but the route between their columns, a DSP's route to the fabric twice
    (AD08 at target_mhz 200, grade 6: 1.0 + 8.0 of routing + 0.1 ns, the critical path)."""
    return d.bram_clk_q_reg + 2 * d.dsp_route + d.setup


# Families other than ECP5: a memory of fewer bits goes to LUT RAM (or flip-flops), a larger one
# to block RAM, as Yosys's memory mapping chose for the GEMV banks of configs/gemv_space.yaml on
# ECP5 once (1,376 and 1,024 bits: LUT RAM; 1,824 and 2,048: block RAM). ECP5 follows Yosys's own
# prices (hw/bram.ecp5_memory): bits alone put a 36 x 32 memory in LUT RAM, Yosys in a block RAM.
BRAM_MIN_BITS = 1536


def in_block_ram(depth: int, width: int, family: str, ports: int = 1, enables: int = 1) -> bool:
    """Whether synthesis builds a writable memory of `depth` x `width` bits, read at `ports`
    clocked ports and written with `enables` write-enable fields, as block RAM on `family`
    (what the delay model times and dse/estimate.py counts)."""
    if family == "ecp5":
        return ecp5_memory(depth, width, ports, enables).kind == "bram"
    return depth * width >= BRAM_MIN_BITS


def lutram_read_ns(depth: int, width: int, ports: int, d: Delays) -> tuple[float, str]:
    """A clocked read of a memory in LUT RAM (ECP5: TRELLIS_DPR16X4, 16 words x 4 bits): the
    registered address to every cell of one port's copy, a cell's read, the multiplexer over
    its rows (a LUT level a halving), into the read data's register; the cells, the multiplexer
    and the register placed together (every route a local one, the address's longer by its
    loads). The wine MLP 13-11-7-3 at target_mhz 200, its first weight memory (143 x 8 bits, 9
    rows, 18 cells a port) in LUT RAM: 7.1 ns from the address register to the read data's
    (routing 5.4: 2.0 to the cells, 0.2 to 1.2 between the levels), its critical path (148.5
    MHz), where this says 7.5; the sequential wine MLP at 2 lanes closed at 182.4 MHz (5.5 ns)
    with a packed 78 x 16 (5 rows, 20 cells) this says 6.6. Design.block_reads moves such a
    memory into block RAM."""
    place = ecp5_memory(depth, width, ports)
    levels = (place.rows - 1).bit_length()
    ns = (d.clk_q + d.route_ns(place.cells // max(1, ports), local=True) + d.lut
          + levels * (d.route_local + d.lut) + d.route_local + d.setup)
    return ns, f"a LUT RAM's read ({depth} x {width} bits, {place.rows} rows): address -> read data"


def block_ram_copy_ns(banks: int, loads: int, d: Delays, *, registered: bool = False) -> tuple[float, str]:
    """A copy between kernels of the sequential top (hw/top.py TopHW._copy) from a block RAM: its
    read data, from the block's output register where the copy registers it (`registered`:
    hw/top.registers_copy_data, `bram_clk_q_reg`) or else its clock-to-out (`bram_clk_q`),
    through the multiplexer over `banks` source banks that hold a group's elements (a LUT level
    a halving) into the write data of `loads` destination banks. Measured unregistered on the
    digits CNN, sequential, target_mhz 200 (LFE5U-25F, seed 1): at 1 lane 8.5 ns (5.8
    clock-to-out, 2.3 routing) where this says 7.0, at 4 lanes 10.9 (4.1 routing, three LUTs)
    where it says 8.9: the critical paths, at 117.0 and 92.1 MHz."""
    levels = (max(banks, 1) - 1).bit_length()
    ns = (d.bram_clk_q_reg if registered else d.bram_clk_q) + levels * (d.lut + d.route_local) \
        + d.route_ns(loads) + d.setup
    return ns, f"a copy's block RAM read data{f' through {banks} banks' if banks > 1 else ''} -> write data"


def word_write_ns(banks: int, width: int, depth: int, d: Delays, *, registered: bool = False,
                  members: int = 1) -> tuple[float, str]:
    """The read-modify-write of a packed memory written a word at a time (Pack.word_writes,
    hw/subword.py), as built from FANOUT_LEVEL (the kernel's registered `reading` flag selects
    the read address: KernelHW._reading_flag). In block RAM the word read goes through the
    merge multiplexers into the same block's write data: unregistered (5.6 ns from the clock,
    `bram_clk_q`: the w4a8 GEMV at 12 x 56, target_mhz 200, 11.4 ns), or `registered` in the
    block's output register (`bram_clk_q_reg`: word_read_registered); one multiplexer a bit, the
    other input a register (the override: before it, the merge forwarded earlier writes' words
    there, two LUT levels); unregistered, the write-hit flag is a path too (write_hit_ns),
    whichever is longer. In LUT RAM the read address goes from that flag through a LUT (a twin
    per 8 cells: pnr/lutram_fanout) to every LUT-RAM cell of the word, the data into its
    register (its hit flag, in the fabric beside its logic, was no slower than the design's
    other paths: word_read_registered).
    (Before the flag, the LUT RAM's address came through the ports' write enables and their
    any/all tree: the fine-tuned KWS network's 320-bit word, 80 cells, 13.4 ns.)
    `members` block RAMs sharing one read-modify-write (hw/subword.py, registered): each member
    selects its fields with a `use` of its own (`width` loads), made from the group's registers
    (`members` + 1 loads each) and the member's own flags in two LUT levels: the route across
    the members is a register's, not the merge's select (one `use` for 8 x 4 merge bits was the
    KWS shape's seed-2 critical path, 11.1 ns, 10.1 of it routing) nor the group's member
    compare's (copies of the group's `use`: 11.0 and 12.3 ns at two placements)."""
    bits = banks * width
    if not in_block_ram(depth, bits, d.family):
        # the address multiplexer's LUT has a twin per LUTRAM_GROUP cells (pnr/lutram_fanout)
        cells = math.ceil(bits / 4)
        ns = d.clk_q + d.route_ns(math.ceil(cells / LUTRAM_GROUP)) + d.lut + d.route_ns(min(cells, LUTRAM_GROUP)) \
            + d.lut + d.route_ns(1) + d.setup
        return ns, f"a packed LUT RAM's read-modify-write ({banks} x {width} bits): read address -> read data"
    clk_q = d.bram_clk_q_reg if registered else d.bram_clk_q
    ns = clk_q + d.route_ns(2) + d.lut + d.route_ns(1) + d.setup
    read = (ns, f"a packed block RAM's read-modify-write ({banks} x {width} bits): "
                f"{'registered ' if registered else ''}read data -> merge -> write data")
    if members > 1:
        select = (d.clk_q + d.route_ns(width) + d.lut + d.route_ns(1) + d.setup,
                  f"a read-modify-write shared by {members} block RAMs ({banks} x {width} bits): "
                  f"a member's override select -> its merge -> write data")
        copies = (d.clk_q + d.route_ns(members + 1) + 2 * d.lut + d.route_ns(1) + d.setup,
                  f"a read-modify-write shared by {members} block RAMs ({banks} x {width} bits): "
                  f"the group's registers -> every member's override select")
        read = max(read, select, copies)
    return read if registered else max(read, write_hit_ns(banks, width, depth, d))


def write_hit_ns(banks: int, width: int, depth: int, d: Delays) -> tuple[float, str]:
    """Unregistered (hw/subword.py without `registered_read`), whether a write is at the address
    of the write before it is a compare of the pending write's address with the new one, which
    comes from the host bus's address copy shared by HOST_GROUP memories (3 loads each: the
    compare, the pending address, the port), and that flag selects every field of the word's
    override: the address copy -> the compare's LUT levels -> the word's `banks * width`
    override bits (a LUT each) -> their register. The KWS shape at 3 bits, target_mhz 100 (12 x
    3-bit words in 83 block RAMs): 12.7 ns (routing 10.8), its critical path (78.7 MHz), where
    this said 9.9 with a single load on the first route; registered (word_read_registered),
    96.5 MHz, its path a LUT product's."""
    bits, address = banks * width, max(1, math.ceil(math.log2(max(2, depth))))
    levels = 1 + math.ceil(math.log(math.ceil(address / 2) + 1, 4))     # bit pairs, then their AND with the flag
    ns = (d.clk_q + d.route_ns(3 * HOST_GROUP) + levels * d.lut + (levels - 1) * d.route_ns(1) + d.route_ns(bits)
          + d.lut + d.route_ns(1) + d.setup)
    return ns, f"a packed block RAM's write-hit flag ({banks} x {width} bits): address -> compare -> override"


def word_read_registered(banks: int, width: int, depth: int, config: HardwareConfig) -> bool:
    """Whether a packed block RAM written a word at a time registers the word it reads before
    the merge (hw/subword.py `registered_read`): with a `target_mhz` whose period the
    unregistered paths exceed (word_write_ns: the read data and the write-hit flag, which
    registered is a register per 36 bits made a cycle ahead). It costs a second pending
    address, the write's fields held a cycle, a second override and a third input per bit of
    the override's multiplexer (the KWS shape at 3 bits, 82 such memories, target_mhz 100:
    +7,200 LUTs, +9,300 FFs, for 78.7 -> 96.5 MHz), so not where nothing asks for the clock.
    Not in LUT RAM, whose read data is in the fabric already: registered there, the w4a8 GEMV
    16x64 at 4x8 and target_mhz 200 (its write-hit flag the slowest path, 6.8 ns) closed at
    145.6, 153.5, 132.3 MHz (nextpnr seeds 1-3) against 146.8, 147.2, 133.2 without, for 217
    LUTs and 352 FFs more."""
    if not config.target_mhz:
        return False
    d = delays(config.timing_part())
    return (in_block_ram(depth, banks * width, d.family)
            and word_write_ns(banks, width, depth, d)[0] > 1000.0 / config.target_mhz)


def pack_sites(sites: tuple[ProductSite, ...]) -> list[ProductSite]:
    """Where a pack of products (hw/dsp_pack.py) is timed among `sites`: planned to be a DSP
    block, at the DSP sites of `sites` (DSP_SITE when all are LUTs')."""
    return [s for s in sites if not s.lut] or [DSP_SITE]


def product_registers(shapes, period_ns: float, sites: tuple[ProductSite, ...], d: Delays, least: int = 1,
                      packs=()) -> int:
    """The fewest registers (from `least`, at most 3) that fit every product of operand widths
    `shapes`, at each of `sites`, and every pack of products (`packs`: operand widths and field
    width, hw/dsp_pack.py) at each DSP site, into `period_ns` (product_ns); 3 when none does."""
    for registers in range(least, 4):
        if all(product_ns(min(a, b), max(a, b), registers, s, d)[0] <= period_ns for a, b in shapes for s in sites) \
                and all(product_ns(min(a, b), max(a, b), registers, s, d, k)[0] <= period_ns
                        for a, b, k in packs for s in pack_sites(sites)):
            return registers
    return 3

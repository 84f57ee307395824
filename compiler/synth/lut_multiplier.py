"""Products built in LUTs (`mul: lut`, and `auto` past the device's DSPs): a radix-4 multiplier
whose rows are 4:1 multiplexers of precomputed multiples, summed by a tree of carry-chain adders.

Yosys's own `booth` pass builds a radix-4 Booth multiplier whose partial products go through a
carry-save tree of full adders that ABC maps to plain LUTs: on ECP5 an 8x8 signed product costs
170 LUT4s and 8 carry cells (CCU2C, two LUTs each). A LUT4 fabric does an addition best on its
carry chain (one LUT per bit) and a 4:1 multiplexer in two LUT4s and the slice's PFUMX. So here
each radix-4 digit of B picks one of {0, A, 2A, 3A} (the top digit of a signed B one of
{0, A, -2A, -A}); 3A (and -A) are computed once per product (and once per shared operand: Yosys's
`opt_merge` makes the copies of a broadcast operand's multiples one); the rows are added in a
balanced tree whose every sum is a `keep` wire, so `alumacc` cannot fold the tree back into one
`$macc` that `maccmap` would turn into full adders again. Each sum is only as wide as its value
can be (and never wider than the product's Y), and the low bits of the lower operand, under the
higher one's shift, pass through without an adder. ECP5, 8x8 signed to 16: 72 LUT4s, 24 PFUMX,
25 CCU2C (122 LUTs counted as synth.py counts them, against Booth's 186; docs/multipliers.md).

The map is Verilog for Yosys's `techmap`: one module per distinct product shape of the design,
each refusing (`_TECHMAP_FAIL_`) every other shape, so a selection `a:tinyhw_mul=lut` maps the
marked `$mul` cells and nothing else. Shapes it does not take (operands narrower than 2 bits,
mixed signedness) stay for the `booth` pass that runs after it.

Correctness: tests/test_lut_multiplier.py proves generated modules equal to `A * B` with Yosys's
SAT solver (`miter -equiv; sat -prove`) for signed and unsigned shapes up to 8 x 8, and checks
wider ones (to 24 x 24) on extreme and random operands. The RTL, and so every simulation, is
the same for every `mul`: the map only changes what Yosys builds.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

MAP_FILE = "tinyhw_lut_mul.v"


@dataclass(frozen=True)
class Shape:
    """A `$mul` cell's parameters."""
    a_width: int
    b_width: int
    y_width: int
    signed: bool

    @property
    def name(self) -> str:
        return f"tinyhw_lut_mul_{self.a_width}x{self.b_width}_{self.y_width}{'s' if self.signed else 'u'}"

    def registered_name(self, registers: int = 1) -> str:
        """The module of this product with its `registers` inside (`module(registers=...)`)."""
        return self.name.replace("_mul_", f"_mulreg{registers if registers > 1 else ''}_", 1)


REGISTERED = re.compile(r"\\?tinyhw_lut_mulreg(\d*)_(\d+)x(\d+)_(\d+)([su])\b")
"""A registered product module's name, whose groups give its registers and Shape (`registered_of`)."""


def registered_of(match: re.Match) -> tuple[Shape, int]:
    """(Shape, registers) of a REGISTERED match."""
    return (Shape(int(match.group(2)), int(match.group(3)), int(match.group(4)), match.group(5) == "s"),
            int(match.group(1) or 1))


def takes(shape: Shape) -> bool:
    """Whether the map builds this shape (the rest is left to `booth`)."""
    return min(shape.a_width, shape.b_width) >= 2 and shape.y_width >= 1


@dataclass
class _Term:
    """A partial sum: `width`-bit wire `name` standing for value << `shift`."""
    name: str
    width: int
    shift: int


def module(shape: Shape, registers: int = 0, target: str = "") -> str:
    """The techmap module (Verilog) for one product shape: on ECP5 (`target` "ecp5") partial
    products summed on carry chains (chain_module), elsewhere the radix-4 multiplier below."""
    if target == "ecp5":
        return chain_module(shape, registers)
    return _radix4_module(shape, registers)


def _radix4_module(shape: Shape, registers: int = 0) -> str:
    """The radix-4 multiplier (module docstring) for one product shape. `registers` > 0: instead, a plain
    module `Y = A * B` that many clocks later (ports A, B, CLK, Y), with the registers inside:
    one in the middle of the adder tree (after its first ceil(levels / 2) levels, or after the
    rows when there is no tree): a LUT product of the int8 GEMV had its operand copy, the
    multiples' adder, the row multiplexers and two carry chains between two registers (12.9 ns
    on ECP5); a second after the multiples (A, 3A, -A and B), which takes the 3A adder out of
    the row multiplexers' path (an operand copy, its 3A adder and 5.2 ns of routing to a row
    multiplexer was the 16x16 GEMV's critical path on one seed); a third on Y (target_mhz,
    compiler/timing_model.py: with two, the tree's last levels and the adder the product feeds
    share a stage). No reset, as the product registers they replace have none
    (hw.datapath.Product); every registered value starts at 0, so Y does too, as the Product's
    registers do."""
    if registers not in (0, 1, 2, 3):
        raise ValueError(f"a LUT product takes 0 to 3 registers, not {registers}")
    s = shape
    # Rows of multiples of A, one per two bits of B (compiler.synth.multipliers orients each product:
    # a broadcast operand on A, so its multiples are shared, else the narrower operand on B).
    n, m = s.a_width, s.b_width
    sgn = "signed " if s.signed else ""
    digits = (m + 1) // 2
    rw = n + 2                                      # 3A (and -2A) need two bits more than A
    if m % 2:      # one more bit of B, to a whole number of digits: its sign, or a zero
        b_ext = f"{{B[{m - 1}], B}}" if s.signed else "{1'b0, B}"
    else:
        b_ext = "B"
    if registers:
        lines = [
            f"module {s.registered_name(registers)} (A, B, CLK, Y);",
            f"  input [{n - 1}:0] A; input [{m - 1}:0] B; input CLK; output [{s.y_width - 1}:0] Y;",
        ]
    else:
        lines = [
            '(* techmap_celltype = "$mul" *)',
            f"module {s.name} (A, B, Y);",
            "  parameter A_SIGNED = 0; parameter B_SIGNED = 0;",
            "  parameter A_WIDTH = 1; parameter B_WIDTH = 1; parameter Y_WIDTH = 1;",
            "  input [A_WIDTH-1:0] A; input [B_WIDTH-1:0] B; output [Y_WIDTH-1:0] Y;",
            f"  wire _TECHMAP_FAIL_ = !(A_WIDTH == {s.a_width} && B_WIDTH == {s.b_width} && Y_WIDTH == {s.y_width}"
            f" && A_SIGNED == {int(s.signed)} && B_SIGNED == {int(s.signed)});",
        ]
    lines += [
        f"  wire {sgn}[{n - 1}:0] a = A;",
        f"  wire [{2 * digits - 1}:0] b = {b_ext};",
        f"  wire {sgn}[{rw - 1}:0] m0 = 0;",
        f"  (* keep *) wire {sgn}[{rw - 1}:0] m3 = a + (a << 1);",
    ]
    if s.signed:
        lines.append(f"  (* keep *) wire signed [{rw - 1}:0] n1 = -a;")
    multiples = [("a", n, "m1"), ("b", 2 * digits, "bq"), ("m3", rw, "m3q")] + ([("n1", rw, "n1q")] if s.signed else [])
    if registers >= 2:          # the multiples' register (docstring)
        for name, width, q in multiples:
            lines.append(f"  reg {sgn if name != 'b' else ''}[{width - 1}:0] {q} = 0;")
            lines.append(f"  always @(posedge CLK) {q} <= {name};")
    else:
        lines += [f"  wire {sgn if name != 'b' else ''}[{width - 1}:0] {q} = {name};" for name, width, q in multiples]
    lines += [f"  wire {sgn}[{rw - 1}:0] m1w = m1;", f"  wire {sgn}[{rw - 1}:0] m2 = m1w << 1;"]
    if s.signed:
        lines.append(f"  wire signed [{rw - 1}:0] n2 = n1q << 1;")
    terms = []
    for i in range(digits):
        if 2 * i >= s.y_width:
            break
        top = s.signed and i == digits - 1
        choices = ("m0", "m1w", "n2", "n1q") if top else ("m0", "m1w", "m2", "m3q")
        b1, b0 = f"bq[{2 * i + 1}]", f"bq[{2 * i}]"
        lines.append(f"  wire {sgn}[{rw - 1}:0] r{i} = {b1} ? ({b0} ? {choices[3]} : {choices[2]}) : "
                     f"({b0} ? {choices[1]} : {choices[0]});")
        terms.append(_Term(f"r{i}", rw, 2 * i))
    levels = (len(terms) - 1).bit_length()            # of the pairwise tree below
    count = 0

    def register(t: _Term) -> _Term:
        lines.append(f"  reg [{t.width - 1}:0] {t.name}_q = 0;")
        lines.append(f"  always @(posedge CLK) {t.name}_q <= {t.name};")
        return _Term(f"{t.name}_q", t.width, t.shift)

    def add(lo: _Term, hi: _Term) -> _Term:
        nonlocal count
        d = hi.shift - lo.shift
        width = min(max(lo.width, hi.width + d) + 1, s.y_width - lo.shift)
        name = f"s{count}"
        count += 1
        lo_full = f"{name}_lo"
        lines.append(f"  wire [{width - 1}:0] {lo_full} = {_extend(lo, width, s.signed)};")
        if width > d:
            lines.append(f"  (* keep *) wire [{width - d - 1}:0] {name}_hi = {lo_full}[{width - 1}:{d}] + "
                         f"{_extend(hi, width - d, s.signed)};")
            lines.append(f"  wire [{width - 1}:0] {name} = {{{name}_hi, {lo_full}[{d - 1}:0]}};")
        else:
            lines.append(f"  wire [{width - 1}:0] {name} = {lo_full};")
        return _Term(name, width, lo.shift)

    # the register (if any) after half the tree's levels
    root, _ = _pairwise_tree(terms, [(levels + 1) // 2] if registers else [], register, add)
    if registers == 3:          # Y's register (docstring)
        lines.append(f"  reg [{s.y_width - 1}:0] y_q = 0;")
        lines.append(f"  always @(posedge CLK) y_q <= {_extend(root, s.y_width, s.signed)};")
        lines.append("  assign Y = y_q;")
    else:
        lines.append(f"  assign Y = {_extend(root, s.y_width, s.signed)};")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"


def _pairwise_tree(terms: list, cuts: list[int], register, combine) -> tuple:
    """The sum of `terms` (least shift first) as a balanced tree of `combine(x, y)` pairs, an odd
    last term carried up a level unchanged; before level L's pairs (0: the terms themselves)
    every term goes through `register` once per L in `cuts`. Returns (root, the tree's levels):
    a cut beyond them is the caller's. Both product generators below build their trees so."""
    level = 0
    while True:
        for _ in range(cuts.count(level)):
            terms = [register(t) for t in terms]
        if len(terms) == 1:
            return terms[0], level
        level += 1
        pairs = [combine(terms[j], terms[j + 1]) for j in range(0, len(terms) - 1, 2)]
        terms = pairs + terms[2 * len(pairs):]


def _extend(t: _Term, width: int, signed: bool) -> str:
    """Verilog for term `t` sign- or zero-extended, or truncated, to `width` bits."""
    if width <= t.width:
        return f"{t.name}[{width - 1}:0]"
    fill = f"{{{width - t.width}{{{t.name}[{t.width - 1}]}}}}" if signed else f"{width - t.width}'b0"
    return f"{{{fill}, {t.name}}}"


@functools.lru_cache(maxsize=None)
def register_bits(shape: Shape, registers: int, target: str = "") -> int:
    """The flip-flops of `module(shape, registers, target)`: its partial sums where it is cut
    and Y (Design.mul_note counts what more registers cost). Cached: a layer's products share a
    few shapes, and building a module's text for each of them took 0.16 s of every row of the
    w4a8 GEMV at 16 x 56 (896 products)."""
    if registers == 0:
        return 0
    return sum(int(hi) + 1 for hi in re.findall(r"^\s*reg \[(\d+):0\]", module(shape, registers, target), re.M))


REGISTERED_FILE = "tinyhw_lut_mulreg.v"


def registered_file(products: set[tuple[Shape, int]], target: str = "") -> str:
    """The modules of the registered LUT products of these (shape, registers), all of whose
    shapes `takes`."""
    return "// tinyhw registered LUT multipliers (compiler/synth/lut_multiplier.py)\n" + "".join(
        module(s, registers, target) for s, registers in
        sorted(products, key=lambda p: (p[0].a_width, p[0].b_width, p[0].y_width, p[0].signed, p[1])))


def map_file(shapes: set[Shape], target: str = "") -> str:
    """The techmap file for these product shapes (those `takes` accepts), in a stable order."""
    taken = sorted((s for s in shapes if takes(s)), key=lambda s: (s.a_width, s.b_width, s.y_width, s.signed))
    return "// tinyhw LUT multipliers (compiler/synth/lut_multiplier.py)\n" + "".join(module(s, 0, target) for s in taken)


# ---------------------------------------------------------------------------------------------
# ECP5: partial products on carry chains

@dataclass
class _Part:
    """A term of the sum: an AND row (`row` = the bit of the multiplier B it is A times, `neg`:
    subtracted) or a `width`-bit wire `name`; its value is in [lo, hi] times 2**shift."""
    shift: int
    lo: int
    hi: int
    row: int | None = None
    neg: bool = False
    name: str = ""
    width: int = 0

    @property
    def signed(self) -> bool:
        return self.lo < 0


def _bits(lo: int, hi: int) -> int:
    if lo >= 0:
        return max(1, hi.bit_length())
    return max((-lo - 1).bit_length(), hi.bit_length()) + 1


def _lut_init(f) -> int:
    """The 16-bit INIT of an ECP5 LUT4 computing f(A, B, C, D) (its index is {D, C, B, A})."""
    return sum((f(i & 1, i >> 1 & 1, i >> 2 & 1, i >> 3 & 1) & 1) << i for i in range(16))


_ADD = _lut_init(lambda a, b, c, d: (a & b) ^ (c & d))
_SUB = _lut_init(lambda a, b, c, d: (c & d) ^ (1 ^ (a & b)))


def chain_cuts(levels: int, registers: int) -> list[int]:
    """The levels of a chain product's tree of `levels` levels after which its `registers`
    registers go (_pairwise_tree's cuts; one at `levels` registers Y, one past it delays Y): one
    in the middle; two, the middle and Y; three, a third and two thirds of the way and Y (each
    level its own stage from 3 levels, an 8 x 8 product's). Every register a Product asks for is
    one here: three had been built as one, a product two cycles early in the netlist."""
    if registers not in (0, 1, 2, 3):
        raise ValueError(f"a LUT product takes 0 to 3 registers, not {registers}")
    if registers == 3:
        return [-(-levels // 3), -(-2 * levels // 3), levels]
    return [(levels + 1) // 2] + [levels] * (registers - 1) if registers else []


def chain_module(shape: Shape, registers: int = 0) -> str:
    """`module` for ECP5: Y = A * B as B's rows (A AND one bit of B, the top one subtracted when
    signed) added two at a time on carry chains whose LUTs compute the AND themselves. An ECP5
    carry cell's half is a LUT4 whose output P propagates the carry, and whose generate (taken
    when P is 0) is the LUT2 of its A and B inputs, INIT[3:0]: with x on A, B and y on C, D,
    P = x ^ y adds x + y whenever y(0, 0) = 0, since P(A, B, 0, 0) = x is then the generate; a
    subtraction x - y = x + ~y + 1 puts y on A, B and x on C, D (P = x ^ ~y, generate ~y = x).
    So two rows of partial products cost one LUT4 a bit, where a multiplexed row costs two
    (the radix-4 multiplier); 8 x 8 signed: 72 LUTs against 122, 6 x 4: 24 against 52. The
    narrower operand gives the rows (a product commutes). A lone last row joins the first sum
    in a chain of its own (a wire plus an AND row), the rest of the tree are adders as Yosys
    builds them, each as wide as its value's interval (and never wider than Y), the low bits
    under the higher term's shift passing through. `registers`: as `module`, cut where
    chain_cuts says."""
    s = shape
    a_bits, b_bits, swap = (s.a_width, s.b_width, False) if s.a_width >= s.b_width else (s.b_width, s.a_width, True)
    a_lo, a_hi = (-(1 << (a_bits - 1)), (1 << (a_bits - 1)) - 1) if s.signed else (0, (1 << a_bits) - 1)
    lines = ([f"module {s.registered_name(registers)} (A, B, CLK, Y);",
              f"  input [{s.a_width - 1}:0] A; input [{s.b_width - 1}:0] B; input CLK; output [{s.y_width - 1}:0] Y;"]
             if registers else
             ['(* techmap_celltype = "$mul" *)', f"module {s.name} (A, B, Y);",
              "  parameter A_SIGNED = 0; parameter B_SIGNED = 0;",
              "  parameter A_WIDTH = 1; parameter B_WIDTH = 1; parameter Y_WIDTH = 1;",
              "  input [A_WIDTH-1:0] A; input [B_WIDTH-1:0] B; output [Y_WIDTH-1:0] Y;",
              f"  wire _TECHMAP_FAIL_ = !(A_WIDTH == {s.a_width} && B_WIDTH == {s.b_width} && Y_WIDTH == {s.y_width}"
              f" && A_SIGNED == {int(s.signed)} && B_SIGNED == {int(s.signed)});"])
    lines += [f"  wire [{a_bits - 1}:0] a = {'B' if swap else 'A'};", f"  wire [{b_bits - 1}:0] b = {'A' if swap else 'B'};"]
    rows = [_Part(j, *((min(0, -a_hi), max(0, -a_lo)) if s.signed and j == b_bits - 1 else (min(0, a_lo), a_hi)),
                  row=j, neg=s.signed and j == b_bits - 1) for j in range(b_bits) if j < s.y_width]
    count = [0]

    def abit(i: int) -> str:
        if i < 0 or (i >= a_bits and not s.signed):
            return "1'b0"
        return f"a[{min(i, a_bits - 1)}]"

    def wbit(t: _Part, i: int) -> str:
        if i < 0 or (i >= t.width and not t.signed):
            return "1'b0"
        return f"{t.name}[{min(i, t.width - 1)}]"

    def operand(t: _Part, i: int) -> tuple[str, str]:
        """(first, second) LUT inputs of term t's bit i (an AND row: a bit and b's bit; a wire:
        its bit and 1, whose AND is the bit itself)."""
        return (abit(i), f"b[{t.row}]") if t.row is not None else (wbit(t, i), "1'b1")

    def chain(x: _Part, y: _Part, lo: int, hi: int) -> _Part:
        """x + y (x - y when y is a subtracted row) on a chain of CCU2C cells, over bits from x's
        shift; a wire x's bits under y's shift pass through."""
        d = y.shift - x.shift
        width = min(_bits(lo, hi), s.y_width - x.shift)
        low = d if x.row is None else 0
        name = f"c{count[0]}"
        count[0] += 1
        n = width - low
        cells = (n + 1) // 2
        lines.append(f"  wire [{width - 1}:0] {name};")
        lines.append(f"  wire [{cells}:0] {name}_c;")
        lines.append(f"  assign {name}_c[0] = 1'b{int(y.neg)};")
        if low:
            lines.append(f"  assign {name}[{low - 1}:0] = {x.name}[{low - 1}:0];")
        if n % 2:
            lines.append(f"  wire {name}_x;")
        for k in range(cells):
            ports, inits = [], []
            for h in (0, 1):
                i = low + 2 * k + h
                if i >= width:
                    ports += ["1'b0"] * 4
                    inits.append(0)
                    continue
                xa, xb = operand(x, i)
                ya, yb = operand(y, i - d)
                if y.neg:                   # y on A, B; x on C, D (the generate is ~y)
                    ports += [ya, yb, xa, xb]
                    inits.append(_SUB)
                else:                       # x on A, B; y on C, D (the generate is x)
                    ports += [xa, xb, ya, yb]
                    inits.append(_ADD)
            i0 = low + 2 * k
            s1 = f"{name}[{i0 + 1}]" if i0 + 1 < width else f"{name}_x"
            lines.append(f"  CCU2C #(.INIT0(16'h{inits[0]:04x}), .INIT1(16'h{inits[1]:04x}), .INJECT1_0(\"NO\"), "
                         f".INJECT1_1(\"NO\")) {name}_{k} (.CIN({name}_c[{k}]), .A0({ports[0]}), .B0({ports[1]}), "
                         f".C0({ports[2]}), .D0({ports[3]}), .A1({ports[4]}), .B1({ports[5]}), .C1({ports[6]}), "
                         f".D1({ports[7]}), .S0({name}[{i0}]), .S1({s1}), .COUT({name}_c[{k + 1}]));")
        return _Part(x.shift, lo, hi, name=name, width=width)

    def add(x: _Part, y: _Part, lo: int, hi: int) -> _Part:
        """x + y of two wires, Yosys's adder (a `keep` wire, so alumacc leaves it one)."""
        d = y.shift - x.shift
        width = min(_bits(lo, hi), s.y_width - x.shift)
        name = f"s{count[0]}"
        count[0] += 1
        lines.append(f"  wire [{width - 1}:0] {name}_lo = {_extend(_Term(x.name, x.width, 0), width, x.signed)};")
        if width > d:
            lines.append(f"  (* keep *) wire [{width - d - 1}:0] {name}_hi = {name}_lo[{width - 1}:{d}] + "
                         f"{_extend(_Term(y.name, y.width, 0), width - d, y.signed)};")
            lines.append(f"  wire [{width - 1}:0] {name} = " + (f"{{{name}_hi, {name}_lo[{d - 1}:0]}};" if d else f"{name}_hi;"))
        else:
            lines.append(f"  wire [{width - 1}:0] {name} = {name}_lo;")
        return _Part(x.shift, lo, hi, name=name, width=width)

    def register(t: _Part) -> _Part:
        lines.append(f"  reg [{t.width - 1}:0] {t.name}_q = 0;")
        lines.append(f"  always @(posedge CLK) {t.name}_q <= {t.name};")
        return _Part(t.shift, t.lo, t.hi, name=f"{t.name}_q", width=t.width)

    def wire_of(t: _Part) -> _Part:
        """A lone AND row as a wire (only for a one-row product)."""
        width = min(_bits(t.lo, t.hi), s.y_width - t.shift)
        name = f"r{count[0]}"
        count[0] += 1
        ext = f"{{{{{width - a_bits}{{a[{a_bits - 1}]}}}}, a}}" if s.signed and width > a_bits else "a"
        lines.append(f"  wire [{width - 1}:0] {name} = {'-' if t.neg else ''}({ext} & {{{width}{{b[{t.row}]}}}});")
        return _Part(t.shift, t.lo, t.hi, name=name, width=width)

    def combine(x: _Part, y: _Part) -> _Part:
        if x.neg:                       # the subtracted term second
            x, y = y, x
        d = y.shift - x.shift
        if d < 0:                       # x a wire below a row: shifts only increase
            raise AssertionError("terms out of order")
        lo, hi = x.lo + (y.lo << d), x.hi + (y.hi << d)
        return chain(x, y, lo, hi) if x.row is not None or y.row is not None else add(x, y, lo, hi)

    levels = max(1, (len(rows) - 1).bit_length())
    cuts = chain_cuts(levels, registers)
    root, level = _pairwise_tree(rows, cuts, lambda t: register(t if t.row is None else wire_of(t)), combine)
    root = root if root.row is None else wire_of(root)
    for _ in range(len([c for c in cuts if c > level])):
        root = register(root)
    full = f"{{{root.name}, {root.shift}'b0}}" if root.shift else root.name
    lines.append(f"  wire [{root.width + root.shift - 1}:0] p = {full};")
    lines.append(f"  assign Y = {_extend(_Term('p', root.width + root.shift, 0), s.y_width, root.signed)};")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"

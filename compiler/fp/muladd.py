"""Fused multiply-add: y = a * b + c, rounded once (or, with `via`, first to `via` bits).

tinygrad's PYTHON device fuses `a * b + c` into one MULACC op (its renderer claims it,
tinygrad/codegen/decomp/op.py), which it runs in Python floats and rounds to the dtype once:
`(x * y) + z` in float64, then float64 -> the dtype. For operands of at most 24 significand
bits the product is exact in float64, so the float64 result is the exact sum rounded to 53
bits, and then rounded again to the dtype. `FMulAdd(src, dst, via=53)` computes exactly that;
`via=None` rounds the exact sum once (what float64 gives whenever the exact sum fits in 53
bits, as every fp8 sum does).

The datapath is the classic one: the 2p-bit product P stays put in a window, c's significand
(normalised) is placed above it and shifted right by the exponent difference with a sticky
bit, the two are added (or subtracted: the result may be negative, then negated), and one
leading-zero count normalises the sum. The window is wide enough that nothing is lost:
  * below P: L = max(R - 2p, 0) + 3 bits, R the first rounding precision (via, else dst's),
    so a c that falls out of the window only changes the sticky bit, at least two bits under
    the rounding position (P is normalised, so the sum's leading one is within a bit of P's);
  * above P: c's lowest bit at most K = p + py + 2 above P's (py: dst's precision). A c
    further up is placed there, and the sum's exponent taken from c's: P then lies at least
    two bits under dst's guard bit either way, so the rounded result is c in both places (and
    a 53-bit first rounding cannot move it onto dst's midpoint). This needs every src value
    exact in dst (checked).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .common import Pipe, bits_for, check_stages, leading_zeros, round_pack, shift_left, shift_right_sticky, \
    special_mux, unpack
from .formats import FloatFormat, check_format, check_rounding, check_subnormals


def holds(src: FloatFormat, dst: FloatFormat) -> bool:
    """Whether every finite `src` value is a `dst` value (dst at least as precise, its range
    reaching as high and, with its subnormals, as low)."""
    return (dst.precision >= src.precision and dst.emax >= src.emax
            and dst.emin - dst.man_bits <= src.emin - src.man_bits)


class FMulAdd(wiring.Component):
    """y = a * b + c with a, b, c bit patterns of `src_fmt` and y one of `dst_fmt` (default
    src_fmt), combinational (see the module).

    `via` None: the exact value rounded once to dst_fmt with `rounding`. `via` = n: first
    rounded to n significand bits (to nearest even, unbounded exponent: Python's float64 for
    n = 53), then to dst_fmt. Special cases follow IEEE: NaN in, 0 * inf, inf - inf give NaN;
    an exact zero sum is +0 unless both a * b and c are -0 (then -0). dst_fmt saturates if
    it does (tinygrad's fp8). `stages` > 1 pipelines it (see common.Pipe): register
    boundaries after the product ("product"), the add ("sum"), the normalising shift
    ("norm"), then round_pack's "round", c's alignment ("align"), round_pack's "pack" and
    "denorm", enabled in that order. At a target clock (CLOCK_CUTS, hw.pipeline.float_stages)
    also: the normalised operands before the multiplier ("operands"), the alignment's shift
    amount before its shift ("amount": the product then lands in the fabric a stage after the
    DSP block's register, as FWideMul's "land"), the signed sum before its magnitude
    ("negate"), the leading-zero count before its shift ("lzc"), the first rounding (`via`)
    before the second ("via"), the product as four registered half-width products ("partial")
    and their sums ("sums"), as FMul's, and the operands' leading-zero counts before their
    shifts ("subnorm"), and the first rounding's decision before its addition ("viaup"). Placed
    alone, fp32 via 53 closed at 41.0 MHz with 8 stages (operands -> product register, 24.4 ns),
    at 92.7 with 16 and at 130.1 with 17; each cut in turn took the slowest stage (docs/timing.md,
    thirty-fifth and thirty-ninth sessions).

    `ring`: the unit of an interleaved sum (`acc = a * b + acc`), whose c is the accumulator
    and comes back from y every `stages` cycles. Only what depends on c belongs on that loop:
    a and b are taken LEAD cycles earlier, through every product boundary (PRODUCT_CUTS, all
    enabled), and c when the product is ready; `stages` counts the stages from c to y, their
    boundaries the first stages - 1 of RING_ORDER ("cnorm": c's normalisation and its
    alignment's amount before the alignment; "ccount": c's leading zeros counted before them).
    y comes LEAD + stages - 1 cycles after a and b. At a target clock (`clock`, `ring`) both
    operands' leading zeros are counted and one count picked.
    """

    CUTS = ("product", "sum", "norm", "round", "align", "pack", "denorm",
            "operands", "amount", "negate", "lzc", "via", "partial", "sums", "subnorm", "viaup")
    CLOCK_CUTS = ("operands", "amount", "negate", "lzc", "via", "partial", "sums", "subnorm", "viaup")
    # a ring's unit at a target clock has as many stages as rows interleaved (6 to 12 at
    # fp_pipeline 3): the boundaries that cut most first
    CLOCK_ORDER = ("operands", "product", "sum", "norm", "via", "viaup", "align", "pack", "lzc", "negate",
                   "denorm", "round", "amount", "partial", "sums", "subnorm")
    # a ring's unit: the product's boundaries before c, then c's loop in the order that cuts most
    PRODUCT_CUTS = ("subnorm", "operands", "partial", "sums", "product")
    LEAD = len(PRODUCT_CUTS)
    RING_ORDER = ("cnorm", "align", "sum", "norm", "via", "viaup", "round", "pack", "lzc", "ccount", "negate",
                  "denorm")

    def __init__(self, src_fmt: FloatFormat, dst_fmt: FloatFormat | None = None, via: int | None = None,
                 rounding: str = "rne", subnormals: str = "keep", stages: int = 1, clock: bool = False,
                 ring: bool = False):
        self.src_fmt = check_format(src_fmt, "src_fmt")
        self.dst_fmt = check_format(dst_fmt if dst_fmt is not None else src_fmt, "dst_fmt")
        if not holds(self.src_fmt, self.dst_fmt):
            raise ValueError(f"FMulAdd: {self.dst_fmt.name} cannot hold every {self.src_fmt.name} value")
        if via is not None and not (isinstance(via, int) and not isinstance(via, bool)
                                    and self.dst_fmt.precision < via <= 64):
            raise ValueError(f"via: expected None or an int from {self.dst_fmt.precision + 1} to 64 "
                             f"(bits of the first rounding), got {via!r}")
        self.via = via
        self.rounding = check_rounding(rounding)
        self.subnormals = check_subnormals(subnormals)
        self.ring = ring
        self.stages = check_stages(stages, self.RING_ORDER if ring else self.CUTS)
        self.lead = self.LEAD if ring else 0             # cycles c is taken after a and b
        self.latency = self.lead + self.stages - 1
        self.order = self.PRODUCT_CUTS + self.RING_ORDER if ring else self.CLOCK_ORDER if clock else self.CUTS
        self.clock = clock or ring
        w = src_fmt.width
        super().__init__({"a": In(w), "b": In(w), "c": In(w), "y": Out(self.dst_fmt.width)})

    # the window (module docstring): P's lowest bit at L, c's lowest bit at most L + K
    @property
    def below(self) -> int:
        p, r = self.src_fmt.precision, self.via or self.dst_fmt.precision
        return max(r - 2 * p, 0) + 3

    @property
    def reach(self) -> int:
        return self.src_fmt.precision + self.dst_fmt.precision + 2

    @property
    def window(self) -> int:
        return self.below + self.reach + self.src_fmt.precision + 1     # + 1: the carry

    def elaborate(self, platform):
        m = Module()
        pipe = Pipe(m, self.order, self.lead + self.stages)
        a = unpack(m, self.src_fmt, self.a, self.subnormals, "a")
        b = unpack(m, self.src_fmt, self.b, self.subnormals, "b")
        front = self._ring_front(m, pipe, a, b) if self.ring else self._front(m, pipe, a, b)
        m.d.comb += self.y.eq(self._tail(m, pipe, *front))
        return m

    def _exp_width(self) -> int:
        src, dst, p = self.src_fmt, self.dst_fmt, self.src_fmt.precision
        return bits_for(2 * src.exp_max_field + self.reach + self.window + 2 * p + dst.bias) + 2

    def _front(self, m, pipe, a, b):
        """Up to the product's register, c beside the product, then the alignment's amount:
        (amount, product, base, c_sig, sign_p, c_sign, specials)."""
        src = self.src_fmt
        c = unpack(m, src, self.c, self.subnormals, "c")
        sign_p, p_zero, p_inf, p_nan = self._product_flags(a, b)
        specials = self._specials(sign_p, p_zero, p_inf, p_nan, c)
        ew = self._exp_width()
        # c normalised beside the product's operands (a subnormal c has leading zeros; a zero c
        # stays zero), its count registered before its shift and its exponent's subtraction
        lz_c = leading_zeros(m, c.sig, "csub")
        x_sig, other, pexp, c_raw, lz_c, c_exp, sign_p, c_sign, p_zero, c_zero, *specials = self._normalised(
            m, pipe, a, b, ew, self.clock, (c.sig, lz_c, c.exp, sign_p, c.sign, p_zero, c.is_zero, *specials))
        c_sig = shift_left(m, c_raw, lz_c, "csub")
        cexp = Signal(signed(ew), name="cexp")
        m.d.comb += cexp.eq(c_exp - lz_c)
        x_sig, other, pexp, cexp, c_sig, sign_p, c_sign, p_zero, c_zero, *specials = pipe.cut(
            "operands", x_sig, other, pexp, cexp, c_sig, sign_p, c_sign, p_zero, c_zero, *specials)
        # c's lowest bit sits k above P's. A c more than K above (or a zero product) is placed K
        # above, and the window takes its exponent from c's: P then only acts as a sticky bit.
        # The alignment's shift is taken beside the multiplier, so only its clamp follows the
        # product (cexp through a subtraction and the clamp after it: fp32's slowest stage at 16
        # stages, 10.3 ns)
        base, shift = self._base(m, pexp, cexp, p_zero, c_zero, ew)
        product, base, shift, c_sig, sign_p, c_sign, *specials = self._product(
            m, pipe, x_sig, other, (base, shift, c_sig, sign_p, c_sign, *specials))
        return (self._clamped(m, shift), product, base, c_sig, sign_p, c_sign, *specials)

    def _ring_front(self, m, pipe, a, b):
        """A ring's unit: the product through PRODUCT_CUTS from a and b alone, then c (the
        accumulator, taken LEAD cycles after them) normalised beside it: as _front. What c's
        arrival waits for is one carry chain and a clamp, not _front's chain of five: the
        alignment's shift K - k = (pexp + K - bias - (p-1) - c.exp) + lz_c, its first sum
        computed beside c's leading-zero count, the constant added to pexp before c arrives."""
        src = self.src_fmt
        p, K = src.precision, self.reach
        ew = self._exp_width()
        x_sig, other, pexp, sign_p, p_zero, p_inf, p_nan = self._normalised(
            m, pipe, a, b, ew, True, self._product_flags(a, b))
        x_sig, other, pexp, sign_p, p_zero, p_inf, p_nan = pipe.cut(
            "operands", x_sig, other, pexp, sign_p, p_zero, p_inf, p_nan)
        pexp_k = Signal(signed(ew), name="pexp_k")
        m.d.comb += pexp_k.eq(pexp + (K - src.bias - (p - 1)))
        product, pexp, pexp_k, sign_p, p_zero, p_inf, p_nan = self._product(
            m, pipe, x_sig, other, (pexp, pexp_k, sign_p, p_zero, p_inf, p_nan))

        c = unpack(m, src, self.c, self.subnormals, "c")
        specials = self._specials(sign_p, p_zero, p_inf, p_nan, c)
        lz_c = leading_zeros(m, c.sig, "csub")
        gap = Signal(signed(ew), name="gap")             # K - k less c's leading zeros
        m.d.comb += gap.eq(pexp_k - c.exp)
        c_base = Signal(signed(ew), name="c_base")       # the window's exponent from c's, less them
        m.d.comb += c_base.eq(c.exp + (src.bias + (p - 1) - K))
        # c's count registered before its shift ("ccount"): the two in one stage, the
        # accumulator -> c's normalised register, were fp32's slowest (9.4 ns alone; 12.1 in
        # layernorm fp16 at 150 MHz); the shift then runs beside the amount's arithmetic
        product, pexp, gap, c_base, lz_c, c_raw, sign_p, c_sign, p_zero, c_zero, *specials = pipe.cut(
            "ccount", product, pexp, gap, c_base, lz_c, c.sig, sign_p, c.sign, p_zero, c.is_zero, *specials)
        c_sig = shift_left(m, c_raw, lz_c, "csub")
        shift = Signal(signed(ew), name="align_shift")   # K - k
        m.d.comb += shift.eq(gap + lz_c)
        # c more than K above P (shift < 0) or a zero product: c placed K above (amount 0), the
        # window's exponent c's (_base)
        base = Signal(signed(ew), name="base")
        m.d.comb += base.eq(Mux(p_zero | (~c_zero & (shift < 0)), c_base - lz_c, pexp))
        amount = self._clamped(m, Mux(p_zero, 0, shift))
        return pipe.cut("cnorm", amount, product, base, c_sig, sign_p, c_sign, *specials)

    @staticmethod
    def _product_flags(a, b):
        """(sign, zero, inf, nan) of a * b (0 * inf is NaN)."""
        return (a.sign ^ b.sign, a.is_zero | b.is_zero, a.is_inf | b.is_inf,
                a.is_nan | b.is_nan | (a.is_inf & b.is_zero) | (b.is_inf & a.is_zero))

    @staticmethod
    def _specials(sign_p, p_zero, p_inf, p_nan, c):
        """IEEE's special results of a * b + c from the product's flags and c: (is_nan, is_inf,
        inf_sign, both_zero, zero_sign). inf - inf is NaN; an exact cancellation is +0, -0 only
        when both a * b and c are -0."""
        both_zero = p_zero & c.is_zero
        return (p_nan | c.is_nan | (p_inf & c.is_inf & (sign_p != c.sign)), p_inf | c.is_inf,
                Mux(p_inf, sign_p, c.sign), both_zero, both_zero & sign_p & c.sign)

    def _normalised(self, m, pipe, a, b, ew, count_both, carried):
        """The product's significands, one subnormal operand normalised (as FMul: two subnormal
        operands make a product far below any nonzero c, which then decides the result), through
        "subnorm" with `carried`: (x_sig, other, pexp, *carried), pexp = ea + eb less the count
        (P = x_sig * other * 2**(pexp - 2 bias - 2(p-1))). At a target clock the count is
        registered before its shift and before its subtraction from ea + eb (the count, the
        shift and the route into the DSP blocks were fp32's slowest stage, 13.8 ns; the count
        and a three-operand sum, 8.6 ns). `count_both` (at a target clock): both operands' zeros
        counted and one count picked, as FMul does, so no multiplexer and its select's fan-out
        lie before the count (an operand's register -> the count's, 12.1 ns in layernorm fp16
        at 150 MHz, 8.7 of it routing)."""
        a_sub = ~a.sig[-1]
        pick, other = Mux(a_sub, a.sig, b.sig), Mux(a_sub, b.sig, a.sig)
        if count_both:
            lz_ab = Signal(range(len(a.sig) + 1), name="sub_lz")
            m.d.comb += lz_ab.eq(Mux(a_sub, leading_zeros(m, a.sig, "sub_a"), leading_zeros(m, b.sig, "sub_b")))
        else:
            lz_ab = leading_zeros(m, pick, "sub")
        ab_exp = Signal(signed(ew), name="ab_exp")
        m.d.comb += ab_exp.eq(a.exp + b.exp)
        pick, other, lz_ab, ab_exp, *carried = pipe.cut("subnorm", pick, other, lz_ab, ab_exp, *carried)
        pexp = Signal(signed(ew), name="pexp")
        m.d.comb += pexp.eq(ab_exp - lz_ab)
        return (shift_left(m, pick, lz_ab, "sub"), other, pexp, *carried)

    def _base(self, m, pexp, cexp, p_zero, c_zero, ew):
        """The window's exponent: P's, or c's less K where c lies more than K above P (or P is
        zero), so that P then only acts as a sticky bit; and the shift that aligns c to it, K - k
        (0 where c is placed K above), both from the operands' exponents."""
        src, K = self.src_fmt, self.reach
        k = Signal(signed(ew), name="c_offset")          # c's lowest bit k above P's
        m.d.comb += k.eq(cexp - pexp + src.bias + (src.precision - 1))
        gap = Signal(signed(ew), name="gap")             # K - k, beside k
        m.d.comb += gap.eq(pexp - cexp + (K - src.bias - (src.precision - 1)))
        above = p_zero | (~c_zero & (k > K))
        base = Signal(signed(ew), name="base")
        m.d.comb += base.eq(Mux(above, cexp + src.bias + (src.precision - 1) - K, pexp))
        shift = Signal(signed(ew), name="align_shift")
        m.d.comb += shift.eq(Mux(above, 0, gap))
        return base, shift

    def _product(self, m, pipe, x_sig, other, carried):
        """The 2p-bit product of the normalised significands, through its boundaries, with
        `carried` beside it: (product, *carried) after "product"."""
        p = self.src_fmt.precision
        product = Signal(2 * p, name="product")
        if "partial" in pipe.enabled:
            # as FMul at a target clock: four half-width products (a DSP block each for fp32)
            # registered, the middle two summed and registered, then the whole: a 24 x 24
            # product and its fabric adders in one stage were fp32's slowest (13.1 ns)
            h = (p + 1) // 2
            partials = [x_sig[:h] * other[:h], x_sig[:h] * other[h:], x_sig[h:] * other[:h], x_sig[h:] * other[h:]]
            ll, lh, hl, hh, *carried = pipe.cut("partial", *partials, *carried)
            middle = Signal(2 * h + 1, name="middle")
            m.d.comb += middle.eq(lh + hl)
            ll, hh, middle, *carried = pipe.cut("sums", ll, hh, middle, *carried)
            m.d.comb += product.eq(Cat(ll[:2 * h], hh) + (middle << h))
        elif p <= 4:                # fp8: partial products in LUTs (Yosys would use a DSP block)
            m.d.comb += product.eq(sum(Mux(other[i], x_sig << i, 0) for i in range(p)))
        else:
            m.d.comb += product.eq(x_sig * other)
        return pipe.cut("product", product, *carried)

    def _clamped(self, m, shift):
        """The alignment's shift amount: `shift` (K - k) within 0 .. W."""
        W = self.window
        amount = Signal(bits_for(W), name="align_amount")
        m.d.comb += amount.eq(Mux(shift < 0, 0, Mux(shift > W, W, shift)))
        return amount

    def _tail(self, m, pipe, amount, product, base, c_sig, sign_p, c_sign, *specials):
        """From c's alignment amount, the product and c's normalised significand to y: c aligned
        above P, the signed sum, its normalisation and the roundings."""
        src, dst = self.src_fmt, self.dst_fmt
        p, L, K, W = src.precision, self.below, self.reach, self.window
        ew = self._exp_width()
        amount, product, base, c_sig, sign_p, c_sign, *specials = pipe.cut(
            "amount", amount, product, base, c_sig, sign_p, c_sign, *specials)
        aligned, sticky = shift_right_sticky(m, Cat(Const(0, L + K), c_sig, Const(0, 1)), amount, "align")
        aligned, sticky, product, base, sign_p, c_sign, *specials = pipe.cut(
            "align", aligned, sticky, product, base, sign_p, c_sign, *specials)

        eff_sub = sign_p ^ c_sign
        addend = Cat(aligned[0] | sticky, aligned[1:], Const(0, 1))
        # one adder: a subtraction adds the one's complement with carry-in 1, modulo 2**(W+1)
        # (as FAdd; a negation and then the sum were two carry chains, bf16's slowest stage)
        total = Signal(signed(W + 1), name="total")
        m.d.comb += total.eq(Cat(Const(0, L), product) + Mux(eff_sub, ~addend, addend) + eff_sub)
        total, base, sign_p, c_sign, *specials = pipe.cut("negate", total, base, sign_p, c_sign, *specials)
        negative = total < 0
        mag = Signal(W, name="sum")
        m.d.comb += mag.eq(Mux(negative, -total, total))
        sign = Mux(negative, c_sign, sign_p)
        mag, base, sign, *specials = pipe.cut("sum", mag, base, sign, *specials)

        lz = leading_zeros(m, mag, "norm")
        mag, lz, base, sign, *specials = pipe.cut("lzc", mag, lz, base, sign, *specials)
        norm = shift_left(m, mag, lz, "norm")
        exp = Signal(signed(ew), name="exp")            # dst-biased exponent of norm's top bit
        m.d.comb += exp.eq(base - 2 * src.bias - 2 * (p - 1) + (W - 1) - L - lz + dst.bias)
        is_zero = mag == 0
        norm, exp, sign, is_zero, *specials = pipe.cut("norm", norm, exp, sign, is_zero, *specials)

        sig, up = norm, Const(0, 1)
        if self.via is not None:           # the window is always wider than via + 1 bits
            sig, up = self._via_up(norm)
        # at a target clock the first rounding's decision is registered before its addition
        # ("viaup": the sticky bits' OR and a 53-bit carry chain were fp32's slowest stage)
        sig, up, exp, sign, is_zero, *specials = pipe.cut("viaup", sig, up, exp, sign, is_zero, *specials)
        if self.via is not None:
            sig, exp = self._via_add(m, sig, up, exp)
        sig, exp, sign, is_zero, *specials = pipe.cut("via", sig, exp, sign, is_zero, *specials)
        lo, hi = self._exp_range()
        is_nan, is_inf, inf_sign, both_zero, zero_sign = specials
        finite, (sign, is_zero, is_nan, is_inf, inf_sign, zero_sign) = round_pack(
            m, dst, rounding=self.rounding, subnormals=self.subnormals, sign=sign, exp=exp, sig=sig,
            exp_range=(lo, hi), may_be_tiny=True, pipe=pipe,
            carry=(sign, is_zero, is_nan, is_inf, inf_sign, zero_sign))
        return special_mux(m, dst, finite=finite, is_nan=is_nan, is_inf=is_inf, inf_sign=inf_sign,
                           is_zero=is_zero, zero_sign=zero_sign, name="fma")

    def _via_up(self, norm):
        """norm (leading one on top) rounded to `via` bits, to nearest even (Python's float): its
        top `via` bits and whether they round up."""
        n, W = self.via, len(norm)
        kept = norm[W - n:]
        guard = norm[W - n - 1]
        sticky = norm[:W - n - 1].any()
        return kept, guard & (sticky | kept[0])

    def _via_add(self, m, kept, up, exp):
        """The first rounding's result from _via_up: (significand, exponent)."""
        n = self.via
        rounded = Signal(n + 1, name="via_rounded")
        m.d.comb += rounded.eq(kept + up)
        carry = rounded[n]
        sig = Signal(n, name="via_sig")
        m.d.comb += sig.eq(Mux(carry, Const(1 << (n - 1), n), rounded[:n]))
        out = Signal(exp.shape(), name="via_exp")
        m.d.comb += out.eq(exp + carry)
        return sig, out

    def _exp_range(self) -> tuple[int, int]:
        """Bounds of the dst-biased exponent of a nonzero finite sum (round_pack's exp_range)."""
        src, dst = self.src_fmt, self.dst_fmt
        p, L, K, W = src.precision, self.below, self.reach, self.window
        lo_e, hi_e = 1 - (p - 1), src.max_exp_field          # an operand's (normalised) exponent
        base_lo = min(2 * lo_e, lo_e + src.bias + (p - 1) - K)
        base_hi = max(2 * hi_e, hi_e + src.bias + (p - 1) - K)
        offset = -2 * src.bias - 2 * (p - 1) + (W - 1) - L + dst.bias
        return base_lo + offset - (W - 1), base_hi + offset + 1

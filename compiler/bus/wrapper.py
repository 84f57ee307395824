"""Standard bus wrappers for an exported design: AXI4-Lite or Wishbone B4 in front of the
design's own host bus, with a register map (control, status, cycle counter, an interrupt on
done) and every host memory bank mapped at its element width.

    bus_map(design)            -> BusMap: the registers and the bank windows (byte offsets)
    AxiLiteWrapper(design)     -> an Amaranth component (compiler.bus.wrap picks the bus's)

The address map (byte addresses, 32-bit data) is cut into windows of equal size, a power of
two: window 0 holds the registers, window 1 + s holds host port s (`host_sel` s, one memory
bank). Equal windows make the decoding a shift, not a comparator per bank. Inside a bank's
window its elements sit back to back in containers of 8, 16, 32 or 64 bits (the smallest that
holds the element: int8 at byte addresses, fp16 at half-words, fp32 at words, int64 at
double-words, low word first), as a C array of that type would; so a 32-bit bus word holds
four int8 elements or two fp16. A buffer is spread over its banks by the compiler's layout
(`BusMap.holders`: the same digits as compiler/hw/layout.py), which the C driver
(compiler.bus.c_driver) walks.

Access rules, each a fact a driver may rely on:
- a register access is answered at any time; a memory access only while the design is idle,
  else with an error (AXI SLVERR, Wishbone ERR): the host bus acts only then;
- writes go to input banks, reads to output banks; the other way, past the last element of a
  bank, past the last window, or to a register that does not exist: an error;
- a write stores each element whose bytes are all enabled (wstrb / SEL); a 64-bit element is
  written by its high word, which stores it together with the low word written before it
  (any low word of any 64-bit bank: there is one staging register);
- bytes past a bank's last element (in its last bus word) read as zero and are not written.

Why a state machine of its own and not the host bus on the pins: the host bus has no
handshake, reads take `host_read_latency` cycles and elements are narrower than the bus; the
wrapper registers everything it drives into the design, so no path runs from the bus's pins
into a block RAM. One access is served at a time (registers in 3 cycles, a memory word in a
few more: Wishbone pipelined masters see STALL until then).

AXI-Stream (a dataflow design streaming samples back to back): compiler/bus/stream.py, the
same register file and windows with AXI-Stream ports beside them; refused for a sequential
design, as axi-lite and wishbone are for a dataflow one (each with the reason).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..design import Design

BUSES = ("native", "axi-lite", "wishbone")
"""`--bus` values: the design's own host bus, or a wrapper."""
STREAM_BUSES = ("axi-stream",)
"""For dataflow designs only (compiler/bus/stream.py): asked for with another, the reason is given."""

DATA_BITS = 32
ID_VALUE = 0x74687731                    # "thw1": the register map's identity and version
MIN_WINDOW = 64                          # bytes: window 0 holds the registers


class BusError(ValueError):
    """An unknown bus name, or a bus that cannot wrap this design (the message says why)."""


def check_bus(name: str) -> str:
    """`name` if it is a bus; else BusError naming the closest known one."""
    if name in BUSES:
        return name
    if name in STREAM_BUSES:
        return name
    known = BUSES + STREAM_BUSES
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise BusError(f"unknown bus {name!r}; {hint}known: {', '.join(known)}")


def check_wrappable(design: Design, bus: str) -> None:
    """BusError when `bus` cannot wrap `design`, saying why."""
    check_bus(bus)
    if bus in STREAM_BUSES and design.flow is None:
        raise BusError(f"bus {bus!r} streams samples into a dataflow design; {design.name()} is a "
                       "sequential design (memories loaded over a bus, then run): use axi-lite or wishbone")
    if bus in WRAPPERS and design.flow is not None:
        raise BusError(f"bus {bus!r} runs a design once per start; {design.name()} is a schedule=dataflow design "
                       "that streams samples: use axi-stream (AXI4-Lite control beside AXI-Stream samples) or native")


# ---------------------------------------------------------------------------------------------
# the register map

@dataclass(frozen=True)
class Register:
    name: str
    offset: int                          # byte offset
    access: str                          # RO, WO, RW, RW1C
    doc: str


REGISTERS = (
    Register("ID", 0x00, "RO", f"0x{ID_VALUE:08x} (\"thw1\"): this register map, version 1"),
    Register("CTRL", 0x04, "WO", "bit 0 START: write 1 to run the design once (ignored while busy); "
                                 "clears STATUS.DONE; reads 0"),
    Register("STATUS", 0x08, "RO", "bit 0 BUSY: a run is under way; bit 1 DONE: a run ended since the last START"),
    Register("CYCLES", 0x0C, "RO", "cycles of the last run, from the START cycle to the done cycle (the cycle "
                                   "model's count); counts up during a run, in as many bits as that count needs "
                                   "plus one (a run's length is fixed)"),
    Register("IRQ_ENABLE", 0x10, "RW", "bit 0: raise `irq` while IRQ_STATUS.DONE is set"),
    Register("IRQ_STATUS", 0x14, "RW1C", "bit 0 DONE: set when a run ends; write 1 to clear"),
)
REG = {r.name: r.offset for r in REGISTERS}
CTRL_START, STATUS_BUSY, STATUS_DONE, IRQ_DONE = 1, 1, 2, 1


@dataclass(frozen=True)
class BankWindow:
    """One host port (memory bank) in the address map."""
    sel: int                             # host_sel of the bank (its window is 1 + sel)
    role: str                            # "input": written by the host; "output": read back
    buffer: int                          # model buffer id
    dtype: str
    kernel: int
    memory: str
    offset: int                          # byte offset of element 0
    elements: int                        # words of the bank (padding words of a layout included)
    element_bits: int                    # the element's own width (a narrow buffer's: its memory's)
    container_bits: int                  # 8, 16, 32 or 64: the element's place in the map
    sign_extend: bool = False            # narrower than its dtype, in two's complement: read back
                                         # sign-extended to the container (the dtype's value)

    @property
    def bytes(self) -> int:
        return self.elements * self.container_bits // 8


@dataclass(frozen=True)
class Dim:
    """A digit of a layout (compiler/hw/layout.py): element index = sum(digit * stride)."""
    stride: int
    extent: int
    factor: int                          # lanes it is split into


@dataclass(frozen=True)
class Holder:
    """A set of banks holding one model buffer in one layout. An input buffer can live in
    several kernels' memories in different layouts: the host writes every holder."""
    buffer: int
    role: str
    dtype: str
    elements: int
    dims: tuple[Dim, ...]
    banks: tuple[int, ...]               # host_sel of lane 0, 1, ...


@dataclass(frozen=True)
class BusMap:
    window: int                          # bytes per window, a power of two
    banks: tuple[BankWindow, ...]
    holders: tuple[Holder, ...]
    registers: tuple[Register, ...] = REGISTERS
    data_bits: int = DATA_BITS
    ident: int = ID_VALUE                # the ID register: which map (compiler/bus/stream.py has another)

    @property
    def size(self) -> int:
        """Bytes of the whole map."""
        return (1 + len(self.banks)) * self.window

    @property
    def addr_bits(self) -> int:
        """Byte address bits (AXI4-Lite AWADDR/ARADDR); Wishbone's word address has 2 fewer."""
        return max(1, (self.size - 1).bit_length())

    def bank(self, sel: int) -> BankWindow:
        return self.banks[sel]

    def as_dict(self) -> dict:
        return {"data_bits": self.data_bits, "addr_bits": self.addr_bits, "window": self.window,
                "size": self.size, "id": self.ident,
                "registers": [{"name": r.name, "offset": r.offset, "access": r.access, "doc": r.doc}
                              for r in self.registers],
                "banks": [{"sel": b.sel, "role": b.role, "buffer": b.buffer, "dtype": b.dtype, "kernel": b.kernel,
                           "memory": b.memory, "offset": b.offset, "elements": b.elements,
                           "element_bits": b.element_bits, "container_bits": b.container_bits, "bytes": b.bytes,
                           "sign_extend": b.sign_extend}
                          for b in self.banks],
                "holders": [{"buffer": h.buffer, "role": h.role, "dtype": h.dtype, "elements": h.elements,
                             "dims": [[d.stride, d.extent, d.factor] for d in h.dims], "banks": list(h.banks)}
                            for h in self.holders]}


def container_bits(width: int) -> int:
    for c in (8, 16, 32, 64):
        if width <= c:
            return c
    raise BusError(f"an element of {width} bits is wider than the 64 bits a bus wrapper maps")


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def bus_map(design: Design) -> BusMap:
    """The register map and the bank windows of `design` (module docstring)."""
    ports = design.host_ports
    dtype = {b: design.graph.buffers[b].dtype for b in design.host_buffers}
    sel = {(p.kernel, p.slot): i for i, p in enumerate(ports)}
    sizes = [p.depth * container_bits(p.width) // 8 for p in ports]
    window = max(MIN_WINDOW, _pow2(max(sizes, default=1)))
    names: dict[int, str] = {}
    holders: list[Holder] = []
    for hb in design.host:
        writable = hb.id in design.graph.inputs
        places = hb.holders if writable else ((hb.home,) if hb.id in design.graph.outputs else ())
        for place in places:
            refs = design.memories_of(place)
            layout = design.banking_of(*place).layout
            for ref in refs:
                names[sel[ref.kernel, ref.slot]] = ref.name
            holders.append(Holder(hb.id, "input" if writable else "output", dtype[hb.id].name, hb.size,
                                  tuple(Dim(d.stride, d.extent, d.factor) for d in layout.dims),
                                  tuple(sel[r.kernel, r.slot] for r in refs)))
    banks = tuple(BankWindow(i, "input" if p.write else "output", p.buffer, dtype[p.buffer].name, p.kernel,
                             names[i], (1 + i) * window, p.depth, p.width, container_bits(p.width), p.sign_extend)
                  for i, p in enumerate(ports))
    return BusMap(window, banks, tuple(holders))


def map_markdown(info: dict, *, top: str) -> list[str]:
    """The register map (BusMap.as_dict()) as Markdown lines for interface.md."""
    lines = [f"Address map: {info['size']:#x} bytes ({info['addr_bits']} address bits), 32-bit data, in windows "
             f"of {info['window']:#x} bytes: registers in window 0, bank s in window 1 + s. C: `tinyhw.h` (the "
             f"registers, a polling driver in `tinyhw.c`) and `{top}.h` (this map and the buffers' layouts).", "",
             "| offset | register | access | meaning |", "|---|---|---|---|"]
    lines += [f"| {r['offset']:#04x} | {r['name']} | {r['access']} | {r['doc']} |" for r in info["registers"]]
    lines += ["", "| offset | bank | role | buffer | dtype | elements | element bits | bytes per element | kernel memory |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {b['offset']:#x} | {b['sel']} | {b['role']} | {b['buffer']} | {b['dtype']} | {b['elements']} | "
              f"{b['element_bits']} | {b['container_bits'] // 8} | k{b['kernel']}.{b['memory']} |" for b in info["banks"]]
    lines += ["", "Layouts (element e of a buffer: digits d_j = e / stride_j (mod extent_j below the first); a "
              "digit split into F lanes puts d_j / F in the word address and d_j % F in the lane, both in mixed "
              "radix, most significant digit first):", "",
              "| buffer | role | elements | digits (stride x extent / lanes) | banks (lane 0, 1, ...) |",
              "|---|---|---|---|---|"]
    lines += [f"| {h['buffer']} | {h['role']} | {h['elements']} | "
              + " + ".join(f"{s}x{e}" + (f"/{f}" if f > 1 else "") for s, e, f in h["dims"])
              + f" | {', '.join(map(str, h['banks']))} |" for h in info["holders"]]
    return lines


# ---------------------------------------------------------------------------------------------
# the wrapper

class BusRequest:
    """One access as the shared state machine takes it (Wishbone classic semantics: held
    until `ack` or `err`)."""

    def __init__(self, word_bits: int):
        self.stb = Signal(name="req_stb")
        self.we = Signal(name="req_we")
        self.adr = Signal(word_bits, name="req_adr")          # word address (byte address / 4)
        self.dat_w = Signal(DATA_BITS, name="req_dat_w")
        self.sel = Signal(4, name="req_sel")
        self.ack = Signal(name="req_ack")
        self.err = Signal(name="req_err")
        self.dat_r = Signal(DATA_BITS, name="req_dat_r")
        self.idle = Signal(name="req_idle")                   # ready to take a request (not STALL)


class RunOnce:
    """How the register file runs a sequential design: CTRL.START (bit 0) runs it once; CYCLES
    counts the run; STATUS.DONE and the interrupt are set when it ends. compiler/bus/stream.py
    has the streaming counterpart (the same attributes and methods)."""

    def __init__(self, design: Design):
        self.design = design
        self.busy = Signal(name="run_busy")        # memories refused while high
        self.done = Signal(name="run_done")        # a pulse: sets STATUS.DONE and IRQ_STATUS.DONE
        self.ctrl = Const(0, 1)                    # what CTRL reads
        self.status = Const(0, 1)                  # STATUS bits above BUSY and DONE
        # a run takes the cycle model's count exactly (a static schedule): CYCLES needs no more bits
        self.cycles = Signal(min(32, design.cycle_model().total.bit_length() + 1))
        self.extra: dict[str, Signal] = {}         # further read-only registers by name
        self.start = Signal(name="run_start")

    def elaborate(self, m: Module, core) -> None:
        start, cycles = self.start, self.cycles
        m.d.comb += [self.busy.eq(core.busy | start), core.start.eq(start), self.done.eq(core.done)]
        m.d.sync += start.eq(0)
        with m.If(start):
            m.d.sync += cycles.eq(1)    # the START cycle is cycle 0, as the cycle model counts
        with m.Elif(core.busy & ~core.done):
            m.d.sync += cycles.eq(cycles + 1)

    def write_ctrl(self, m: Module, wdat: Value, status_done: Signal) -> None:
        with m.If(wdat[0] & ~self.busy):
            m.d.sync += [self.start.eq(1), status_done.eq(0)]

    def drive_host(self, m: Module, core, sel: Value, addr: Value, wdata: Value, we: Value) -> None:
        """The design's host bus from the register file's registers (only while idle)."""
        m.d.comb += [core.host_sel.eq(sel), core.host_addr.eq(addr), core.host_wdata.eq(wdata), core.host_we.eq(we)]


def register_slave(m: Module, design: Design, bmap: BusMap, req: BusRequest, irq: Signal, *, held: bool,
           control=None) -> None:
    """The register file and the memory windows behind `req`, driving `design.top` (added to
    `m` as submodule `core`). `held`: the front end holds the request's fields until it is
    answered (AXI: its channel registers), so they need no copy here; a pipelined Wishbone
    master changes them once the request is taken. `control`: how the design runs (RunOnce,
    or compiler/bus/stream.py's streaming control)."""
    core = design.top
    m.submodules.core = core
    control = control or RunOnce(design)
    latency = core.host_read_latency
    nbanks = len(bmap.banks)
    win_word_bits = (bmap.window // 4 - 1).bit_length()          # word offset inside a window
    elem_bits = win_word_bits + 3       # an element index in a window (+1: one past its end)
    data_bits = len(core.host_wdata)
    classes = sorted({{8: 0, 16: 1, 32: 2, 64: 3}[b.container_bits] for b in bmap.banks})
    reg = {r.name: r.offset for r in bmap.registers}

    # ---- registers
    busy = control.busy                 # the design runs, or is being started
    status_done = Signal()
    irq_enable = Signal()
    irq_pending = Signal()
    m.d.comb += irq.eq(irq_enable & irq_pending)
    control.elaborate(m, core)
    cycles = control.cycles
    # ---- the request (a copy of it, unless the front end holds it)
    if held:
        we, adr, wdat, wsel = req.we, req.adr, req.dat_w, req.sel
    else:
        we, adr, wdat, wsel = Signal(), Signal(len(req.adr)), Signal(DATA_BITS), Signal(4)
    rdat = Signal(DATA_BITS)
    err = Signal()
    stage = Signal(32 if 3 in classes else 0)     # the low word of a 64-bit element
    m.d.comb += [req.dat_r.eq(rdat)]

    # decoding (from the request's address), registered in DECODE: the bank's element width,
    # depth and direction are looked up once, and an access's element index is a counter, so
    # no path runs from the bus through the lookups into the design (on the int8 GEMV 16x16 at
    # fp_pipeline 3 that chain, address -> bank -> depth -> compare -> read data, took AXI4-Lite
    # from 148 MHz down to 106)
    win = adr[win_word_bits:]
    off = adr[:win_word_bits]
    cls_of = Array([Const({8: 0, 16: 1, 32: 2, 64: 3}[b.container_bits], 2) for b in bmap.banks] or [Const(0, 2)])
    depth_of = Array([Const(b.elements, elem_bits) for b in bmap.banks] or [Const(0, elem_bits)])
    input_of = Array([Const(b.role == "input", 1) for b in bmap.banks] or [Const(0, 1)])
    masked = [b for b in bmap.banks if b.element_bits != b.container_bits]
    mask_of = Array([Const((1 << b.element_bits) - 1, 64) for b in bmap.banks] or [Const(0, 64)])
    # a narrow signed element (an int32 sum stored in 25 bits) is read back sign-extended
    extended = [b for b in bmap.banks if b.sign_extend and b.role == "output"]
    sign_of = Array([Const(1 << (b.element_bits - 1) if b in extended else 0, 64) for b in bmap.banks] or [Const(0, 64)])
    bank = Signal(range(max(2, nbanks)))          # registered from here on
    cls = Signal(2)
    elem = Signal(elem_bits)            # the element the access is at (the word's first, then on)
    part = Signal()                     # 64-bit elements: which half
    depth = Signal(elem_bits)
    refused = Signal()                  # no such bank, or the wrong direction for it
    c_bank = Signal.like(bank)
    c_cls = Signal(2)
    m.d.comb += [c_bank.eq(win - 1), c_cls.eq(cls_of[c_bank])]
    c_first = Signal(elem_bits)
    with m.Switch(c_cls):
        for c in classes:
            with m.Case(c):
                m.d.comb += c_first.eq(off << (2 - c) if c < 3 else off >> 1)
    count = Signal(3)                   # elements per bus word: 4, 2, 1, 1
    m.d.comb += count.eq(Mux(cls == 0, 4, Mux(cls == 1, 2, 1)))

    # the host bus of the design, driven from registers
    h_sel, h_addr = Signal.like(core.host_sel), Signal.like(core.host_addr)
    h_wdata, h_we = Signal.like(core.host_wdata), Signal()
    control.drive_host(m, core, h_sel, h_addr, h_wdata, h_we)
    m.d.sync += h_we.eq(0)
    k = Signal(2)                       # element of the bus word
    wait = Signal(range(latency + 1))
    valid = Signal()                    # the element being read is not past the bank's end
    strobed, word = Signal(), Signal(data_bits)   # element k of the bus word: all its bytes enabled, its bits
    with m.Switch(cls):                 # only the element widths the design has
        for c in classes:
            with m.Case(c):
                if c == 0:
                    m.d.comb += [strobed.eq(wsel.bit_select(k, 1)), word.eq(wdat.word_select(k, 8))]
                elif c == 1:
                    m.d.comb += [strobed.eq(wsel.word_select(k[0], 2) == 3), word.eq(wdat.word_select(k[0], 16))]
                elif c == 2:
                    m.d.comb += [strobed.eq(wsel == 0xF), word.eq(wdat)]
                else:
                    m.d.comb += [strobed.eq(1), word.eq(Cat(stage, wdat))]
    rword = Signal(64)
    m.d.comb += rword.eq(core.host_rdata & mask_of[bank] if masked else core.host_rdata)
    if extended:
        m.d.comb += rword.eq((core.host_rdata & mask_of[bank])
                             | Mux((core.host_rdata & sign_of[bank]).any(), ~mask_of[bank], 0))

    m.d.comb += req.idle.eq(0)
    with m.FSM(name="bus"):
        with m.State("IDLE"):
            m.d.comb += req.idle.eq(1)
            with m.If(req.stb):
                m.d.sync += [k.eq(0), rdat.eq(0), err.eq(0)]
                if not held:
                    m.d.sync += [we.eq(req.we), adr.eq(req.adr), wdat.eq(req.dat_w), wsel.eq(req.sel)]
                m.next = "DECODE"
        with m.State("DECODE"):
            m.d.sync += [bank.eq(c_bank), cls.eq(c_cls), elem.eq(c_first), part.eq((c_cls == 3) & off[0]),
                         depth.eq(depth_of[c_bank]), refused.eq((win > nbanks) | (input_of[c_bank] != we))]
            m.next = "CHECK"
            with m.If(win == 0):
                m.next = "RESPOND"
                with m.Switch(off):
                    with m.Case(reg["ID"] // 4):
                        m.d.sync += [rdat.eq(bmap.ident), err.eq(we)]
                    with m.Case(reg["CTRL"] // 4):
                        m.d.sync += rdat.eq(control.ctrl)
                        with m.If(we & wsel[0]):
                            control.write_ctrl(m, wdat, status_done)
                    with m.Case(reg["STATUS"] // 4):
                        m.d.sync += [rdat.eq(Cat(busy, status_done, control.status)), err.eq(we)]
                    with m.Case(reg["CYCLES"] // 4):
                        m.d.sync += [rdat.eq(cycles), err.eq(we)]
                    with m.Case(reg["IRQ_ENABLE"] // 4):
                        m.d.sync += rdat.eq(irq_enable)
                        with m.If(we & wsel[0]):
                            m.d.sync += irq_enable.eq(wdat[0])
                    with m.Case(reg["IRQ_STATUS"] // 4):
                        m.d.sync += rdat.eq(irq_pending)
                        with m.If(we & wsel[0] & wdat[0]):
                            m.d.sync += irq_pending.eq(0)
                    for name, value in control.extra.items():
                        with m.Case(reg[name] // 4):
                            m.d.sync += [rdat.eq(value), err.eq(we)]
                    with m.Default():
                        m.d.sync += err.eq(1)
        with m.State("CHECK"):
            with m.If(refused | busy | (elem >= depth)):
                m.d.sync += err.eq(1)
                m.next = "RESPOND"
            with m.Elif(we & (cls == 3) & ~part):
                m.d.sync += stage.eq(wdat)
                m.next = "RESPOND"
            with m.Elif(we):
                m.next = "WRITE"
            with m.Else():
                m.next = "READ"
        with m.State("WRITE"):          # one element per cycle
            m.d.sync += [h_sel.eq(bank), h_addr.eq(elem), h_wdata.eq(word), h_we.eq(strobed & (elem < depth)),
                         k.eq(k + 1), elem.eq(elem + 1)]
            with m.If(k + 1 == count):
                m.next = "RESPOND"
        with m.State("READ"):           # an element's address, held for `latency` cycles
            m.d.sync += [h_sel.eq(bank), h_addr.eq(elem), wait.eq(latency), valid.eq(elem < depth)]
            m.next = "READ_WAIT"
        with m.State("READ_WAIT"):
            with m.If(wait == 0):
                with m.Switch(cls):
                    for c in classes:
                        with m.Case(c):
                            if c == 0:
                                m.d.sync += rdat.word_select(k, 8).eq(Mux(valid, rword[:8], 0))
                            elif c == 1:
                                m.d.sync += rdat.word_select(k[0], 16).eq(Mux(valid, rword[:16], 0))
                            elif c == 2:
                                m.d.sync += rdat.eq(rword[:32])
                            else:
                                m.d.sync += rdat.eq(Mux(part, rword[32:64], rword[:32]))
                m.d.sync += [k.eq(k + 1), elem.eq(elem + 1)]
                with m.If(k + 1 == count):
                    m.next = "RESPOND"
                with m.Else():
                    m.next = "READ"
            with m.Else():
                m.d.sync += wait.eq(wait - 1)
        with m.State("RESPOND"):
            m.d.comb += [req.ack.eq(~err), req.err.eq(err)]
            m.next = "IDLE"
    with m.If(control.done):            # after the FSM: a run's end wins over a clear in the same cycle
        m.d.sync += [status_done.eq(1), irq_pending.eq(1)]


class WishboneWrapper(wiring.Component):
    """`design` behind a Wishbone B4 slave: 32-bit data, byte SEL, word addresses (`wb_adr` =
    byte address / 4, as LiteX's bus). Classic cycles (STB held until ACK or ERR); pipelined
    masters use `wb_stall` (high until the access is answered: one access at a time)."""

    def __init__(self, design: Design, bmap: BusMap | None = None):
        self.design = design
        self.bmap = bmap or bus_map(design)
        word_bits = max(1, self.bmap.addr_bits - 2)
        super().__init__({
            "wb_cyc": In(1), "wb_stb": In(1), "wb_we": In(1), "wb_adr": In(word_bits), "wb_dat_w": In(DATA_BITS),
            "wb_sel": In(4), "wb_dat_r": Out(DATA_BITS), "wb_ack": Out(1), "wb_err": Out(1), "wb_stall": Out(1),
            "irq": Out(1)})

    def elaborate(self, platform):
        m = Module()
        req = BusRequest(len(self.wb_adr))
        register_slave(m, self.design, self.bmap, req, self.irq, held=False)
        m.d.comb += [req.stb.eq(self.wb_cyc & self.wb_stb), req.we.eq(self.wb_we), req.adr.eq(self.wb_adr),
                     req.dat_w.eq(self.wb_dat_w), req.sel.eq(self.wb_sel), self.wb_dat_r.eq(req.dat_r),
                     self.wb_ack.eq(req.ack & self.wb_cyc), self.wb_err.eq(req.err & self.wb_cyc),
                     self.wb_stall.eq(~req.idle)]
        return m


AXI_OKAY, AXI_SLVERR = 0b00, 0b10


class AxiLiteWrapper(wiring.Component):
    """`design` behind an AXI4-Lite slave (`s_axi_*`): 32-bit data, byte addresses, WSTRB;
    one outstanding access (writes first when a write and a read wait together); errors
    answer SLVERR. AWPROT/ARPROT are accepted and ignored. Reset: `rst`, active high."""

    def __init__(self, design: Design, bmap: BusMap | None = None):
        self.design = design
        self.bmap = bmap or bus_map(design)
        super().__init__(axi_lite_members(self.bmap))

    def elaborate(self, platform):
        m = Module()
        req = BusRequest(max(1, self.bmap.addr_bits - 2))
        register_slave(m, self.design, self.bmap, req, self.irq, held=True)
        axi_lite_front(m, self, req)
        return m


def axi_lite_members(bmap: BusMap) -> dict:
    """The AXI4-Lite slave's ports (`s_axi_*`) of a wrapper, and `irq`."""
    a = bmap.addr_bits
    return {
        "s_axi_awaddr": In(a), "s_axi_awprot": In(3), "s_axi_awvalid": In(1), "s_axi_awready": Out(1),
        "s_axi_wdata": In(DATA_BITS), "s_axi_wstrb": In(4), "s_axi_wvalid": In(1), "s_axi_wready": Out(1),
        "s_axi_bresp": Out(2), "s_axi_bvalid": Out(1), "s_axi_bready": In(1),
        "s_axi_araddr": In(a), "s_axi_arprot": In(3), "s_axi_arvalid": In(1), "s_axi_arready": Out(1),
        "s_axi_rdata": Out(DATA_BITS), "s_axi_rresp": Out(2), "s_axi_rvalid": Out(1), "s_axi_rready": In(1),
        "irq": Out(1)}


def axi_lite_front(m: Module, c, req: BusRequest) -> None:
    """The AXI4-Lite channels of component `c` (its `s_axi_*` ports) as requests to the shared
    state machine. Each channel's address and data wait in a register until the access is
    answered, so they are the request the state machine reads."""
    aw_full, w_full, ar_full = Signal(), Signal(), Signal()
    aw_addr, ar_addr = Signal.like(c.s_axi_awaddr), Signal.like(c.s_axi_araddr)
    w_data, w_strb = Signal(DATA_BITS), Signal(4)
    m.d.comb += [c.s_axi_awready.eq(~aw_full), c.s_axi_wready.eq(~w_full), c.s_axi_arready.eq(~ar_full)]
    with m.If(c.s_axi_awvalid & ~aw_full):
        m.d.sync += [aw_addr.eq(c.s_axi_awaddr), aw_full.eq(1)]
    with m.If(c.s_axi_wvalid & ~w_full):
        m.d.sync += [w_data.eq(c.s_axi_wdata), w_strb.eq(c.s_axi_wstrb), w_full.eq(1)]
    with m.If(c.s_axi_arvalid & ~ar_full):
        m.d.sync += [ar_addr.eq(c.s_axi_araddr), ar_full.eq(1)]

    writing = Signal()
    m.d.comb += [req.we.eq(writing), req.adr.eq(Mux(writing, aw_addr[2:], ar_addr[2:])), req.dat_w.eq(w_data),
                 req.sel.eq(Mux(writing, w_strb, 0xF))]
    resp = Signal(2)
    rdata = Signal(DATA_BITS)
    m.d.comb += [c.s_axi_bresp.eq(resp), c.s_axi_rresp.eq(resp), c.s_axi_rdata.eq(rdata)]
    with m.FSM(name="axi"):
        with m.State("IDLE"):
            with m.If(aw_full & w_full):
                m.d.sync += writing.eq(1)
                m.next = "ACCESS"
            with m.Elif(ar_full):
                m.d.sync += writing.eq(0)
                m.next = "ACCESS"
        with m.State("ACCESS"):
            m.d.comb += req.stb.eq(1)
            with m.If(req.ack | req.err):
                m.d.sync += [resp.eq(Mux(req.err, AXI_SLVERR, AXI_OKAY)), rdata.eq(req.dat_r)]
                with m.If(writing):
                    m.d.sync += [aw_full.eq(0), w_full.eq(0)]
                    m.next = "B"
                with m.Else():
                    m.d.sync += ar_full.eq(0)
                    m.next = "R"
        with m.State("B"):
            m.d.comb += c.s_axi_bvalid.eq(1)
            with m.If(c.s_axi_bready):
                m.next = "IDLE"
        with m.State("R"):
            m.d.comb += c.s_axi_rvalid.eq(1)
            with m.If(c.s_axi_rready):
                m.next = "IDLE"


WRAPPERS = {"axi-lite": AxiLiteWrapper, "wishbone": WishboneWrapper}


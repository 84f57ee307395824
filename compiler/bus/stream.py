"""AXI-Stream for a schedule=dataflow design: samples in on `s_axis_*`, outputs out on
`m_axis_*`, beats run as samples come, beside an AXI4-Lite control bus (the register file and
memory windows of compiler/bus/wrapper.py, with the streaming registers below).

    stream_plan(design)        -> StreamPlan: the element order on both streams, the bank and
                                  address every element goes to or comes from
    StreamWrapper(design)      -> the Amaranth top of `--bus axi-stream`

**On the streams** a sample is its streamed inputs' elements (model buffers in the model's
input order, each in element order: row-major as numpy holds it), one element per transfer in
the low bits of `s_axis_tdata` (8, 16, 32 or 64 bits: the widest element's container), `tlast`
on its last element; its outputs come the same way on `m_axis_*` (the outputs in the model's
order, `tlast` on the last element of a sample). `tkeep`/`tstrb` are not used (every byte is
data); `tready` does not wait for `tvalid`.

**Running.** CTRL.RUN = 1 streams: every element taken is written into the design's bank for
the next sample (an input held by several kernels is written into each: the element waits on
`s_axis` for as many cycles, `tready` low but the last); when a whole sample is in and the
design is free a beat starts; when a beat completes a sample its outputs are read out of the
design into a small FIFO feeding `m_axis`. A beat also starts without a new sample when none
has begun arriving and samples are still inside (a bubble: its outputs are dropped), so the last
samples come out without waiting for more. A beat starts only after the outputs due before it
are read out, so a stalled `m_axis` stalls the beats and then `s_axis` (no sample is dropped).
CTRL.RUN = 0 takes no new sample (one half taken is finished), drains the ones inside, and then
sets STATUS.DONE and the interrupt. Weights are written through the memory windows while the
stream is stopped and drained (STATUS.BUSY low).

**Cycles.** The beat is the design's (`interval` in interface.json); with `s_axis` never
empty and `m_axis` never stalled, samples come out every max(beat, writes + 1, reads + 2 +
delay) cycles (writes: a sample's element writes, one a cycle; reads: its output elements;
delay: the design's host_delay, 1 from fp_pipeline 3 where its bus is registered), the beat
whenever a sample's words fit in it (`keeps_up`). The first output element of a sample entering
an idle pipeline comes depth x beat + 5 + host_read_latency cycles after its last input element
is taken (the beat starts 2 cycles after that element; the completed sample's first read is
issued the cycle after the beat's done, its address registered here, its word on host_rdata
host_read_latency cycles later, in the FIFO the next).
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

import numpy as np

from ..design import Design
from .wrapper import (BusError, BusMap, Register, BusRequest, register_slave, axi_lite_front, axi_lite_members, bus_map,
                      container_bits)

STREAM_ID = 0x74687732                   # "thw2": the streaming register map
FIRST_OUTPUT_EXTRA = 5                   # cycles, + the design's host_read_latency: the module docstring
FIFO_DEPTH = 8                           # output elements between the design and m_axis

STREAM_REGISTERS = (
    Register("ID", 0x00, "RO", f"0x{STREAM_ID:08x} (\"thw2\"): the streaming register map, version 1"),
    Register("CTRL", 0x04, "RW", "bit 0 RUN: 1 streams (s_axis taken, beats run, m_axis fed), clears STATUS.DONE, "
                                 "TLAST_ERR and the sample counters; 0 takes no new sample and drains the ones "
                                 "inside; reads RUN"),
    Register("STATUS", 0x08, "RO", "bit 0 BUSY: running, or samples inside; bit 1 DONE: drained since RUN was "
                                   "cleared; bit 2 TLAST_ERR: an s_axis tlast was missing or early (since RUN)"),
    Register("CYCLES", 0x0C, "RO", "cycles between the starts of the last two beats: the interval (the cycle "
                                   "model's while the stream keeps up)"),
    Register("IRQ_ENABLE", 0x10, "RW", "bit 0: raise `irq` while IRQ_STATUS.DONE is set"),
    Register("IRQ_STATUS", 0x14, "RW1C", "bit 0 DONE: set when the stream has drained after RUN was cleared; "
                                         "write 1 to clear"),
    Register("SAMPLES_IN", 0x18, "RO", "samples taken from s_axis since RUN was set"),
    Register("SAMPLES_OUT", 0x1C, "RO", "samples sent on m_axis since RUN was set"),
)
RUN, STATUS_TLAST_ERR = 1, 4

STREAM_BUS_PROTOCOL = {
    "clock": "one clock `clk`, all logic on its rising edge; `rst` is a synchronous reset (active high)",
    "bus": "AXI4-Lite slave `s_axi_*` for control and weights (32-bit data, byte addresses, WSTRB, one access at "
           "a time, errors answer SLVERR); `irq` is high while IRQ_STATUS.DONE and IRQ_ENABLE are set",
    "streams": "AXI-Stream slave `s_axis_*` takes samples, master `m_axis_*` gives their outputs (tdata, tvalid, "
               "tready, tlast): one element a transfer in the low bits, in element order, tlast on a sample's last; "
               "`stream.axis` says which buffers, their widths and elements",
    "run": "write the weights into their banks, then 1 to CTRL (RUN): samples stream; 0 to CTRL stops taking "
           "samples and drains the ones inside, then STATUS.DONE (and `irq`) says it drained; SAMPLES_IN, "
           "SAMPLES_OUT count them; CYCLES holds the last interval between beats",
    "idle_only": "memory banks answer only while the stream is stopped and drained (STATUS.BUSY low); registers always",
    "backpressure": "m_axis tready low stalls the beats and then s_axis: no sample is dropped",
}


@dataclass(frozen=True)
class StreamOp:
    """One bank word a stream element is written to (input) or read from (output)."""
    sel: int                             # host port (bank)
    addr: int                            # word in it
    element: int                         # the element's place in the sample, on the stream
    last_of_element: bool                # input: the element's last bank (it is taken then)


@dataclass(frozen=True)
class StreamPlan:
    writes: tuple[StreamOp, ...]         # a sample's element writes, in stream order
    reads: tuple[StreamOp, ...]          # a sample's output elements, in stream order
    in_bits: int                         # s_axis_tdata width
    out_bits: int                        # m_axis_tdata width
    inputs: tuple[tuple[int, str, int], ...]     # (buffer, dtype, elements) in stream order
    outputs: tuple[tuple[int, str, int], ...]
    beat: int
    depth: int
    read_latency: int                    # the design's host_read_latency
    delay: int                           # its host_delay: pins to a memory's port

    @property
    def in_elements(self) -> int:
        return sum(n for _, _, n in self.inputs)

    @property
    def out_elements(self) -> int:
        return sum(n for _, _, n in self.outputs)

    @property
    def interval(self) -> int:
        """Cycles between samples on the streams with s_axis never empty and m_axis never stalled."""
        return max(self.beat, len(self.writes) + 1, len(self.reads) + 2 + self.delay)

    @property
    def keeps_up(self) -> bool:
        return self.interval == self.beat

    @property
    def first_output(self) -> int:
        """Cycles from a sample's last input element taken (into an idle pipeline) to its first
        output element valid on m_axis."""
        return self.depth * self.beat + FIRST_OUTPUT_EXTRA + self.read_latency


def _positions(design: Design, place, size: int) -> dict[int, tuple[int, int]]:
    """element -> (bank index among the holder's banks, word) in the layout of `place`."""
    layout = design.banking_of(*place).layout
    banks = layout.scatter(np.arange(1, size + 1, dtype=np.uint64))
    where = {}
    for b, words in enumerate(banks):
        for a, e in enumerate(words.tolist()):
            if e:
                where[int(e) - 1] = (b, a)
    return where


def stream_plan(design: Design) -> StreamPlan:
    flow = design.flow
    if flow is None:
        raise BusError(f"{design.name()} is a sequential design: nothing streams")
    sel = {(p.kernel, p.slot): i for i, p in enumerate(design.host_ports)}
    graph = design.graph
    streamed = [b for b in graph.inputs if b in flow.streamed and b in design.host_buffers]
    if not streamed:
        raise BusError(f"{design.name()}: no input streams (compile_model(stream=...)): nothing for s_axis")
    writes: list[StreamOp] = []
    base = 0
    inputs = []
    for buf in streamed:
        hb = design.host_buffers[buf]
        holders = [(design.memories_of(pl), _positions(design, pl, hb.size)) for pl in hb.holders]
        for e in range(hb.size):
            for h, (refs, where) in enumerate(holders):
                b, a = where[e]
                writes.append(StreamOp(sel[refs[b].kernel, refs[b].slot], a, base + e, h == len(holders) - 1))
        base += hb.size
        inputs.append((buf, graph.buffers[buf].dtype.name, hb.size))
    reads: list[StreamOp] = []
    base = 0
    outputs = []
    for buf in graph.outputs:
        hb = design.host_buffers[buf]
        refs, where = design.home_memories(buf), _positions(design, hb.home, hb.size)
        for e in range(hb.size):
            b, a = where[e]
            reads.append(StreamOp(sel[refs[b].kernel, refs[b].slot], a, base + e, True))
        base += hb.size
        outputs.append((buf, graph.buffers[buf].dtype.name, hb.size))
    in_bits = max(container_bits(graph.buffers[b].dtype.bits) for b, _, _ in inputs)
    out_bits = max(container_bits(graph.buffers[b].dtype.bits) for b, _, _ in outputs)
    top = design.top
    return StreamPlan(tuple(writes), tuple(reads), in_bits, out_bits, tuple(inputs), tuple(outputs),
                      flow.beat, flow.depth, top.host_read_latency, top.host_delay)


def stream_bus_map(design: Design) -> BusMap:
    m = bus_map(design)
    return BusMap(m.window, m.banks, m.holders, STREAM_REGISTERS, m.data_bits, STREAM_ID)


def _rom(m: Module, name: str, ops: tuple[StreamOp, ...], sel_bits: int, addr_bits: int, index: Value):
    """A ROM of `ops` (sel, addr, last_of_element, last) read at `index` a cycle earlier:
    returns (sel, addr, last_of_element, last) of the op at the index as it is now."""
    width = sel_bits + addr_bits + 2
    init = [op.sel | op.addr << sel_bits | int(op.last_of_element) << (sel_bits + addr_bits)
            | int(i == len(ops) - 1) << (sel_bits + addr_bits + 1) for i, op in enumerate(ops)]
    mem = memory.Memory(shape=unsigned(width), depth=len(ops), init=init)
    m.submodules[name] = mem
    rp = mem.read_port()
    m.d.comb += rp.addr.eq(index)
    d = rp.data
    return (d[:sel_bits], d[sel_bits:sel_bits + addr_bits], d[sel_bits + addr_bits], d[sel_bits + addr_bits + 1])


class StreamControl:
    """The register file's run control for a dataflow design fed by AXI-Stream (compiler.bus.
    wrapper.RunOnce's counterpart; module docstring)."""

    def __init__(self, design: Design, plan: StreamPlan, ports):
        self.design, self.plan, self.ports = design, plan, ports
        self.busy = Signal(name="stream_busy")
        self.done = Signal(name="stream_drained")
        self.run = Signal(name="stream_run")
        self.ctrl = self.run
        self.tlast_err = Signal(name="tlast_err")
        self.status = self.tlast_err
        self.cycles = Signal(32, name="stream_interval")
        self.samples_in = Signal(32, name="samples_in")
        self.samples_out = Signal(32, name="samples_out")
        self.extra = {"SAMPLES_IN": self.samples_in, "SAMPLES_OUT": self.samples_out}
        self.active = Signal(name="stream_active")     # RUN was set and the stream has not drained since
        self.clear = Signal(name="stream_clear")       # RUN written 1: counters and flags cleared
        # the engine's drive of the design's host bus (registered)
        self.e_sel = Signal(name="e_sel_w")
        self.e_we = Signal(name="e_we")

    def write_ctrl(self, m: Module, wdat: Value, status_done: Signal) -> None:
        m.d.sync += self.run.eq(wdat[0])
        with m.If(wdat[0]):
            m.d.sync += [status_done.eq(0), self.clear.eq(1)]

    def drive_host(self, m: Module, core, sel: Value, addr: Value, wdata: Value, we: Value) -> None:
        e = self._host
        streaming = self.active
        m.d.comb += [core.host_sel.eq(Mux(streaming, e["sel"], sel)), core.host_addr.eq(Mux(streaming, e["addr"], addr)),
                     core.host_wdata.eq(Mux(streaming, e["wdata"], wdata)), core.host_we.eq(Mux(streaming, e["we"], we)),
                     core.host_rsel.eq(Mux(streaming, e["rsel"], sel)),
                     core.host_raddr.eq(Mux(streaming, e["raddr"], addr))]

    def elaborate(self, m: Module, core) -> None:
        plan, p = self.plan, self.ports
        B, D = plan.beat, plan.depth
        sel_bits, addr_bits = len(core.host_sel), len(core.host_addr)
        self._host = e = {"sel": Signal.like(core.host_sel, name="e_sel"),
                          "addr": Signal.like(core.host_addr, name="e_addr"),
                          "wdata": Signal.like(core.host_wdata, name="e_wdata"), "we": Signal(name="e_we"),
                          "rsel": Signal.like(core.host_rsel, name="e_rsel"),
                          "raddr": Signal.like(core.host_raddr, name="e_raddr")}
        m.d.sync += [e["we"].eq(0), self.clear.eq(0)]
        with m.If(self.run):
            m.d.sync += self.active.eq(1)

        # ---- s_axis: element writes into the next sample's banks
        nw = len(plan.writes)
        wi = Signal(range(max(nw, 2)), name="in_op")
        in_full = Signal(name="in_full")          # the next sample is whole: a beat may take it
        mid = wi != 0                             # a sample half taken
        take = ~in_full & (self.run | mid)
        step = take & p.s_axis_tvalid
        w_next = Mux(wi == nw - 1, 0, wi + 1)
        w_sel, w_addr, w_lastel, w_last = _rom(m, "in_ops", plan.writes, sel_bits, addr_bits,
                                                Mux(step, w_next, wi))
        m.d.comb += p.s_axis_tready.eq(take & w_lastel)
        with m.If(step):
            m.d.sync += [e["we"].eq(1), e["sel"].eq(w_sel), e["addr"].eq(w_addr),
                         e["wdata"].eq(p.s_axis_tdata), wi.eq(w_next)]
            with m.If(w_last):
                m.d.sync += [in_full.eq(1), self.samples_in.eq(self.samples_in + 1)]
                with m.If(~p.s_axis_tlast):
                    m.d.sync += self.tlast_err.eq(1)
            with m.Elif(w_lastel & p.s_axis_tlast):
                m.d.sync += self.tlast_err.eq(1)

        # ---- beats: started a cycle after the decision, as the design becomes free
        left = Signal(range(B + 1), name="beat_left")
        start = Signal(name="beat_start")
        real = Signal(name="beat_real")
        hist = Signal(D, name="beat_samples")     # bit i: the beat i beats ago took a sample
        reading = Signal(name="out_reading")
        pending = hist[:D - 1].any() if D > 1 else Const(0)
        free = (left <= 1) & ~start
        # a read's address reaches the block RAM 1 + delay cycles after it is issued: the last one
        # of a sample must do so inside the beat its bank belongs to
        recent = Signal(max(1, plan.delay), name="out_recent")
        go = free & ~reading & (in_full | (~mid & pending)) & (~recent.any() if plan.delay else 1)
        m.d.comb += core.start.eq(start)
        m.d.sync += start.eq(go)
        with m.If(go):
            m.d.sync += [real.eq(in_full), in_full.eq(0)]
        since = Signal(32, name="since_beat")
        m.d.sync += since.eq(since + 1)
        with m.If(start):
            m.d.sync += [left.eq(B - 1), hist.eq(Cat(real, hist[:D - 1])), self.cycles.eq(since), since.eq(1)]
        with m.Else():
            with m.If(left != 0):
                m.d.sync += left.eq(left - 1)
            with m.If(core.done):                 # its outputs are being read: no longer inside
                m.d.sync += hist[D - 1].eq(0)

        # ---- m_axis: a completed sample's outputs read out through a FIFO
        nr = len(plan.reads)
        ri = Signal(range(max(nr, 2)), name="out_op")
        lat = core.host_read_latency
        fifo = m.submodules.out_fifo = SyncFIFO(width=plan.out_bits + 1, depth=FIFO_DEPTH)
        flight = Signal(range(lat + 3), name="out_in_flight")
        valid = Signal(lat + 1, name="out_valid")  # an address on the bus, then its data
        lasts = Signal(lat + 1, name="out_last")
        credit = fifo.level + flight < FIFO_DEPTH
        issue = reading & credit
        r_next = Mux(ri == nr - 1, 0, ri + 1)
        r_sel, r_addr, _, r_last = _rom(m, "out_ops", plan.reads, sel_bits, addr_bits, Mux(issue, r_next, ri))
        with m.If(core.done & hist[D - 1]):
            m.d.sync += reading.eq(1)
        if plan.delay:
            m.d.sync += recent.eq(Cat(issue, recent[:-1]))
        with m.If(issue):
            m.d.sync += [e["rsel"].eq(r_sel), e["raddr"].eq(r_addr), ri.eq(r_next)]
            with m.If(r_last):
                m.d.sync += reading.eq(0)
        m.d.sync += [valid.eq(Cat(issue, valid[:-1])), lasts.eq(Cat(issue & r_last, lasts[:-1]))]
        arrive = valid[-1]
        m.d.sync += flight.eq(flight + issue - arrive)
        # each word widened as its bank says: a narrow signed element (an int32 sum stored in
        # 19 bits) sign-extended to its dtype's container (the value's own word, as
        # mem/stream_out.hex holds it), then zero-extended to tdata like any narrower element;
        # the bank of the word arriving is the one read lat + 1 cycles ago
        sels = [Signal.like(core.host_rsel, name=f"out_sel{i}") for i in range(lat + 1)]
        m.d.sync += [sels[0].eq(r_sel)] + [b.eq(a) for a, b in zip(sels, sels[1:])]
        word = Signal(plan.out_bits, name="out_word")
        m.d.comb += word.eq(core.host_rdata[:plan.out_bits])
        with m.Switch(sels[-1]):
            for s in sorted({op.sel for op in plan.reads}):
                port = self.design.host_ports[s]
                c = min(plan.out_bits, container_bits(self.design.graph.buffers[port.buffer].dtype.bits))
                if port.width < plan.out_bits:
                    data = core.host_rdata[:port.width]
                    with m.Case(s):
                        if port.sign_extend and port.width < c:
                            ext = Signal(c, name=f"out_ext{s}")
                            m.d.comb += [ext.eq(data.as_signed()), word.eq(ext)]
                        else:
                            m.d.comb += word.eq(data)
        m.d.comb += [fifo.w_en.eq(arrive), fifo.w_data.eq(Cat(word, lasts[-1])),
                     p.m_axis_tvalid.eq(fifo.r_rdy), p.m_axis_tdata.eq(fifo.r_data[:plan.out_bits]),
                     p.m_axis_tlast.eq(fifo.r_data[plan.out_bits]), fifo.r_en.eq(p.m_axis_tready)]
        with m.If(p.m_axis_tvalid & p.m_axis_tready & p.m_axis_tlast):
            m.d.sync += self.samples_out.eq(self.samples_out + 1)

        # ---- drained: stopped, nothing inside, every output out
        empty = ~self.run & ~mid & ~in_full & (hist == 0) & ~reading & (flight == 0) & ~fifo.r_rdy & \
            (left == 0) & ~start & ~core.busy
        m.d.comb += [self.busy.eq(self.active | core.busy), self.done.eq(self.active & empty)]
        with m.If(self.active & empty):
            m.d.sync += self.active.eq(0)
        with m.If(self.clear):                    # RUN written 1
            m.d.sync += [self.samples_in.eq(0), self.samples_out.eq(0), self.tlast_err.eq(0)]


class StreamWrapper(wiring.Component):
    """`design` (schedule=dataflow) with AXI-Stream `s_axis_*` in and `m_axis_*` out beside an
    AXI4-Lite control slave `s_axi_*` (module docstring). Reset: `rst`, active high."""

    def __init__(self, design: Design, bmap: BusMap | None = None):
        self.design = design
        self.plan = stream_plan(design)
        self.bmap = bmap or stream_bus_map(design)
        super().__init__({**axi_lite_members(self.bmap),
                          "s_axis_tdata": In(self.plan.in_bits), "s_axis_tvalid": In(1), "s_axis_tready": Out(1),
                          "s_axis_tlast": In(1),
                          "m_axis_tdata": Out(self.plan.out_bits), "m_axis_tvalid": Out(1), "m_axis_tready": In(1),
                          "m_axis_tlast": Out(1)})

    def elaborate(self, platform):
        m = Module()
        req = BusRequest(max(1, self.bmap.addr_bits - 2))
        register_slave(m, self.design, self.bmap, req, self.irq, held=True, control=StreamControl(self.design, self.plan, self))
        axi_lite_front(m, self, req)
        return m

    def stream_info(self) -> dict:
        """interface.json's stream figures of the AXI-Stream ports."""
        plan = self.plan
        return {"axis": {"in_bits": plan.in_bits, "out_bits": plan.out_bits,
                         "inputs": [{"buffer": b, "dtype": d, "elements": n} for b, d, n in plan.inputs],
                         "outputs": [{"buffer": b, "dtype": d, "elements": n} for b, d, n in plan.outputs],
                         "in_elements": plan.in_elements, "out_elements": plan.out_elements,
                         "element_writes": len(plan.writes), "stream_interval": plan.interval,
                         "keeps_up": plan.keeps_up, "first_output": plan.first_output}}


def stream_markdown(st: dict) -> list[str]:
    a = st["axis"]
    ins = ", ".join(f"buffer {i['buffer']} ({i['elements']} x {i['dtype']})" for i in a["inputs"])
    outs = ", ".join(f"buffer {o['buffer']} ({o['elements']} x {o['dtype']})" for o in a["outputs"])
    return ["## AXI-Stream", "",
            f"`s_axis` ({a['in_bits']}-bit tdata, one element a transfer, tlast on a sample's last): {ins}, "
            f"{a['in_elements']} elements a sample. `m_axis` ({a['out_bits']}-bit tdata): {outs}, "
            f"{a['out_elements']} elements a sample. Elements in element order (row-major), in the low bits.", "",
            f"With s_axis never empty and m_axis never stalled a sample comes out every {a['stream_interval']} "
            f"cycles ({'the beat: the stream keeps up' if a['keeps_up'] else 'more than the beat: the stream bounds it'}); "
            f"a sample entering an idle pipeline gives its first output element {a['first_output']} cycles after "
            "its last input element was taken.", ""]


# ---------------------------------------------------------------------------------------------
# the export's files: the streams' words, tb.v, C

def stream_words(design: Design, plan: StreamPlan, samples: list[dict], results: list) -> tuple[str, str]:
    """mem/stream_in.hex and mem/stream_out.hex: every sample's elements as they go over s_axis
    and come over m_axis (in their containers, hex), sample after sample."""
    from .. import dtypes as dt
    from ..sim.memory_io import input_words
    base = input_words(design, None)
    ins, outs = [], []
    for s, r in zip(samples, results):
        own = input_words(design, s, only_given=True)
        for buf, _, _ in plan.inputs:
            ins += own.get(buf, base[buf]).tolist()
        for k, (buf, _, _) in enumerate(plan.outputs):
            outs += dt.to_words(r.outputs[design.graph.outputs.index(buf)].reshape(-1), design.graph.buffers[buf].dtype).tolist()

    def lines(words, bits):
        mask = (1 << bits) - 1
        return "\n".join(format(int(w) & mask, f"0{bits // 4}x") for w in words) + "\n"
    return lines(ins, plan.in_bits), lines(outs, plan.out_bits)


def stream_testbench(wrapper: "StreamWrapper", ports, *, top: str, samples: int) -> str:
    """tb.v for `<top>.v` behind axi-stream: the weights through AXI4-Lite, RUN, `samples`
    samples back to back on s_axis (mem/stream_in.hex) while m_axis is always ready, every
    output element compared with mem/stream_out.hex and every tlast checked; the interval
    between samples on m_axis (every one when the stream keeps up) and the first sample's
    latency checked against the model; then RUN cleared, the drain's interrupt awaited, STATUS,
    CYCLES and the sample counters checked."""
    from .testbench import AXI_TASKS, load_lines
    plan, bmap = wrapper.plan, wrapper.bmap
    streamed = {b for b, _, _ in plan.inputs}
    reg = {r.name: r.offset for r in STREAM_REGISTERS}
    weights = [p for p in ports if p.role == "input" and p.buffer not in streamed]
    arrays, loads = [], []
    for p in weights:
        arrays.append(f"  reg [{p.width - 1}:0] in{p.sel} [0:{p.depth - 1}];\n"
                      f"  initial $readmemh(\"{p.file}\", in{p.sel});")
        loads.append(load_lines(bmap, p, f"in{p.sel}"))
    tasks = AXI_TASKS.format(top=top).replace(
        ".s_axi_rready(rready));",
        ".s_axi_rready(rready),\n    .s_axis_tdata(s_tdata), .s_axis_tvalid(s_tvalid), .s_axis_tready(s_tready), "
        ".s_axis_tlast(s_tlast),\n    .m_axis_tdata(m_tdata), .m_axis_tvalid(m_tvalid), .m_axis_tready(m_tready), "
        ".m_axis_tlast(m_tlast));")
    nl = "\n"
    nin, nout = plan.in_elements, plan.out_elements
    return f"""// Self-checking testbench for {top}, {wrapper.design.name()} behind axi-stream (generated by tinyhw).
// Run from this folder:  iverilog -g2012 -o tb.vvp {top}.v tb.v && vvp tb.vvp
// The weights go in through AXI4-Lite; CTRL.RUN; {samples} samples go back to back on s_axis
// (mem/stream_in.hex) while m_axis is always ready; every output element is compared with
// mem/stream_out.hex and every tlast checked; {"the interval between samples on m_axis is checked against the beat, and the first sample's latency against the model" if plan.keeps_up else "the stream is slower than the beat here: the interval is printed"};
// then RUN is cleared, the interrupt of the drained stream awaited, STATUS, CYCLES and the
// sample counters checked.
`timescale 1ns/1ps
module tb;
  localparam ADDR_BITS = {bmap.addr_bits};
  localparam SAMPLES = {samples};
  localparam IN_ELEMENTS = {nin};         // a sample's elements on s_axis
  localparam OUT_ELEMENTS = {nout};        // a sample's elements on m_axis
  localparam BEAT = {plan.beat};               // the design's interval (the cycle model)
  localparam INTERVAL = {plan.interval};           // cycles between samples on the streams (= BEAT: the stream keeps up)
  localparam FIRST = {plan.first_output};              // last input element taken -> first output element valid
  localparam TIMEOUT = {(samples + plan.depth + 2) * plan.interval * 4 + 5000};
  reg clk = 0;
  always #5 clk = ~clk;
  reg rst = 1;
  wire irq;
  reg [{plan.in_bits - 1}:0] s_tdata = 0;
  reg s_tvalid = 0, s_tlast = 0, m_tready = 0;
  wire s_tready, m_tvalid, m_tlast;
  wire [{plan.out_bits - 1}:0] m_tdata;
{tasks}
{nl.join(arrays)}
  reg [{plan.in_bits - 1}:0] sin [0:{samples * nin - 1}];
  reg [{plan.out_bits - 1}:0] sout [0:{samples * nout - 1}];
  initial $readmemh("mem/stream_in.hex", sin);
  initial $readmemh("mem/stream_out.hex", sout);

  integer cyc = 0;
  always @(negedge clk) cyc <= cyc + 1;
  integer i, k, n, e, sn, si, errors, words;     // sn, si: the source's own (it runs beside the sink)
  integer in_last [0:SAMPLES - 1];
  integer out_first [0:SAMPLES - 1];
  integer out_last [0:SAMPLES - 1];
  reg bad;
  reg [31:0] data;
  initial begin
    errors = 0; words = 0;
    @(negedge clk); @(negedge clk); rst = 0;
    bus_read({reg['ID']}, data, bad);
    if (bad || data !== 32'h{STREAM_ID:08x}) begin
      $display("FAIL: ID reads %h (error %0d), expected {STREAM_ID:08x}", data, bad);
      $fatal(1);
    end
{nl.join(loads)}
    bus_write({reg['IRQ_ENABLE']}, 1, bad); errors = errors + bad;
    bus_write({reg['CTRL']}, {RUN}, bad); errors = errors + bad;
    fork
      begin   // the source: one element a cycle while s_tready allows
        @(negedge clk);
        for (sn = 0; sn < SAMPLES; sn = sn + 1)
          for (si = 0; si < IN_ELEMENTS; si = si + 1) begin
            s_tdata = sin[sn * IN_ELEMENTS + si]; s_tvalid = 1; s_tlast = si == IN_ELEMENTS - 1;
            while (s_tready !== 1'b1) @(negedge clk);
            if (si == IN_ELEMENTS - 1) in_last[sn] = cyc;   // taken at the next rising edge
            @(negedge clk);
          end
        s_tvalid = 0; s_tlast = 0;
      end
      begin   // the sink: always ready
        m_tready = 1;
        for (k = 0; k < SAMPLES * OUT_ELEMENTS; k = k + 1) begin
          @(negedge clk);
          while (m_tvalid !== 1'b1) begin
            if (cyc > TIMEOUT) begin
              $display("FAIL: %0d of %0d output elements after %0d cycles", k, SAMPLES * OUT_ELEMENTS, cyc);
              $fatal(1);
            end
            @(negedge clk);
          end
          n = k / OUT_ELEMENTS; e = k % OUT_ELEMENTS;
          if (e == 0) out_first[n] = cyc;
          if (e == OUT_ELEMENTS - 1) out_last[n] = cyc;
          words = words + 1;
          if (m_tdata !== sout[k] || m_tlast !== (e == OUT_ELEMENTS - 1)) begin
            errors = errors + 1;
            if (errors <= 10) $display("MISMATCH sample %0d element %0d: got %h (tlast %b), expected %h", n, e,
                                       m_tdata, m_tlast, sout[k]);
          end
        end
      end
    join
    if (out_first[0] - in_last[0] != FIRST) begin
      $display("FAIL: the first sample's first output came %0d cycles after its last input, the model says %0d",
               out_first[0] - in_last[0], FIRST);
      errors = errors + 1;
    end
    for (n = 1; n < SAMPLES; n = n + 1)
      if (out_last[n] - out_last[n - 1] != INTERVAL) begin
        $display("FAIL: sample %0d came out %0d cycles after the previous one, the model says %0d", n,
                 out_last[n] - out_last[n - 1], INTERVAL);
        errors = errors + 1;
      end
    bus_write({reg['CTRL']}, 0, bad); errors = errors + bad;
    k = 0;
    while (irq !== 1'b1) begin
      if (k > TIMEOUT) begin $display("FAIL: no irq (drained) after RUN was cleared"); $fatal(1); end
      @(negedge clk); k = k + 1;
    end
    bus_read({reg['STATUS']}, data, bad); errors = errors + bad;
    if (data !== 2) begin $display("FAIL: STATUS %h after draining, DONE alone expected", data); errors = errors + 1; end
    bus_read({reg['SAMPLES_IN']}, data, bad); errors = errors + bad;
    if (data !== SAMPLES) begin $display("FAIL: SAMPLES_IN %0d", data); errors = errors + 1; end
    bus_read({reg['SAMPLES_OUT']}, data, bad); errors = errors + bad;
    if (data !== SAMPLES) begin $display("FAIL: SAMPLES_OUT %0d", data); errors = errors + 1; end
    bus_read({reg['CYCLES']}, data, bad); errors = errors + bad;
    if (data !== BEAT) begin $display("FAIL: CYCLES %0d, the beat is %0d", data, BEAT); errors = errors + 1; end
    bus_write({reg['IRQ_STATUS']}, 1, bad); errors = errors + bad;
    if (errors == 0) begin
      $display("PASS: %0d samples streamed back to back over axi-stream, %0d output elements match; interval %0d cycles (the beat: %0d), first output %0d cycles after the last input (= the model)",
               SAMPLES, words, INTERVAL, BEAT, FIRST);
      $finish;
    end
    $display("FAIL: %0d mismatches or errors (%0d output elements checked)", errors, words);
    $fatal(1);
  end
endmodule
"""


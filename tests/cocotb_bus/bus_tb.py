"""cocotb testbench of a design exported behind a bus (compiler.bus.wrapper), run by tests/test_bus.py
in Icarus Verilog: the export folder (environment TINYHW_EXPORT) is read as a user would read
it (interface.json, mem/*.hex), the bus is driven by cocotbext-axi's AxiLiteMaster or
cocotbext-wishbone's WishboneMaster (TINYHW_WISHBONE_MODE: classic or pipelined).

run_design       writes the inputs through the bus, starts the design with the interrupt
                 enabled, checks a memory access while it runs is refused, waits for `irq`,
                 checks STATUS and CYCLES (= the cycle model), reads every output word through
                 the bus and compares it with expected*.hex, clears the interrupt
run_c_driver     the C polling driver exported with the design (tinyhw.c, <top>.h), built into
                 TINYHW_DRIVER_LIB by the test, runs in a thread whose MMIO reads and writes
                 are served here over the bus: it writes the model's input elements
                 (TINYHW_INPUTS, .bin files of the elements' containers) into the layout's
                 banks, starts, polls, and reads the outputs back into element arrays, which
                 must equal TINYHW_OUTPUTS (the golden model's)

The same tests run on a SoC that holds the design (examples/litex_soc.py, tests/test_litex.py):
TINYHW_BASE is the design's origin on the SoC's bus, TINYHW_PORTS the Wishbone prefix, clock
and reset of that top ("host,sys_clk,sys_rst"; default "wb,clk,rst", the wrapper's own).
"""
from __future__ import annotations

import ctypes
import json
import logging
import os
import queue
import threading
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

ID_VALUE = 0x74687731
REG = {"ID": 0x00, "CTRL": 0x04, "STATUS": 0x08, "CYCLES": 0x0C, "IRQ_ENABLE": 0x10, "IRQ_STATUS": 0x14}


BASE = int(os.environ.get("TINYHW_BASE", "0"), 0)
PREFIX, CLOCK, RESET = os.environ.get("TINYHW_PORTS", "wb,clk,rst").split(",")


class AxiLite:
    def __init__(self, dut):
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster
        self.master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi"), getattr(dut, CLOCK), getattr(dut, RESET))
        for part in (self.master.write_if, self.master.read_if):
            part.log.setLevel(logging.WARNING)             # one line per access otherwise

    async def write(self, addr: int, value: int) -> bool:
        from cocotbext.axi import AxiResp
        r = await self.master.write(BASE + addr, value.to_bytes(4, "little"))
        return r.resp == AxiResp.OKAY

    async def read(self, addr: int) -> tuple[int, bool]:
        from cocotbext.axi import AxiResp
        r = await self.master.read(BASE + addr, 4)
        return int.from_bytes(r.data, "little"), r.resp == AxiResp.OKAY


class Wishbone:
    def __init__(self, dut, pipelined: bool):
        import cocotbext.wishbone.driver as driver
        from cocotbext.wishbone.driver import WishboneMaster
        # The driver zeroes its outputs with Immediate writes; on Icarus 11 under cocotb 2.1 such
        # a write leaves the input net's fan-out undriven (z) for good, so the slave saw no
        # request ever (measured). Plain writes do what it means.
        driver.set_immediate = lambda signal, value: setattr(signal, "value", value)

        class Master(WishboneMaster):
            # the driver looks for its optional signals by their default names too: a classic
            # master must not find wb_stall (it would run pipelined cycles)
            _optional_signals = ["stall"] if pipelined else []

        signals = {"cyc": "cyc", "stb": "stb", "we": "we", "adr": "adr", "datwr": "dat_w", "datrd": "dat_r",
                   "ack": "ack", "err": "err", "sel": "sel"}
        self.master = Master(dut, PREFIX, getattr(dut, CLOCK), width=32, timeout=1000, signals_dict=signals)
        self.master.log.setLevel(logging.WARNING)
        self.pipelined = hasattr(self.master.bus, "stall")
        assert self.pipelined == pipelined

    async def _cycle(self, addr: int, value: int | None):
        from cocotbext.wishbone.driver import WBOp
        (res,) = await self.master.send_cycle([WBOp(adr=(BASE + addr) >> 2, dat=value, sel=0xF)])
        return res

    async def write(self, addr: int, value: int) -> bool:
        return (await self._cycle(addr, value)).ack == 1          # 2: ERR

    async def read(self, addr: int) -> tuple[int, bool]:
        res = await self._cycle(addr, None)
        return int(res.datrd), res.ack == 1


async def setup(dut):
    out = Path(os.environ["TINYHW_EXPORT"])
    info = json.loads((out / "interface.json").read_text())
    clk, rst = getattr(dut, CLOCK), getattr(dut, RESET)
    cocotb.start_soon(Clock(clk, 10, unit="ns").start())
    rst.value = 1
    kind = info["bus"]["kind"]
    bus = AxiLite(dut) if kind == "axi-lite" else Wishbone(dut, os.environ.get("TINYHW_WISHBONE_MODE") == "pipelined")
    await ClockCycles(clk, 3)
    rst.value = 0
    await ClockCycles(clk, 2)
    value, ok = await bus.read(REG["ID"])
    assert ok and value == ID_VALUE, f"ID reads {value:#x} (ok {ok})"
    name = kind if kind == "axi-lite" else f"wishbone ({os.environ.get('TINYHW_WISHBONE_MODE', 'classic')})"
    if os.environ.get("TINYHW_VIA"):
        name += f" through {os.environ['TINYHW_VIA']} at {BASE:#x}"
    return out, info, bus, name


def hex_words(path: Path) -> list[int | None]:
    return [None if "x" in line else int(line, 16) for line in path.read_text().split()]


def bus_words(bank: dict, elements: list[int | None]) -> list[int]:
    """A bank's elements packed into 32-bit bus words as the map places them (None: padding, 0)."""
    c = bank["container_bits"]
    if c == 64:
        return [w for v in elements for w in ((v or 0) & 0xFFFFFFFF, (v or 0) >> 32)]
    per = 32 // c
    return [sum((elements[i + k] or 0) << (c * k) for k in range(per) if i + k < len(elements))
            for i in range(0, len(elements), per)]


def unpack(bank: dict, words: list[int]) -> list[int]:
    c = bank["container_bits"]
    if c == 64:
        return [words[i] | words[i + 1] << 32 for i in range(0, len(words), 2)]
    per = 32 // c
    return [(words[i // per] >> (c * (i % per))) & ((1 << c) - 1) for i in range(bank["elements"])]


async def wait_irq(dut, limit: int) -> int:
    for waited in range(limit):
        if dut.irq.value == 1:
            return waited
        await RisingEdge(getattr(dut, CLOCK))
    raise AssertionError(f"no irq after {limit} cycles")


@cocotb.test()
async def run_design(dut):
    out, info, bus, name = await setup(dut)
    bmap = info["bus"]["map"]
    banks = {b["sel"]: b for b in bmap["banks"]}
    files = {p["sel"]: out / p["file"] for p in info["host_ports"]}
    for sel, b in banks.items():
        if b["role"] == "input":
            for i, word in enumerate(bus_words(b, hex_words(files[sel]))):
                assert await bus.write(b["offset"] + 4 * i, word), f"bank {sel} word {i}: write refused"
    assert await bus.write(REG["IRQ_ENABLE"], 1)
    assert await bus.write(REG["CTRL"], 1)
    cycles = info["cycles"]["total"]
    first_out = next(b for b in banks.values() if b["role"] == "output")
    if cycles > 40:                     # still running when the read arrives: refused
        _, ok = await bus.read(first_out["offset"])
        assert not ok, "a memory read while the design runs was answered without an error"
        status, ok = await bus.read(REG["STATUS"])
        assert ok and status & 1, f"STATUS {status:#x} while running: BUSY expected"
    await wait_irq(dut, 2 * cycles + 1000)
    status, ok = await bus.read(REG["STATUS"])
    assert ok and status == 2, f"STATUS {status:#x} after the run: DONE and not BUSY expected"
    measured, ok = await bus.read(REG["CYCLES"])
    assert ok and measured == cycles, f"CYCLES reads {measured}, the cycle model says {cycles}"
    words = mismatches = 0
    for sel, b in banks.items():
        if b["role"] != "output":
            continue
        got = []
        for i in range((b["bytes"] + 3) // 4):
            value, ok = await bus.read(b["offset"] + 4 * i)
            assert ok, f"bank {sel} word {i}: read refused"
            got.append(value)
        for i, (g, want) in enumerate(zip(unpack(b, got), hex_words(files[sel]))):
            if want is None:
                continue
            w, c = b["element_bits"], b["container_bits"]
            if b.get("sign_extend") and w < c and want >> (w - 1) & 1:     # read back as the dtype's value
                want |= ((1 << c) - 1) ^ ((1 << w) - 1)
            words += 1
            if g != want:
                mismatches += 1
                dut._log.error(f"MISMATCH bank {sel} element {i}: got {g:#x}, expected {want:#x}")
    assert mismatches == 0, f"{mismatches} of {words} output words differ"
    assert await bus.write(REG["IRQ_STATUS"], 1)
    await ClockCycles(getattr(dut, CLOCK), 1)
    assert dut.irq.value == 0, "irq still high after IRQ_STATUS was cleared"
    dut._log.info(f"PASS: {words} output words match, {measured} cycles (= the cycle model), over {name}")


@cocotb.test()
async def run_c_driver(dut):
    out, info, bus, name = await setup(dut)
    lib = ctypes.CDLL(os.environ["TINYHW_DRIVER_LIB"])
    inputs = [Path(p).read_bytes() for p in os.environ["TINYHW_INPUTS"].split(os.pathsep)]
    wanted = [Path(p).read_bytes() for p in os.environ["TINYHW_OUTPUTS"].split(os.pathsep)]
    requests: queue.Queue = queue.Queue()
    replies: queue.Queue = queue.Queue()
    accesses = [0]

    # the driver's MMIO: each access handed to the simulation and waited for
    @ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint32)
    def write32(addr, value):
        requests.put(("w", addr, value))
        replies.get()

    @ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint64)
    def read32(addr):
        requests.put(("r", addr, 0))
        return replies.get()

    in_bufs = [ctypes.create_string_buffer(b, len(b)) for b in inputs]
    out_bufs = [ctypes.create_string_buffer(len(b)) for b in wanted]
    in_ptrs = (ctypes.c_void_p * len(in_bufs))(*[ctypes.cast(b, ctypes.c_void_p) for b in in_bufs])
    out_ptrs = (ctypes.c_void_p * len(out_bufs))(*[ctypes.cast(b, ctypes.c_void_p) for b in out_bufs])
    cycles = ctypes.c_uint32(0)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(lib.harness(write32, read32, in_ptrs, out_ptrs,
                                                                      ctypes.byref(cycles))))
    thread.start()
    errors = 0
    while thread.is_alive() or not requests.empty():
        try:
            kind, addr, value = requests.get_nowait()
        except queue.Empty:
            await RisingEdge(getattr(dut, CLOCK))
            continue
        accesses[0] += 1
        if kind == "w":
            errors += not await bus.write(addr, value)
            replies.put(None)
        else:
            value, ok = await bus.read(addr)
            errors += not ok
            replies.put(value)
    thread.join()
    assert result == [0], f"the driver's harness returned {result}"
    assert errors == 0, f"{errors} of the driver's accesses were refused"
    assert cycles.value == info["cycles"]["total"], f"tinyhw_cycles() {cycles.value}, model {info['cycles']['total']}"
    for i, (got, want) in enumerate(zip(out_bufs, wanted)):
        assert got.raw == want, f"output {i}: the driver read back other elements than the golden model's"
    dut._log.info(f"PASS: the C driver ran the design over {name} ({accesses[0]} accesses, {cycles.value} cycles); "
                  f"{len(wanted)} outputs equal the golden model's")


@cocotb.test()
async def run_stream(dut):
    """An export behind axi-stream (compiler/bus/stream.py): the weights through AXI4-Lite, RUN,
    every sample of mem/stream_in.hex sent on s_axis by cocotbext-axi's AxiStreamSource, every
    output frame taken by its AxiStreamSink and compared with mem/stream_out.hex. With
    TINYHW_STREAM_MODE=backpressure both streams pause at random (seeded) and the frames must
    still all come, whole and right; else (back to back) the frames come exactly the modelled
    interval apart. Then RUN cleared: the drain's interrupt, STATUS, CYCLES, the counters."""
    import random
    from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
    from cocotb.utils import get_sim_time
    out = Path(os.environ["TINYHW_EXPORT"])
    info = json.loads((out / "interface.json").read_text())
    st, axis = info["stream"], info["stream"]["axis"]
    clk, rst = dut.clk, dut.rst
    cocotb.start_soon(Clock(clk, 10, unit="ns").start())
    rst.value = 1
    bus = AxiLite(dut)
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), clk, rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), clk, rst)
    for part in (source, sink):
        part.log.setLevel(logging.WARNING)
    await ClockCycles(clk, 3)
    rst.value = 0
    await ClockCycles(clk, 2)
    value, ok = await bus.read(REG["ID"])
    assert ok and value == 0x74687732, f"ID reads {value:#x} (ok {ok})"
    bmap = info["bus"]["map"]
    streamed = {i["buffer"] for i in axis["inputs"]}
    files = {p["sel"]: out / p["file"] for p in info["host_ports"]}
    for b in bmap["banks"]:
        if b["role"] == "input" and b["buffer"] not in streamed:
            for i, word in enumerate(bus_words(b, hex_words(files[b["sel"]]))):
                assert await bus.write(b["offset"] + 4 * i, word), f"bank {b['sel']} word {i}: write refused"
    mode = os.environ.get("TINYHW_STREAM_MODE", "")
    if mode == "backpressure":
        rng = random.Random(1)
        source.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
        sink.set_pause_generator(iter(lambda: rng.random() < 0.5, None))
    assert await bus.write(REG["IRQ_ENABLE"], 1)
    assert await bus.write(REG["CTRL"], 1)
    first_out = next(b for b in bmap["banks"] if b["role"] == "output")
    _, ok = await bus.read(first_out["offset"])
    assert not ok, "a memory read while streaming was answered without an error"
    nin, nout, n = axis["in_elements"], axis["out_elements"], st["samples"]
    ib, ob = axis["in_bits"] // 8, axis["out_bits"] // 8
    ins, want = hex_words(out / "mem" / "stream_in.hex"), hex_words(out / "mem" / "stream_out.hex")
    for s in range(n):
        await source.send(AxiStreamFrame(b"".join(v.to_bytes(ib, "little") for v in ins[s * nin:(s + 1) * nin])))
    ends, errors = [], 0
    for s in range(n):
        frame = await sink.recv()
        ends.append(int(get_sim_time("ns")) // 10)
        got = [int.from_bytes(frame.tdata[i * ob:(i + 1) * ob], "little") for i in range(len(frame.tdata) // ob)]
        assert len(got) == nout, f"sample {s}: a frame of {len(got)} elements, {nout} expected"
        for e, (g, w) in enumerate(zip(got, want[s * nout:(s + 1) * nout])):
            if g != w:
                errors += 1
                dut._log.error(f"MISMATCH sample {s} element {e}: got {g:#x}, expected {w:#x}")
    assert errors == 0, f"{errors} output elements differ"
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    if mode != "backpressure" and axis["keeps_up"]:
        assert all(g == axis["stream_interval"] for g in gaps), f"frames {gaps} cycles apart, model {axis['stream_interval']}"
    assert await bus.write(REG["CTRL"], 0)
    await wait_irq(dut, 100 * st["latency"] + 10000)
    status, ok = await bus.read(REG["STATUS"])
    assert ok and status == 2, f"STATUS {status:#x} after draining: DONE alone expected"
    for name, offset in (("SAMPLES_IN", 0x18), ("SAMPLES_OUT", 0x1C)):
        value, ok = await bus.read(offset)
        assert ok and value == n, f"{name} reads {value}, {n} samples went"
    cycles, ok = await bus.read(REG["CYCLES"])
    assert ok and cycles == st["beat"], f"CYCLES reads {cycles}, the beat is {st['beat']}"
    _, ok = await bus.read(first_out["offset"])
    assert ok, "a memory read after draining was refused"
    assert await bus.write(REG["IRQ_STATUS"], 1)
    dut._log.info(f"PASS: {n} samples over axi-stream ({mode or 'back to back'}), {n * nout} output elements match; "
                  f"frames {sorted(set(gaps))} cycles apart (beat {st['beat']}); drained, counters {n}/{n}")

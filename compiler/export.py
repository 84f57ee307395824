"""Export: a compiled design as files a user takes into their own FPGA project.

    files = export_design(design=design, out_dir="gemv_hw")
    # gemv_hw/tinyhw_top.v, tb.v, interface.md, interface.json, mem/*.hex

What lands in `out_dir`:
    <top>.v          the design as Verilog: Amaranth's RTLIL through Yosys `write_verilog`
                     (VERILOG_SCRIPT, run through compiler.tools so a failure keeps its log),
                     one module per kernel, no `src` attributes
    mem/in*.hex      per host port that takes an input (weights and activations alike: a
                     model's buffers are all inputs to the compiler), the words of that memory
                     bank, one hex word per line, as `$readmemh` reads them
    mem/expected*.hex  per host port that returns an output, the words the simulation read
                     back (`x` for a bank's padding words, which hold no element)
    tb.v             a self-checking testbench (`tb`): writes every in*.hex through the host
                     bus, pulses `start`, counts cycles to `done`, reads every output word back
                     through the host bus, compares each with expected*.hex and the cycle
                     count with the cycle model; prints PASS, or FAIL and ends with `$fatal`
    interface.json   ports, host ports, buffers, the host-bus protocol, cycles, knobs and, when
                     given, resources (synthesis) and the clock reached (place-and-route)
    interface.md     the same for people
    with `bus` (compiler.bus.wrapper: "axi-lite" or "wishbone"), <top>.v is the design behind that bus,
    tb.v drives the bus (compiler.bus.testbench), interface.* hold the register map, and
    tinyhw.h, tinyhw.c and <top>.h are its C header and polling driver (compiler.bus.c_driver)

Why the testbench loads memories through the host bus (the $readmemh files fill testbench
arrays, not the design's memories): the design's memories have no initial contents (as in
simulation, where they are poked), and a bitstream with the weights baked in would tie one
bitstream to one set of weights. The host bus is the interface the user's system drives, so the
testbench exercises exactly that protocol, and does not depend on the hierarchical names Yosys
gives the memories inside the Verilog.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from amaranth.hdl import Shape

from . import dtypes as dt
from .design import Design
from .errors import CompileError
from .host_input import HostInput
from .sim.memory_io import SimResult, input_words
from .synth.area import AreaReport
from .synth.read_ports import split_read_ports
from .tools import atomic_write_text, yosys

if TYPE_CHECKING:
    from .pnr.timing import TimingReport

# Not amaranth.back.verilog's `proc -nomux` + `write_verilog -norename`: that keeps Amaranth's
# processes as `always @*` blocks, which Icarus Verilog does not evaluate at time 0, so the
# reset logic stays x and the design never leaves x (measured). A full `proc` turns every
# process into continuous assignments and flip-flops, which every simulator starts correctly;
# the names Amaranth gave stay, Yosys' own internal names are renamed to legal identifiers.
# The attributes Amaranth adds for its own tools (source lines of this checkout, hierarchy)
# would only be noise in a user's project.
_ATTRS = "-remove generator -remove top -remove src -remove amaranth.hierarchy -remove amaranth.decoding"
VERILOG_SCRIPT = ("read_rtlil design.il\nproc\nopt_clean\nmemory_collect\n"
                  f"attrmap {_ATTRS}\nattrmap -modattr {_ATTRS}\nwrite_verilog {{top}}.v\n")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class PortFile:
    """One host port (memory bank on the host bus) and the hex file of its words."""
    sel: int                     # the value of host_sel that picks it
    role: str                    # "input" (written by the host) or "output" (read back)
    buffer: int                  # model buffer id
    kernel: int                  # kernel position (module k{kernel} of the top)
    memory: str                  # memory name inside that kernel
    depth: int                   # words
    width: int                   # bits per word
    file: str                    # path relative to the export folder
    checked_words: int = 0       # output ports: words that hold an element (the rest is padding)
    sign_extend: bool = False    # elements narrower than their dtype (a buffer's bounds), two's complement:
                                 # sign-extend `width` bits to the dtype (else zero-extend)
    samples: int = 1             # a dataflow design's streamed bank: the file holds this many samples' words


@dataclass(frozen=True)
class ExportedDesign:
    """What `export_design` wrote (paths inside `out_dir`) and the figures it wrote down."""
    out_dir: Path
    verilog: Path
    testbench: Path
    interface_json: Path
    interface_md: Path
    ports: tuple[PortFile, ...]
    top: str
    cycles: int                  # the cycle model's count, which the testbench checks
    design: Design               # what was exported (e.g. for compiler.pnr.bitstream)
    bus: str = "native"          # the bus the top presents (compiler.bus.wrapper)
    c_files: tuple[Path, ...] = ()   # the C header and driver, with a bus
    interval: int = 0            # cycles between samples (the cycle model): `cycles` for a sequential design
    samples: int = 1             # samples the testbench runs (streamed back to back: dataflow)


def export_design(*, design: Design, out_dir: str | Path, result: SimResult | None = None,
                  backend: str = "pysim", area: AreaReport | None = None, timing: TimingReport | None = None,
                  top: str = "tinyhw_top", source: dict[str, Any] | None = None,
                  timeout: float | None = 600, bus: str = "native",
                  samples: list[dict] | None = None, host_input: HostInput | None = None) -> ExportedDesign:
    """Write the Verilog, memory files, testbench and interface description of `design` to
    `out_dir` (created; files there of the same names are replaced, and earlier mem/*.hex removed).

    `result`: the simulation whose outputs the testbench expects (the design's own input data);
    without it the design is simulated here with `backend`. Its cycle count must equal the
    cycle model. `area` (compiler.synth.area.AreaReport) and `timing` (compiler.pnr.timing.TimingReport)
    go into the interface description when given; they are never estimated. `source`: where
    the design came from (e.g. the explorer's study, trial, model and dtype), recorded as is.
    `bus`: "native" (the host bus on the pins), "axi-lite" or "wishbone" (compiler.bus.wrapper), or
    for a dataflow design "axi-stream"; an unknown bus, or one that cannot wrap the design, is a
    BusError before anything is written.

    A schedule=dataflow design (compiler/export_stream.py) streams `samples` (dicts of streamed
    input Tensor or buffer id -> array; default: export_stream.stream_samples, four) back to back:
    `result` is not taken, the samples are simulated streamed with `backend` and each one's
    latency and interval must equal the cycle model; a streamed bank's files hold every sample.

    `host_input` (compiler.host_input.HostInput): what the host does to a raw sample before the
    design takes it (a network's input map and quantisation); written into the interface, as
    host_input.csv and as a C header, and named in the testbench."""
    from .bus import wrap
    from .bus.wrapper import check_bus, check_wrappable
    if not _IDENT.match(top):
        raise ValueError(f"top: expected a Verilog identifier, got {top!r}")
    check_bus(bus)
    if design.flow is not None:
        check_wrappable(design, bus)
        if result is not None:
            raise CompileError(f"{design.name()} is a schedule=dataflow design: its export simulates its samples "
                               "streamed back to back; pass `samples`, not `result`")
        return _export_stream(design=design, out_dir=out_dir, backend=backend, area=area, timing=timing, top=top,
                              source=source, timeout=timeout, bus=bus, samples=samples, host_input=host_input)
    if samples is not None:
        raise CompileError(f"{design.name()} is a sequential design: it takes no stream of samples; export it "
                           "with `result` (its one run)")
    wrapper = None if bus == "native" else wrap(design, bus)
    cycles = design.cycle_model().total
    if result is None:
        from . import simulate                  # the package's simulate(): back-end choice included
        result = simulate(design, backend=backend)
    if result.cycles != cycles:
        raise CompileError(f"the simulation took {result.cycles} cycles but the cycle model says {cycles}: "
                           "a compiler bug; nothing exported")
    out = Path(out_dir)
    (out / "mem").mkdir(parents=True, exist_ok=True)
    for stale in [*(out / "mem").glob("in*.hex"), *(out / "mem").glob("expected*.hex")]:
        stale.unlink()                     # an earlier export's banks would mislead a reader
    verilog = write_verilog(design, out, top=top, timeout=timeout, module=wrapper)
    ports = _write_memories(design, out, result)
    testbench = out / "tb.v"
    c_files: list[Path] = []
    if wrapper is None:
        atomic_write_text(testbench, testbench_verilog(design, ports, top=top, cycles=cycles))
        for stale in (out / "tinyhw.h", out / "tinyhw.c", out / f"{top}.h"):
            stale.unlink(missing_ok=True)    # an earlier bus export's driver: not for this top
    else:
        from .bus.c_driver import DRIVER_C, DRIVER_H, design_header
        from .bus.testbench import bus_testbench_verilog
        bmap = wrapper.bmap
        atomic_write_text(testbench, bus_testbench_verilog(bmap, ports, bus=bus, top=top, cycles=cycles,
                                                           name=design.name()))
        shapes = dict(zip(design.graph.outputs, design.output_shapes))
        for name, text in (("tinyhw.h", DRIVER_H), ("tinyhw.c", DRIVER_C),
                           (f"{top}.h", design_header(bmap, top=top, bus=bus, name=design.name(), cycles=cycles,
                                                      inputs=list(design.graph.inputs),
                                                      outputs=list(design.graph.outputs), shapes=shapes))):
            atomic_write_text(out / name, text)
            c_files.append(out / name)
    info = interface(design, ports, top=top, cycles=cycles, area=area, timing=timing, source=source,
                     module=wrapper, bus=bus, bmap=None if wrapper is None else wrapper.bmap)
    c_files += _host_input_files(host_input, info, out, top, testbench)
    atomic_write_text(out / "interface.json", json.dumps(info, indent=2) + "\n")
    atomic_write_text(out / "interface.md", interface_markdown(info))
    return ExportedDesign(out, verilog, testbench, out / "interface.json", out / "interface.md",
                          tuple(ports), top, cycles, design, bus, tuple(c_files))


def _host_input_files(host_input: HostInput | None, info: dict[str, Any], out: Path, top: str,
                      testbench: Path) -> list[Path]:
    """The host's step before the design (compiler.host_input): its files, its entry in the
    interface, and a line in the testbench saying its input words are that step's output. An
    earlier export's files go when there is none."""
    if host_input is None:
        for stale in (out / "host_input.csv", out / f"{top}_host_input.h"):
            stale.unlink(missing_ok=True)
        return []
    info["host_input"] = host_input.as_dict()
    note = (f"// Input {host_input.input}: the words below are the host's step of interface.md (Host input) "
            f"applied to the data's samples: {host_input.formula()}.\n")
    atomic_write_text(testbench, note + testbench.read_text())
    return host_input.write(out, top)


def _export_stream(*, design: Design, out_dir: str | Path, backend: str, area, timing, top: str, source,
                   timeout: float | None, bus: str, samples: list[dict] | None,
                   host_input: HostInput | None = None) -> ExportedDesign:
    """export_design of a schedule=dataflow design (compiler/export_stream.py)."""
    from . import simulate_many
    from .export_stream import STREAM_PROTOCOL, check_stream, stream_memories, stream_samples, stream_testbench_verilog
    from .sim.memory_io import input_words
    given = stream_samples(design) if samples is None else list(samples)
    if not given:
        raise CompileError("samples: give at least one sample to stream")
    flow = design.flow
    for n, s in enumerate(given):
        extra = sorted(set(input_words(design, s, only_given=True)) - flow.streamed)
        if extra:
            raise CompileError(f"samples[{n}]: input buffer(s) {extra} are not streamed (compile_model(stream=...))")
    from .bus import wrap
    wrapper = None if bus == "native" else wrap(design, bus)
    results = simulate_many(design, given, backend=backend)
    check_stream(design, results)
    cm = design.cycle_model()
    out = Path(out_dir)
    (out / "mem").mkdir(parents=True, exist_ok=True)
    for stale in [*(out / "mem").glob("in*.hex"), *(out / "mem").glob("expected*.hex"),
                  *(out / "mem").glob("stream_*.hex")]:
        stale.unlink()
    verilog = write_verilog(design, out, top=top, timeout=timeout, module=wrapper)
    ports = stream_memories(design, out, given, results, PortFile)
    testbench = out / "tb.v"
    c_files: list[Path] = []
    if wrapper is None:
        atomic_write_text(testbench, stream_testbench_verilog(design, ports, top=top, samples=len(given)))
        for stale in (out / "tinyhw.h", out / "tinyhw.c", out / f"{top}.h"):
            stale.unlink(missing_ok=True)
    else:
        c_files = _stream_bus_files(design, wrapper, ports, out, top=top, samples=given, results=results)
    info = interface(design, ports, top=top, cycles=cm.total, area=area, timing=timing, source=source,
                     module=wrapper, bus=bus, bmap=None if wrapper is None else wrapper.bmap)
    if wrapper is None:
        info["protocol"] = STREAM_PROTOCOL
    else:
        from .bus.stream import STREAM_BUS_PROTOCOL
        info["protocol"] = STREAM_BUS_PROTOCOL
    info["stream"] = stream_info(design, wrapper, samples=len(given))
    c_files += _host_input_files(host_input, info, out, top, testbench)
    atomic_write_text(out / "interface.json", json.dumps(info, indent=2) + "\n")
    atomic_write_text(out / "interface.md", interface_markdown(info))
    return ExportedDesign(out, verilog, testbench, out / "interface.json", out / "interface.md", tuple(ports), top,
                          cm.total, design, bus, tuple(c_files), cm.interval, len(given))


def _stream_bus_files(design, wrapper, ports, out, *, top, samples, results) -> list[Path]:
    """An axi-stream export's tb.v, the streams' words (mem/stream_*.hex) and C files."""
    from .bus.c_driver import stream_c_files
    from .bus.stream import stream_testbench, stream_words
    ins, outs = stream_words(design, wrapper.plan, samples, results)
    atomic_write_text(out / "mem" / "stream_in.hex", ins)
    atomic_write_text(out / "mem" / "stream_out.hex", outs)
    atomic_write_text(out / "tb.v", stream_testbench(wrapper, ports, top=top, samples=len(samples)))
    files = []
    for name, text in stream_c_files(wrapper, top=top, cycles=wrapper.plan.beat):
        atomic_write_text(out / name, text)
        files.append(out / name)
    return files


def stream_info(design: Design, wrapper, *, samples: int) -> dict[str, Any]:
    """interface.json's "stream": the beat, the depth, what the host moves per sample."""
    from .export_stream import stream_io
    io = stream_io(design)
    flow = design.flow
    info = {"samples": samples, "beat": flow.beat, "depth": flow.depth, "interval": flow.beat,
            "host_delay": design.top.host_delay,
            "latency": flow.latency, "streamed_inputs": sorted(flow.streamed),
            "writes": io.writes, "reads": io.reads, "back_to_back": io.overlapped,
            "stage_cycles": [list(s) for s in flow.stage_cycles]}
    if wrapper is not None:
        info.update(wrapper.stream_info())
    return info


def write_verilog(design: Design, out_dir: Path, *, top: str, timeout: float | None = 600,
                  module: Any = None) -> Path:
    """`<top>.v` in `out_dir`, converted by Yosys in `out_dir/.yosys/` (its log stays there);
    `module`: the component to convert instead of the design's top (a bus wrapper)."""
    from amaranth.back import rtlil
    work = out_dir / ".yosys"
    work.mkdir(parents=True, exist_ok=True)
    # a memory read at many ports as copies of a few (synth/read_ports.py): Yosys 0.70's
    # synth_ecp5 stops on the Verilog of one read at 12 or more (an 8 x 16 memory at 18 ports:
    # "thrown Wasm exception"), and the user's flow reads this file
    text = rtlil.convert(design.top if module is None else module, name=top, emit_src=False)
    (work / "design.il").write_text(split_read_ports(text))
    yosys(VERILOG_SCRIPT.format(top=top), cwd=work, log_name="verilog.log", timeout=timeout)
    path = out_dir / f"{top}.v"
    (work / f"{top}.v").replace(path)
    return path


# ---------------------------------------------------------------------------------------------
# memory files

def _hex_lines(words: np.ndarray, width: int, present: np.ndarray | None = None) -> str:
    digits = (width + 3) // 4
    mask = (1 << width) - 1
    lines = [format(int(w) & mask, f"0{digits}x") if present is None or present[i] else "x" * digits
             for i, w in enumerate(words.tolist())]
    return "\n".join(lines) + "\n"


def _write_memories(design: Design, out: Path, result: SimResult) -> list[PortFile]:
    sel = {(p.kernel, p.slot): i for i, p in enumerate(design.host_ports)}
    ports: list[PortFile] = []
    for buf, words in input_words(design, None).items():
        for ref, bank in design.memory_words(buf, words):
            i = sel[ref.kernel, ref.slot]
            hp = design.host_ports[i]
            name = f"mem/in{i}_b{buf}_k{ref.kernel}_{ref.name}.hex"
            atomic_write_text(out / name, _hex_lines(bank, hp.width))
            ports.append(PortFile(i, "input", buf, ref.kernel, ref.name, hp.depth, hp.width, name,
                                  sign_extend=hp.sign_extend))
    for buf in design.graph.outputs:
        dtype = design.graph.buffers[buf].dtype
        layout = design.banking_of(*design.host_buffers[buf].home).layout
        words = layout.scatter(dt.to_words(result.buffers[buf], dtype))
        present = layout.scatter(np.ones(layout.size, dtype=bool))   # False: padding
        for ref, bank, used in zip(design.home_memories(buf), words, present):
            i = sel[ref.kernel, ref.slot]
            hp = design.host_ports[i]
            name = f"mem/expected{i}_b{buf}_k{ref.kernel}_{ref.name}.hex"
            atomic_write_text(out / name, _hex_lines(bank, hp.width, used))
            ports.append(PortFile(i, "output", buf, ref.kernel, ref.name, hp.depth, hp.width, name,
                                  int(np.count_nonzero(used)), hp.sign_extend))
    return sorted(ports, key=lambda p: p.sel)


# ---------------------------------------------------------------------------------------------
# testbench

def testbench_verilog(design: Design, ports: list[PortFile], *, top: str, cycles: int) -> str:
    """A self-checking testbench for `<top>.v`; run it from the export folder (the hex files
    are read with paths relative to it)."""
    sig = design.top.signature.members
    width = {name: Shape.cast(sig[name].shape).width for name in ("host_sel", "host_addr", "host_wdata")}
    limit = 2 * cycles + 1000          # a design that never raises done fails, it does not hang
    arrays, loads, checks = [], [], []
    for p in ports:
        arr = f"{'in' if p.role == 'input' else 'exp'}{p.sel}"
        arrays.append(f"  reg [{p.width - 1}:0] {arr} [0:{p.depth - 1}];\n"
                      f"  initial $readmemh(\"{p.file}\", {arr});")
        if p.role == "input":
            loads.append(f"    host_sel = {p.sel};   // buffer {p.buffer}: kernel {p.kernel} {p.memory}\n"
                         f"    for (i = 0; i < {p.depth}; i = i + 1) begin\n"
                         f"      host_addr = i; host_wdata = {arr}[i]; host_we = 1; @(negedge clk);\n"
                         f"    end\n    host_we = 0;")
        else:
            checks.append(f"    host_sel = {p.sel};   // buffer {p.buffer}: kernel {p.kernel} {p.memory}\n"
                          f"    for (i = 0; i < {p.depth}; i = i + 1) begin\n"
                          f"      host_addr = i; repeat ({design.top.host_read_latency}) @(negedge clk);\n"
                          f"      if ((^{arr}[i]) !== 1'bx) begin\n"
                          f"        words = words + 1;\n"
                          f"        if (host_rdata[{p.width - 1}:0] !== {arr}[i]) begin\n"
                          f"          errors = errors + 1;\n"
                          f"          if (errors <= 10) $display(\"MISMATCH host_sel=%0d addr=%0d: got %h, expected %h\",\n"
                          f"                                     {p.sel}, i, host_rdata[{p.width - 1}:0], {arr}[i]);\n"
                          f"        end\n      end\n    end")
    nl = "\n"
    return f"""// Self-checking testbench for {top} (generated by tinyhw; {design.name()}).
// Run from this folder:  iverilog -g2012 -o tb.vvp {top}.v tb.v && vvp tb.vvp
// Inputs are written through the host bus, start is pulsed, cycles are counted from the start
// cycle to the cycle in which done is high, then every output word is read back through the
// host bus and compared with the simulation's (mem/expected*.hex; x = padding, not compared).
`timescale 1ns/1ps
module tb;
  localparam CYCLES_MODEL = {cycles};
  localparam TIMEOUT = {limit};
  reg clk = 0;
  always #5 clk = ~clk;
  reg rst = 1, start = 0, host_we = 0;
  reg [{width['host_sel'] - 1}:0] host_sel = 0;
  reg [{width['host_addr'] - 1}:0] host_addr = 0;
  reg [{width['host_wdata'] - 1}:0] host_wdata = 0;
  wire done, busy;
  wire [{width['host_wdata'] - 1}:0] host_rdata;
  {top} dut(.clk(clk), .rst(rst), .start(start), .done(done), .busy(busy), .host_sel(host_sel),
            .host_addr(host_addr), .host_wdata(host_wdata), .host_we(host_we), .host_rdata(host_rdata));

{nl.join(arrays)}

  integer i, cycles, errors, words;
  initial begin
    errors = 0; words = 0;
    // inputs and signals change at the falling edge; the design samples them at the rising edge
    @(negedge clk); @(negedge clk); rst = 0;
{nl.join(loads)}
    start = 1; @(negedge clk); start = 0; cycles = 1;
    while (done !== 1'b1) begin
      if (cycles >= TIMEOUT) begin
        $display("FAIL: no done after %0d cycles (the cycle model says %0d)", cycles, CYCLES_MODEL);
        $fatal(1);
      end
      @(negedge clk); cycles = cycles + 1;
    end
    @(negedge clk);                    // back to idle: the host bus acts again
{nl.join(checks)}
    if (cycles != CYCLES_MODEL) begin
      $display("FAIL: %0d cycles from start to done, the cycle model says %0d", cycles, CYCLES_MODEL);
      errors = errors + 1;
    end
    if (errors == 0) begin
      $display("PASS: %0d output words match, %0d cycles (= the cycle model)", words, cycles);
      $finish;
    end
    $display("FAIL: %0d mismatches (%0d output words checked, %0d cycles, model %0d)", errors, words, cycles, CYCLES_MODEL);
    $fatal(1);
  end
endmodule
"""


# ---------------------------------------------------------------------------------------------
# interface description

PROTOCOL = {
    "clock": "one clock `clk`, all logic on its rising edge; `rst` is a synchronous reset (active high)",
    "host_write": "while `busy` is low: set host_sel, host_addr, host_wdata and host_we=1 for one cycle; "
                  "the word is written at the rising edge (from fp_pipeline 3, where the bus is registered, "
                  "at the next one; `start` may follow the last write at once). Writes while busy are ignored",
    "host_read": "while `busy` is low: set host_sel and host_addr; host_rdata holds the word "
                 "`host_read_latency` cycles later (1: the block RAM's read latency, also with combinational "
                 "reads; 4 from fp_pipeline 3, where address and data are registered), undefined after a "
                 "cycle that writes",
    "start_done": "raise `start` for one cycle while idle; `busy` is high from the next cycle until the run "
                  "ends; `done` is high for exactly one cycle, the last one of the run. The cycle count is "
                  "counted from the cycle `start` is high in to the cycle `done` is high in",
    "layout": "a buffer's elements are spread over its banks by the compiler's layout (interface.json "
              "`host_ports`); the .hex files hold each bank's words in that order",
    "widths": "a bank's words are `width` bits: its buffer's dtype, or fewer where the compiler knows the values "
              "need fewer (declared input ranges, e.g. 4-bit weights in int8; sums as wide as they can get): "
              "write the low `width` bits of each value; read back, a `sign_extend` bank's words are two's "
              "complement (extend bit width-1), the others zero-extend",
    "persistence": "inputs stay in their memories across runs: write only what changes (e.g. the activations) "
                   "before the next start",
}


def interface(design: Design, ports: list[PortFile], *, top: str, cycles: int,
              area: AreaReport | None = None, timing: TimingReport | None = None,
              source: dict[str, Any] | None = None, module: Any = None, bus: str = "native",
              bmap: Any = None) -> dict[str, Any]:
    """The interface description as plain JSON data; with a bus wrapper (`module`), its ports
    and the register map (`bmap`, compiler.bus.BusMap) under "bus"."""
    sig = (design.top if module is None else module).signature.members
    port_list = [{"name": "clk", "direction": "in", "width": 1}, {"name": "rst", "direction": "in", "width": 1}]
    port_list += [{"name": name, "direction": "in" if m.flow.name == "In" else "out", "width": Shape.cast(m.shape).width}
                  for name, m in sig.items()]
    buffers = []
    for buf in (*design.graph.inputs, *design.graph.outputs):
        if buf not in design.host_buffers:
            continue
        b = design.graph.buffers[buf]
        role = "output" if buf in design.graph.outputs else "input"
        shape = design.output_shapes[design.graph.outputs.index(buf)] if role == "output" else None
        buffers.append({"buffer": buf, "role": role, "dtype": b.dtype.name, "elements": b.size,
                        "shape": list(shape) if shape else None,
                        "host_sel": [p.sel for p in ports if p.buffer == buf and p.role == role]})
    cm = design.cycle_model()
    return {
        "top": top, "verilog": f"{top}.v", "testbench": "tb.v", "design": design.name(), "source": source,
        "ports": port_list,
        "host_ports": [asdict(p) for p in ports],
        "buffers": buffers,
        "protocol": PROTOCOL if module is None else BUS_PROTOCOL.get(bus),     # axi-stream: _export_stream's
        "bus": {"kind": bus, **({} if bmap is None else {"map": bmap.as_dict(), "c": ["tinyhw.h", "tinyhw.c", f"{top}.h"]})},
        "host_read_latency": design.top.host_read_latency,
        "cycles": {"total": cycles, "kernels": [list(k) for k in cm.kernels], "copies": cm.copies,
                   "interval": cm.interval, "schedule": cm.schedule},
        "knobs": design.config.as_dict(),
        "resources": None if area is None else {
            "target": area.target, "luts": area.luts, "ffs": area.ffs, "bram": area.bram,
            "lutram": area.lutram, "dsp": area.dsp, "yosys_version": area.yosys_version,
            "script": area.script.strip().replace("\n", "; ")},
        "clock": None if timing is None else {
            "fits": timing.fits, "fmax_mhz": timing.fmax_mhz, "device": timing.device,
            "package": timing.package, "target_mhz": timing.freq_mhz, "router": timing.router,
            "placer": timing.placer, "seed": timing.seed, "reason": timing.reason or None,
            "latency_us": timing.latency_us(cycles)},
    }


def interface_markdown(info: dict[str, Any]) -> str:
    """interface.json for people."""
    lines = [f"# `{info['top']}`: {info['design']}", "",
             f"Verilog: `{info['verilog']}`. Testbench: `{info['testbench']}` "
             f"(`iverilog -g2012 -o tb.vvp {info['verilog']} tb.v && vvp tb.vvp`, run in this folder).", ""]
    if info["source"]:
        def text(v: Any) -> str:          # a mapping (the explorer's model inputs -> buffers) as `k: v, ...`
            return "(" + ", ".join(f"{k}: {x}" for k, x in v.items()) + ")" if isinstance(v, dict) else str(v)
        lines += ["From: " + ", ".join(f"{k} {text(v)}" for k, v in info["source"].items()) + ".", ""]
    lines += [
             "## Ports", "", "| port | direction | bits |", "|---|---|---|"]
    lines += [f"| `{p['name']}` | {p['direction']} | {p['width']} |" for p in info["ports"]]
    bus = info.get("bus", {}).get("kind", "native")
    lines += ["", "## Host bus" if bus == "native" else f"## Bus: {bus}", ""]
    lines += [f"- **{k.replace('_', ' ')}**: {v}." for k, v in info["protocol"].items()]
    if bus != "native":
        from .bus.wrapper import map_markdown
        lines += ["", *map_markdown(info["bus"]["map"], top=info["top"])]
    lines += ["", "Memory banks (`host_sel` = bank) and the files of their words:", "",
              "| host_sel | role | buffer | kernel memory | words | bits | file |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {p['sel']} | {p['role']} | {p['buffer']} | k{p['kernel']}.{p['memory']} | {p['depth']} | "
              f"{p['width']}{' (signed)' if p.get('sign_extend') else ''} | `{p['file']}` |" for p in info["host_ports"]]
    lines += ["", "| buffer | role | dtype | elements | shape | host_sel |", "|---|---|---|---|---|---|"]
    lines += [f"| {b['buffer']} | {b['role']} | {b['dtype']} | {b['elements']} | {b['shape'] or '-'} | "
              f"{', '.join(map(str, b['host_sel']))} |" for b in info["buffers"]]
    c = info["cycles"]
    st = info.get("stream")
    if st is None:
        lines += ["", "## Cycles", "", f"{c['total']} cycles from `start` to `done` (the cycle model; the "
                  f"testbench checks it): " + ", ".join(f"{n} {k}" for n, k in c["kernels"])
                  + f", {c['copies']} in copies.", ""]
    else:
        lines += ["", "## Cycles (schedule=dataflow)", "",
                  f"A beat takes {st['beat']} cycles: the interval between samples. A sample's outputs are complete "
                  f"{st['depth']} beats after its first beat starts: a latency of {st['latency']} cycles (the cycle "
                  "model; the testbench checks both). Stages (cycles): "
                  + ", ".join(f"{n} {k}" for n, k in st["stage_cycles"]) + ".", "",
                  f"Per sample the host moves {st['writes']} words in and {st['reads']} out; "
                  + ("that fits inside a beat, so beats run back to back."
                     if st["back_to_back"] else "that takes longer than a beat over the native host bus: the "
                     "testbench moves them between beats."),
                  f"Streamed inputs (a new one each sample): buffer(s) {', '.join(map(str, st['streamed_inputs']))}; "
                  "the other inputs (weights) are loaded once. "
                  f"The testbench streams {st['samples']} samples (mem/*.hex hold each streamed bank's words "
                  "sample after sample).", ""]
        if "axis" in st:
            from .bus.stream import stream_markdown
            lines += stream_markdown(st)
    if info.get("host_input"):
        h = info["host_input"]
        where = "" if h["buffer"] is None else f" (buffer {h['buffer']})"
        lines += ["## Host input", "",
                  f"The host turns each raw sample `x` ({h['elements']} values, row-major) into the words of input "
                  f"`{h['input']}`{where} before it writes them:", "", f"    {h['formula']}", "",
                  f"A and C, one pair per element, are in `{h['constants']}`; `{info['top']}_host_input.h` computes "
                  f"the same words in C (`{info['top']}_prepare_{h['input']}`). A and C: {h['how']}. The "
                  "testbench's input words are this step's output.", ""]
    r, clk = info["resources"], info["clock"]
    lines += ["## Resources and clock", ""]
    lines.append("not measured (no synthesis given)" if r is None else
                 f"{r['target']}: {r['luts']} LUT, {r['ffs']} FF, {r['bram']} BRAM, {r['lutram']} LUTRAM, "
                 f"{r['dsp']} DSP ({r['yosys_version']}: `{r['script']}`).")
    lines.append("")
    if clk is None:
        lines.append("Clock: not measured (no place-and-route given).")
    elif not clk["fits"]:
        lines.append(f"Clock: the design fits no device tried: {clk['reason']}.")
    else:
        lines.append(f"Clock: {clk['fmax_mhz']:.1f} MHz reached on {clk['device']} {clk['package']} "
                     f"(nextpnr {clk['router']}, {clk['placer']} placer, seed {clk['seed']}, target "
                     f"{clk['target_mhz']:g} MHz): {clk['latency_us']:.2f} us per run.")
    lines += ["", "## Knobs", "", ", ".join(f"{k}={v}" for k, v in info["knobs"].items()), ""]
    return "\n".join(lines)


BUS_PROTOCOL = {
    "axi-lite": {
        "clock": "one clock `clk`, all logic on its rising edge; `rst` is a synchronous reset (active high)",
        "bus": "AXI4-Lite slave `s_axi_*`: 32-bit data, byte addresses, WSTRB byte enables, one access at a "
               "time; an error answers SLVERR. `irq` is high while IRQ_STATUS.DONE and IRQ_ENABLE are set",
        "run": "write the inputs into their banks, then 1 to CTRL; STATUS.DONE (or `irq`) says the run ended; "
               "CYCLES holds its cycle count; read the outputs from their banks",
        "idle_only": "memory banks answer only while the design is idle (STATUS.BUSY low); registers always",
        "persistence": "inputs stay in their memories across runs: write only what changes before the next start",
    },
    "wishbone": {
        "clock": "one clock `clk`, all logic on its rising edge; `rst` is a synchronous reset (active high)",
        "bus": "Wishbone B4 slave `wb_*`: 32-bit data, 8-bit granularity (SEL), word addresses (`wb_adr` = "
               "byte address / 4, as LiteX), classic cycles; pipelined masters use `wb_stall` (one access at a "
               "time); an error answers ERR. `irq` is high while IRQ_STATUS.DONE and IRQ_ENABLE are set",
        "run": "write the inputs into their banks, then 1 to CTRL; STATUS.DONE (or `irq`) says the run ended; "
               "CYCLES holds its cycle count; read the outputs from their banks",
        "idle_only": "memory banks answer only while the design is idle (STATUS.BUSY low); registers always",
        "persistence": "inputs stay in their memories across runs: write only what changes before the next start",
    },
}

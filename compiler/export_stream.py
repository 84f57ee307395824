"""Export of a schedule=dataflow design: samples streamed back to back (compiler/export.py
writes the files; this module holds what differs from a sequential design's export).

The handshake is the design's own: **start/done per beat** (hw/dataflow.py). `start` held
high runs beats back to back, each exactly `beat` cycles, `done` high in the cycle after a
beat's last (the next beat's first, when start stays high). During beat t the host writes
sample t+1's streamed inputs through host_sel/host_addr/host_wdata/host_we (they land in the
bank of the next sample) and reads sample t - depth's outputs through host_rsel/host_raddr
(the bank of the sample the previous beat completed), one word a cycle each, both at once.
While no beat runs the same banks answer, so a host that needs more than a beat for a
sample's words lowers `start` and does them between beats. Weights are written while no beat
runs.

    stream_samples(design, n)   -> n samples of the streamed inputs (the design's own data, rolled)
    stream_memories(...)        -> mem/in*.hex (a streamed bank: n samples' words one after another)
                                   and mem/expected*.hex (n samples' outputs likewise)
    stream_testbench_verilog()  -> tb.v streaming the samples through the native handshake
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from amaranth.hdl import Shape

from . import dtypes as dt
from .design import Design
from .errors import CompileError
from .sim.memory_io import SimResult, input_words
from .tools import atomic_write_text

DEFAULT_SAMPLES = 4


def stream_samples(design: Design, count: int = DEFAULT_SAMPLES) -> list[dict[int, np.ndarray]]:
    """`count` samples of the design's streamed inputs: the data it was compiled with, then
    that data rolled by 1, 2, ... elements (the same values, other positions: every sample's
    outputs differ, with no value the model was not given)."""
    flow = design.flow
    assert flow is not None
    out = []
    for n in range(count):
        sample = {}
        for buf in sorted(flow.streamed):
            data = design.graph.buffers[buf].data
            if data is None:
                raise CompileError(f"streamed input buffer {buf} has no data: pass `samples` to export it")
            sample[buf] = np.roll(np.asarray(data).reshape(-1), n)
        out.append(sample)
    return out


def check_stream(design: Design, results: list[SimResult]) -> None:
    """Every sample's latency is the cycle model's, and from the second on its interval too."""
    cm = design.cycle_model()
    for n, r in enumerate(results):
        if r.cycles != cm.total or (n > 0 and r.interval != cm.interval):
            raise CompileError(f"sample {n} took {r.cycles} cycles ({r.interval} after the previous one) but the "
                               f"cycle model says a latency of {cm.total} and an interval of {cm.interval}: "
                               "a compiler bug; nothing exported")


@dataclass(frozen=True)
class StreamIO:
    """What the host bus moves per sample (write words of the streamed inputs, read words of
    the outputs) and whether that fits inside a beat, so that beats run back to back."""
    writes: int
    reads: int
    read_latency: int
    beat: int

    @property
    def overlapped(self) -> bool:
        return self.writes <= self.beat and self.reads + self.read_latency <= self.beat


def stream_io(design: Design) -> StreamIO:
    flow = design.flow
    assert flow is not None
    ports = design.host_ports
    writes = sum(p.depth for p in ports if p.write and p.buffer in flow.streamed)
    reads = sum(p.depth for p in ports if p.read)
    return StreamIO(writes, reads, design.top.host_read_latency, flow.beat)


def _hex_lines(words: np.ndarray, width: int, present: np.ndarray | None = None) -> str:
    digits = (width + 3) // 4
    mask = (1 << width) - 1
    return "\n".join(format(int(w) & mask, f"0{digits}x") if present is None or present[i] else "x" * digits
                     for i, w in enumerate(words.tolist())) + "\n"


def stream_memories(design: Design, out: Path, samples: list[dict[int, np.ndarray]],
                    results: list[SimResult], port_file) -> list:
    """The hex files of a streamed export (module docstring); `port_file`: export.PortFile."""
    flow = design.flow
    assert flow is not None
    sel = {(p.kernel, p.slot): i for i, p in enumerate(design.host_ports)}
    base = input_words(design, None)
    per_sample = [input_words(design, s, only_given=True) for s in samples]
    ports = []
    for buf, words in base.items():
        streamed = buf in flow.streamed
        runs = [per_sample[n].get(buf, words) for n in range(len(samples))] if streamed else [words]
        banks_per_run = [design.memory_words(buf, w) for w in runs]
        for j, (ref, _) in enumerate(banks_per_run[0]):
            i = sel[ref.kernel, ref.slot]
            hp = design.host_ports[i]
            name = f"mem/in{i}_b{buf}_k{ref.kernel}_{ref.name}.hex"
            atomic_write_text(out / name, _hex_lines(np.concatenate([b[j][1] for b in banks_per_run]), hp.width))
            ports.append(port_file(i, "input", buf, ref.kernel, ref.name, hp.depth, hp.width, name,
                                   samples=len(runs) if streamed else 1, sign_extend=hp.sign_extend))
    for k, buf in enumerate(design.graph.outputs):
        dtype = design.graph.buffers[buf].dtype
        layout = design.banking_of(*design.host_buffers[buf].home).layout
        present = layout.scatter(np.ones(layout.size, dtype=bool))
        per = [layout.scatter(dt.to_words(r.outputs[k].reshape(-1), dtype)) for r in results]
        for j, ref in enumerate(design.home_memories(buf)):
            i = sel[ref.kernel, ref.slot]
            hp = design.host_ports[i]
            name = f"mem/expected{i}_b{buf}_k{ref.kernel}_{ref.name}.hex"
            atomic_write_text(out / name, _hex_lines(np.concatenate([p[j] for p in per]), hp.width,
                                                     np.concatenate([present[j]] * len(per))))
            ports.append(port_file(i, "output", buf, ref.kernel, ref.name, hp.depth, hp.width, name,
                                   int(np.count_nonzero(present[j])) * len(per), samples=len(per),
                                   sign_extend=hp.sign_extend))
    return sorted(ports, key=lambda p: p.sel)


def stream_testbench_verilog(design: Design, ports: list, *, top: str, samples: int) -> str:
    """A self-checking testbench streaming `samples` samples through `<top>.v` with the
    start/done-per-beat handshake (module docstring). With every sample's words moved inside
    a beat (StreamIO.overlapped) beats run back to back and it checks each sample's outputs,
    each beat's length, every interval (done to done) and every latency against the cycle
    model; otherwise it moves the words between beats and checks the outputs, each beat's
    length and the latency in beats."""
    flow = design.flow
    assert flow is not None
    io = stream_io(design)
    cm = design.cycle_model()
    sig = design.top.signature.members
    width = {n: Shape.cast(sig[n].shape).width for n in ("host_sel", "host_addr", "host_wdata")}
    dw = width["host_wdata"]
    lat = io.read_latency
    assert lat >= 1, "a read's word is checked in a later cycle than its address"
    weights = [p for p in ports if p.role == "input" and p.samples == 1 and p.buffer not in flow.streamed]
    streamed = [p for p in ports if p.role == "input" and p.buffer in flow.streamed]
    outputs = [p for p in ports if p.role == "output"]
    arrays, loads, tables, in_cases, exp_cases = [], [], [], [], []
    for p in ports:
        arr = f"{'in' if p.role == 'input' else 'exp'}{p.sel}"
        arrays.append(f"  reg [{p.width - 1}:0] {arr} [0:{p.depth * p.samples - 1}];\n"
                      f"  initial $readmemh(\"{p.file}\", {arr});")
    for p in weights:
        loads.append(f"    host_sel = {p.sel};   // buffer {p.buffer} (weights): kernel {p.kernel} {p.memory}\n"
                     f"    for (i = 0; i < {p.depth}; i = i + 1) begin\n"
                     f"      host_addr = i; host_wdata = in{p.sel}[i]; host_we = 1; @(negedge clk);\n"
                     f"    end\n    host_we = 0;")
    j = 0
    for p in streamed:
        tables.append(f"    for (i = 0; i < {p.depth}; i = i + 1) begin wsel[{j} + i] = {p.sel}; waddr[{j} + i] = i; end")
        in_cases.append(f"      {p.sel}: in_word = in{p.sel}[n * {p.depth} + a];")
        j += p.depth
    j = 0
    for p in outputs:
        tables.append(f"    for (i = 0; i < {p.depth}; i = i + 1) begin rsel[{j} + i] = {p.sel}; raddr[{j} + i] = i; end")
        exp_cases.append(f"      {p.sel}: exp_word = exp{p.sel}[n * {p.depth} + a];")
        j += p.depth
    nl = "\n"
    sel_w, addr_w = width["host_sel"], width["host_addr"]
    head = f"""// Self-checking streaming testbench for {top} (generated by tinyhw; {design.name()}), a
// schedule=dataflow design: {samples} samples streamed with the start/done-per-beat handshake.
// Run from this folder:  iverilog -g2012 -o tb.vvp {top}.v tb.v && vvp tb.vvp
// Weights are written through the host bus while no beat runs. {"Beats run back to back (start held high):" if io.overlapped else "Between beats (start low):"}
// {"during beat t" if io.overlapped else "before beat t"} the testbench writes sample {"t+1" if io.overlapped else "t"}'s streamed inputs (host_sel/host_addr/host_wdata/host_we)
// and reads sample t-{flow.depth}'s outputs (host_rsel/host_raddr -> host_rdata), one word a cycle each,
// and compares every output word with mem/expected*.hex (sample after sample; x = padding).
// It checks that every beat takes {flow.beat} cycles{", every interval (done to done) is the beat and every latency (a sample's first beat's start to the done of the beat that completes it) is " + str(cm.total) + " cycles" if io.overlapped else " and every sample's outputs are complete " + str(flow.depth) + " beats after its first beat starts"}.
`timescale 1ns/1ps
module tb;
  localparam BEAT = {flow.beat};           // cycles per beat: the interval (the cycle model)
  localparam DEPTH = {flow.depth};           // beats from a sample's first to the one that completes its outputs
  localparam LATENCY = {cm.total};        // DEPTH x BEAT cycles
  localparam SAMPLES = {samples};
  localparam BEATS = SAMPLES + DEPTH - 1;
  localparam WRITES = {io.writes};         // words of a sample's streamed inputs
  localparam READS = {io.reads};          // words of a sample's outputs
  localparam RLAT = {lat};            // host_read_latency
  reg clk = 0;
  always #5 clk = ~clk;
  reg rst = 1, start = 0, host_we = 0;
  reg [{sel_w - 1}:0] host_sel = 0, host_rsel = 0;
  reg [{addr_w - 1}:0] host_addr = 0, host_raddr = 0;
  reg [{dw - 1}:0] host_wdata = 0;
  wire done, busy;
  wire [{dw - 1}:0] host_rdata;
  {top} dut(.clk(clk), .rst(rst), .start(start), .done(done), .busy(busy), .host_sel(host_sel),
            .host_addr(host_addr), .host_wdata(host_wdata), .host_we(host_we), .host_rsel(host_rsel),
            .host_raddr(host_raddr), .host_rdata(host_rdata));

{nl.join(arrays)}

  // the words of a sample in the order they are moved: (bank, address) per write and per read
  reg [{sel_w - 1}:0] wsel [0:{max(io.writes, 1) - 1}];
  reg [{addr_w - 1}:0] waddr [0:{max(io.writes, 1) - 1}];
  reg [{sel_w - 1}:0] rsel [0:{max(io.reads, 1) - 1}];
  reg [{addr_w - 1}:0] raddr [0:{max(io.reads, 1) - 1}];
  integer i;
  initial begin
{nl.join(tables)}
  end
  function [{dw - 1}:0] in_word(input integer s, input integer n, input integer a);
    case (s)
{nl.join(in_cases) if in_cases else "      0: in_word = 0;"}
      default: in_word = 0;
    endcase
  endfunction
  function [{dw - 1}:0] exp_word(input integer s, input integer n, input integer a);
    case (s)
{nl.join(exp_cases)}
      default: exp_word = 0;
    endcase
  endfunction

  integer cyc = 0, errors = 0, words = 0, t, j;
  integer begin_at [0:BEATS];
  integer done_at [0:BEATS];
  always @(negedge clk) cyc <= cyc + 1;
  // address of read op `j` of sample `n` on the bus; its word is checked RLAT cycles later
  task read_op(input integer j);
    begin host_rsel = rsel[j]; host_raddr = raddr[j]; end
  endtask
  task check_op(input integer n, input integer j);
    reg [{dw - 1}:0] want;
    begin
      want = exp_word(rsel[j], n, raddr[j]);
      if ((^want) !== 1'bx) begin
        words = words + 1;
        if (host_rdata !== want) begin
          errors = errors + 1;
          if (errors <= 10) $display("MISMATCH sample %0d host_rsel=%0d addr=%0d: got %h, expected %h",
                                     n, rsel[j], raddr[j], host_rdata, want);
        end
      end
    end
  endtask
  task write_op(input integer n, input integer j);
    begin host_sel = wsel[j]; host_addr = waddr[j]; host_wdata = in_word(wsel[j], n, waddr[j]); host_we = 1; end
  endtask
"""
    if io.overlapped:
        body = f"""
  initial begin
    // inputs and signals change at the falling edge; the design samples them at the rising edge
    @(negedge clk); @(negedge clk); rst = 0;
{nl.join(loads)}
    for (j = 0; j < WRITES; j = j + 1) begin write_op(0, j); @(negedge clk); end
    host_we = 0;
    start = 1;                         // held high: beats back to back
    for (t = 0; t < BEATS; t = t + 1) begin
      begin_at[t] = cyc;
      for (j = 0; j < BEAT; j = j + 1) begin
        if (j > 0 && done === 1'b1) begin
          $display("FAIL: beat %0d done after %0d cycles, the cycle model says %0d", t, j, BEAT);
          $fatal(1);
        end
        if (t >= DEPTH && j >= RLAT && j - RLAT < READS) check_op(t - DEPTH, j - RLAT);
        host_we = 0;
        if (t + 1 < SAMPLES && j < WRITES) write_op(t + 1, j);
        if (t >= DEPTH && j < READS) read_op(j);
        @(negedge clk);
      end
      host_we = 0;
      if (t + 1 == BEATS) start = 0;
      if (done !== 1'b1) begin
        $display("FAIL: beat %0d: no done after %0d cycles (the cycle model says %0d)", t, BEAT, BEAT);
        $fatal(1);
      end
      done_at[t] = cyc;
      if (t >= DEPTH - 1) begin
        if (done_at[t] - begin_at[t - DEPTH + 1] != LATENCY) begin
          $display("FAIL: sample %0d: latency %0d cycles, the cycle model says %0d", t - DEPTH + 1,
                   done_at[t] - begin_at[t - DEPTH + 1], LATENCY);
          errors = errors + 1;
        end
        if (t >= DEPTH && done_at[t] - done_at[t - 1] != BEAT) begin
          $display("FAIL: sample %0d: %0d cycles after the previous one, the cycle model says %0d",
                   t - DEPTH + 1, done_at[t] - done_at[t - 1], BEAT);
          errors = errors + 1;
        end
      end
    end
    // the last sample's outputs, while no beat runs
    for (j = 0; j < READS + RLAT; j = j + 1) begin
      if (j >= RLAT) check_op(SAMPLES - 1, j - RLAT);
      if (j < READS) read_op(j);
      @(negedge clk);
    end
    if (errors == 0) begin
      $display("PASS: %0d samples streamed back to back, %0d output words match; interval %0d cycles, latency %0d cycles (= the cycle model)",
               SAMPLES, words, BEAT, LATENCY);
      $finish;
    end
    $display("FAIL: %0d errors (%0d output words checked)", errors, words);
    $fatal(1);
  end
endmodule
"""
    else:
        body = f"""
  integer io;
  initial begin
    // inputs and signals change at the falling edge; the design samples them at the rising edge
    @(negedge clk); @(negedge clk); rst = 0;
{nl.join(loads)}
    io = (WRITES > READS + RLAT) ? WRITES : READS + RLAT;
    for (t = 0; t <= BEATS; t = t + 1) begin
      // between beats: sample t's inputs in, sample t-DEPTH's outputs out
      for (j = 0; j < io; j = j + 1) begin
        if (t >= DEPTH && j >= RLAT && j - RLAT < READS) check_op(t - DEPTH, j - RLAT);
        host_we = 0;
        if (t < SAMPLES && j < WRITES) write_op(t, j);
        if (t >= DEPTH && j < READS) read_op(j);
        @(negedge clk);
      end
      host_we = 0;
      if (t < BEATS) begin
        start = 1; begin_at[t] = cyc; @(negedge clk); start = 0;
        for (j = 1; done !== 1'b1; j = j + 1) begin
          if (j > BEAT) begin
            $display("FAIL: beat %0d: no done after %0d cycles (the cycle model says %0d)", t, BEAT, BEAT);
            $fatal(1);
          end
          @(negedge clk);
        end
        done_at[t] = cyc;
        if (done_at[t] - begin_at[t] != BEAT) begin
          $display("FAIL: beat %0d took %0d cycles, the cycle model says %0d", t, done_at[t] - begin_at[t], BEAT);
          errors = errors + 1;
        end
        @(negedge clk);                  // back to idle
      end
    end
    if (errors == 0) begin
      $display("PASS: %0d samples streamed, %0d output words match; every beat %0d cycles, each sample's outputs complete %0d beats after its first (= the cycle model); the host bus moved a sample's words in %0d cycles between beats",
               SAMPLES, words, BEAT, DEPTH, io);
      $finish;
    end
    $display("FAIL: %0d errors (%0d output words checked)", errors, words);
    $fatal(1);
  end
endmodule
"""
    return head + body


STREAM_PROTOCOL = {
    "clock": "one clock `clk`, all logic on its rising edge; `rst` is a synchronous reset (active high)",
    "handshake": "start/done per beat: with `start` high while no beat runs a beat starts; held high, beats run "
                 "back to back, each exactly `stream.beat` cycles; `done` is high in the cycle after a beat's "
                 "last (the next beat's first); `busy` while a beat runs",
    "stream": "beat t takes sample t in and completes the outputs of sample t - depth + 1 (`stream.depth`); "
              "sample t's streamed inputs are written before beat t starts (during beat t-1 or while no beat "
              "runs) and its outputs read after beat t + depth - 1 is done and before beat t + depth + 1 starts "
              "(during beat t + depth, or while no beat runs); the first depth - 1 beats complete no sample",
    "host_write": "host_sel, host_addr, host_wdata, host_we=1 for one cycle: the word is written at the rising "
                  "edge; a streamed input's bank takes it any time (it lands in the next sample's bank), a "
                  "weight's only while no beat runs",
    "host_read": "host_rsel and host_raddr (a read address of its own: a sample goes in while another comes "
                 "out); host_rdata holds the word `host_read_latency` cycles later. From fp_pipeline 3 the bus is "
                 "registered (`host_delay` 1): a write lands a cycle after the pins, into the bank chosen then, and a "
                 "read's address reaches the memory a cycle late, so a sample's last read goes on the pins by the "
                 "last cycle but one of the beat its bank belongs to",
    "back_to_back": "to keep beats back to back the host moves a sample's words inside a beat (`stream.writes` "
                    "words in, `stream.reads` out, one a cycle each, in parallel); a host that needs longer lowers "
                    "`start` and moves them between beats",
    "layout": "a buffer's elements are spread over its banks by the compiler's layout (interface.json "
              "`host_ports`); a streamed bank's .hex file holds its words for each sample, one sample after "
              "another (`samples` x `depth` words)",
}

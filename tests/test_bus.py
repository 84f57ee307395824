"""compiler.bus.wrapper: exported designs behind AXI4-Lite and Wishbone, verified as hardware engineers
verify IP: cocotb testbenches (tests/cocotb_bus/bus_tb.py) on Icarus Verilog drive the bus with
cocotbext-axi and cocotbext-wishbone, load the inputs, start, wait for the interrupt and compare
every output word with the golden outputs; the exported C driver runs the same design through
the bus; the plain-Verilog bus testbench passes too.

The golden outputs: each design's expected*.hex is checked against the numpy reference here
(bit for bit), and the C driver's output elements are compared with the reference directly.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

from compiler import HardwareConfig, compile_model, export_design
from compiler import dtypes as dt
from compiler.bus import wrap
from compiler.bus.wrapper import BusError, bus_map, check_bus
from compiler.sim.memory_io import input_words
import designs
from dse.models import zoo
from helpers import Point, bus_gemv_int8, check_expected_files, int8_mlp, needs_iverilog, pass_line, run_cocotb

HERE = Path(__file__).resolve().parent

needs_cc = pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")


# ---------------------------------------------------------------------------------------------
# the designs


def mlp_fp32() -> Point:
    """Two kernels, fp32, long enough (98 cycles) to see a memory access refused while it runs."""
    params = {"IN": 12, "HIDDEN": 6, "OUT": 3}
    built = zoo.check_built(zoo.ZOO["mlp"].build("fp32", **params))
    arrays = zoo.make_inputs(built, 0)
    design = compile_model(built.forward(*[Tensor(arrays[n]) for n in built.inputs]),
                           config=HardwareConfig(mem_read="sync"))
    return Point(design, (zoo.reference("mlp", "fp32", params, arrays).astype(np.float32),))


def mixed_int16() -> Point:
    """Three kernels, int16 and int8 outputs (two and four elements per bus word), an input
    held by two kernels, and the registered host bus of fp_pipeline 3 (reads take 4 cycles)."""
    case = designs.mixed_int16()
    return Point(compile_model(*case.outputs, config=HardwareConfig(mem_read="sync", fp_pipeline=3)),
                 case.reference)


def add_int64() -> Point:
    """64-bit elements: two bus words each, the high word storing the element."""
    rng = np.random.default_rng(11)
    a = rng.integers(-2**62, 2**62, 6, dtype=np.int64)
    b = rng.integers(-2**40, 2**40, 6, dtype=np.int64)
    y = Tensor(a, dtype=dtypes.int64) * 3 + Tensor(b, dtype=dtypes.int64)
    return Point(compile_model(y, config=HardwareConfig(mem_read="sync")), (a * 3 + b,))


def bitwise_uint8() -> Point:
    """uint8 outputs and a bool one: a 1-bit element in a byte, the rest of the byte zero."""
    case = designs.bitwise_uint8()
    return Point(compile_model(*case.outputs, config=HardwareConfig(mem_read="sync")), case.reference)


POINTS = {"gemv_int8": bus_gemv_int8, "mlp_fp32": mlp_fp32, "mixed_int16": mixed_int16, "add_int64": add_int64,
          "bitwise_uint8": bitwise_uint8}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(point name, bus) -> (Point, export folder): each exported once for the module."""
    cache: dict[tuple[str, str], tuple[Point, Path]] = {}
    points: dict[str, Point] = {}

    def get(name: str, bus: str):
        if (name, bus) not in cache:
            point = points.setdefault(name, POINTS[name]())
            out = tmp_path_factory.mktemp(f"{name}-{bus}")
            export_design(design=point.design, out_dir=out, bus=bus)
            check_expected_files(out, point)
            cache[name, bus] = (point, out)
        return cache[name, bus]
    return get


# ---------------------------------------------------------------------------------------------
# cocotb


@pytest.mark.slow
@needs_iverilog
@pytest.mark.parametrize("name,bus,mode", [
    ("gemv_int8", "axi-lite", ""), ("gemv_int8", "wishbone", "classic"),
    ("mlp_fp32", "axi-lite", ""), ("mlp_fp32", "wishbone", "pipelined"),
    ("mixed_int16", "wishbone", "pipelined"), ("mixed_int16", "axi-lite", ""),
    ("add_int64", "axi-lite", ""), ("bitwise_uint8", "wishbone", "classic")])
def test_cocotb_loads_runs_and_reads_back_through_the_bus(exported, monkeypatch, name, bus, mode):
    point, out = exported(name, bus)
    log = run_cocotb(out, env={"TINYHW_WISHBONE_MODE": mode} if mode else None, monkeypatch=monkeypatch)
    cycles = point.design.cycle_model().total
    line = pass_line(log)
    words = sum(int(np.asarray(g).size) for g in point.golden)
    assert line.startswith(f"PASS: {words} output words match, {cycles} cycles (= the cycle model), over {bus}")


@pytest.mark.slow
@needs_iverilog
def test_cocotb_fails_on_a_wrong_expected_word(exported, monkeypatch, tmp_path):
    _, out = exported("gemv_int8", "axi-lite")
    copy = tmp_path / "hw"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("sim_build", "*.so"))
    break_one_word(copy)
    log = run_cocotb(copy, monkeypatch=monkeypatch, passes=False)
    assert "MISMATCH bank" in log and "PASS:" not in log


def break_one_word(out: Path) -> None:
    """Flip the lowest bit of the first compared word of the first expected file."""
    path = sorted((out / "mem").glob("expected*.hex"))[0]
    lines = path.read_text().split("\n")
    i = next(i for i, line in enumerate(lines) if line and "x" not in line)
    lines[i] = format(int(lines[i], 16) ^ 1, f"0{len(lines[i])}x")
    path.write_text("\n".join(lines))


def driver_harness(out: Path, point: Point) -> Path:
    """A shared library of the exported C driver whose MMIO goes to callbacks (bus_tb.py's
    run_c_driver serves them over the bus), and a `harness` running the model once."""
    design = point.design
    header = (out / "tinyhw_top.h").read_text()
    ins = [f"tinyhw_top_input{i}" for i in range(len(design.graph.inputs))
           if f"tinyhw_buffer tinyhw_top_input{i} " in header]
    outs = [f"tinyhw_top_output{i}" for i in range(len(design.graph.outputs))]
    writes = "\n".join(f"    tinyhw_write_buffer(0, &{v}, in[{i}]);" for i, v in enumerate(ins))
    reads = "\n".join(f"    tinyhw_read_buffer(0, &{v}, out[{i}]);" for i, v in enumerate(outs))
    (out / "harness.c").write_text(f"""\
#include <stdint.h>
typedef void (*write_fn)(uint64_t, uint32_t);
typedef uint32_t (*read_fn)(uint64_t);
static write_fn W;
static read_fn R;
#define TINYHW_WRITE32(addr, value) W((addr), (value))
#define TINYHW_READ32(addr) R(addr)
#include "tinyhw.c"
#include "tinyhw_top.h"
int harness(write_fn w, read_fn r, const void *const *in, void *const *out, uint32_t *cycles)
{{
    W = w; R = r;
    if (tinyhw_check_id(0)) return 1;
{writes}
    tinyhw_start(0);
    if (tinyhw_wait(0, 100000)) return 2;
    *cycles = tinyhw_cycles(0);
{reads}
    return 0;
}}
""")
    lib = out / "libharness.so"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-shared", "-fPIC", "-I", str(out),
                    "-o", str(lib), str(out / "harness.c")], check=True, capture_output=True, text=True)
    return lib


def element_files(out: Path, point: Point) -> tuple[list[Path], list[Path]]:
    """The model's input elements and the golden outputs, as arrays of the elements' containers."""
    design = point.design
    bmap = bus_map(design)
    container = {h.buffer: bmap.bank(h.banks[0]).container_bits for h in bmap.holders}
    kind = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
    words = input_words(design, None)
    ins, outs = [], []
    for i, buf in enumerate(design.graph.inputs):
        if buf in container:
            ins.append(out / f"in{i}.bin")
            ins[-1].write_bytes(np.asarray(words[buf], dtype=kind[container[buf]]).tobytes())
    for i, (buf, want) in enumerate(zip(design.graph.outputs, point.golden)):
        outs.append(out / f"out{i}.bin")
        bits = dt.to_words(want, design.graph.buffers[buf].dtype)
        outs[-1].write_bytes(bits.astype(kind[container[buf]]).tobytes())
    return ins, outs


@pytest.mark.slow
@needs_iverilog
@needs_cc
@pytest.mark.parametrize("name,bus,mode", [("gemv_int8", "axi-lite", ""), ("mixed_int16", "wishbone", "pipelined"),
                                           ("add_int64", "axi-lite", "")])
def test_the_exported_c_driver_runs_the_design_through_the_bus(exported, monkeypatch, name, bus, mode):
    point, out = exported(name, bus)
    lib = driver_harness(out, point)
    ins, outs = element_files(out, point)
    sep = ":" if sys.platform != "win32" else ";"
    log = run_cocotb(out, testcase="run_c_driver", monkeypatch=monkeypatch,
                     env={"TINYHW_DRIVER_LIB": str(lib), "TINYHW_INPUTS": sep.join(map(str, ins)),
                          "TINYHW_OUTPUTS": sep.join(map(str, outs)), "TINYHW_WISHBONE_MODE": mode})
    assert f"{point.design.cycle_model().total} cycles); {len(outs)} outputs equal the golden model's" in pass_line(log)


# ---------------------------------------------------------------------------------------------
# the plain-Verilog bus testbench

def run_plain(out: Path) -> subprocess.CompletedProcess:
    subprocess.run(["iverilog", "-g2012", "-o", "tb.vvp", "tinyhw_top.v", "tb.v"], cwd=out, check=True,
                   capture_output=True, text=True, timeout=120)
    return subprocess.run(["vvp", "-n", "tb.vvp"], cwd=out, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@needs_iverilog
@pytest.mark.parametrize("name,bus", [("gemv_int8", "wishbone"), ("mixed_int16", "axi-lite"), ("add_int64", "axi-lite")])
def test_the_plain_verilog_bus_testbench_passes_and_fails_on_a_wrong_word(exported, tmp_path, name, bus):
    point, out = exported(name, bus)
    copy = tmp_path / "hw"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("sim_build", "*.so"))
    run = run_plain(copy)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{point.design.cycle_model().total} cycles (= the cycle model), over {bus}" in run.stdout
    break_one_word(copy)
    run = run_plain(copy)
    assert run.returncode != 0 and "MISMATCH" in run.stdout and "PASS" not in run.stdout


# ---------------------------------------------------------------------------------------------
# AXI-Stream: a dataflow design streaming samples (compiler/bus/stream.py)

def two_heads(narrow: bool = False) -> tuple:
    """x read by two kernels (written into both kernels' banks from one s_axis element), an
    int32 and an int16 output (one m_axis frame), depth 1. `narrow`: the int16 head's weights
    declared in [-2, 1], so its sums are stored in 12 bits, read back sign-extended to 16 and
    zero-extended to the 32-bit tdata."""
    rng = np.random.default_rng(3)
    xa = rng.integers(-128, 128, 12).astype(np.int8)
    w1 = rng.integers(-128, 128, (5, 12)).astype(np.int8)
    w2 = rng.integers(-2, 2, (3, 12)).astype(np.int8) if narrow else rng.integers(-128, 128, (3, 12)).astype(np.int8)
    x, W2 = Tensor(xa), Tensor(w2)
    y1 = Tensor(w1).cast(dtypes.int32) @ x.cast(dtypes.int32)
    y2 = (W2.cast(dtypes.int32) @ x.cast(dtypes.int32)).cast(dtypes.int16)
    design = compile_model(y1, y2, config=HardwareConfig.from_dict({"schedule": "dataflow", "lanes@1": 3,
                                                                    "reduce_unroll@0": 2}), stream=x,
                           input_ranges={W2: (-2, 1)} if narrow else None)
    if narrow:
        assert any(p.sign_extend and p.width < 16 for p in design.host_ports)

    def ref(v):
        v = v.astype(np.int32)
        return np.concatenate([(w1.astype(np.int32) @ v).view(np.uint32),
                               (w2.astype(np.int32) @ v).astype(np.int16).view(np.uint16).astype(np.uint32)])
    return design, x, ref


def mlp_stream() -> tuple:
    """An int8 MLP 24-16-8-4 (per-layer folding, a copy: depth 5, beat 65)."""
    x, y, ref = int8_mlp([24, 16, 8, 4])
    design = compile_model(y, config=HardwareConfig.from_dict(
        {"lanes@0": 4, "reduce_unroll@0": 2, "lanes@1": 2, "schedule": "dataflow"}), stream=x)
    return design, x, lambda v: ref(v).view(np.uint32)


def mlp_stream_p3() -> tuple:
    """An int8 MLP 16-8-4 at fp_pipeline 3: the design's host bus registered (a write lands a
    cycle late, a read's word comes 4 cycles after its address)."""
    x, y, ref = int8_mlp([16, 8, 4])
    design = compile_model(y, config=HardwareConfig(schedule="dataflow", lanes=2, fp_pipeline=3), stream=x)
    return design, x, lambda v: ref(v).view(np.uint32)


STREAM_POINTS = {"mlp": mlp_stream, "two_heads": two_heads, "two_heads_narrow": lambda: two_heads(narrow=True),
                 "mlp_p3": mlp_stream_p3}


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    """name -> (design, export, folder): exported behind axi-stream once for the module, with
    four samples; mem/stream_out.hex checked against numpy sample by sample."""
    cache = {}

    def get(name: str):
        if name not in cache:
            design, x, ref = STREAM_POINTS[name]()
            out = tmp_path_factory.mktemp(f"stream-{name}")
            exp = export_design(design=design, out_dir=out, bus="axi-stream", backend="pysim")
            data = np.asarray(design.graph.buffers[design.buffer_of(x)].data).reshape(-1)
            got = np.array([int(w, 16) for w in (out / "mem" / "stream_out.hex").read_text().split()], dtype=np.uint32)
            got = got.reshape(4, -1)
            for n in range(4):              # the samples: the design's data rolled by 0..3
                np.testing.assert_array_equal(got[n], ref(np.roll(data, n)))
            cache[name] = (design, exp, out)
        return cache[name]
    return get


@pytest.mark.slow
@needs_iverilog
@pytest.mark.parametrize("name,mode", [("mlp", ""), ("mlp", "backpressure"), ("two_heads", ""),
                                       ("two_heads_narrow", ""), ("mlp_p3", "")])
def test_cocotb_streams_samples_through_axi_stream(streamed, monkeypatch, name, mode):
    design, _, out = streamed(name)
    log = run_cocotb(out, testcase="run_stream", env={"TINYHW_STREAM_MODE": mode}, monkeypatch=monkeypatch)
    line = pass_line(log)
    words = 4 * sum(design.graph.buffers[b].size for b in design.graph.outputs)
    assert line.startswith(f"PASS: 4 samples over axi-stream ({mode or 'back to back'}), {words} output elements match")
    beat = design.cycle_model().interval
    if not mode:                            # back to back, never stalled: every frame one beat after the last
        assert f"frames [{beat}] cycles apart (beat {beat})" in line


@pytest.mark.slow
@needs_iverilog
def test_the_plain_verilog_stream_testbench_passes_and_fails_on_a_wrong_element(streamed, tmp_path):
    design, exp, out = streamed("mlp")
    copy = tmp_path / "hw"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("sim_build", "*.so"))
    run = run_plain(copy)
    assert run.returncode == 0, run.stdout + run.stderr
    cm = design.cycle_model()
    assert (f"PASS: 4 samples streamed back to back over axi-stream, 16 output elements match; interval "
            f"{cm.interval} cycles (the beat: {cm.interval}), first output {cm.total + 6} cycles after the last input "
            "(= the model)") in run.stdout
    path = copy / "mem" / "stream_out.hex"
    lines = path.read_text().split("\n")
    lines[9] = format(int(lines[9], 16) ^ 1, f"0{len(lines[9])}x")       # sample 2, element 1
    path.write_text("\n".join(lines))
    run = run_plain(copy)
    assert run.returncode != 0 and "MISMATCH sample 2 element 1" in run.stdout and "PASS" not in run.stdout


@pytest.mark.slow
@needs_cc
def test_the_stream_interface_and_c_header_state_the_streams(streamed, tmp_path):
    design, exp, out = streamed("mlp")
    info = json.loads(exp.interface_json.read_text())
    axis = info["stream"]["axis"]
    assert (axis["in_bits"], axis["out_bits"], axis["in_elements"], axis["out_elements"]) == (8, 32, 24, 4)
    assert axis["keeps_up"] and axis["stream_interval"] == design.cycle_model().interval
    ports = {p["name"] for p in info["ports"]}
    assert {"s_axis_tdata", "s_axis_tready", "m_axis_tlast", "s_axi_awaddr", "irq"} <= ports and "host_sel" not in ports
    regs = {r["name"]: r["offset"] for r in info["bus"]["map"]["registers"]}
    assert regs["SAMPLES_IN"] == 0x18 and regs["SAMPLES_OUT"] == 0x1C and info["bus"]["map"]["id"] == 0x74687732
    header = (out / "tinyhw_top.h").read_text()
    assert "#define TINYHW_TOP_STREAM_IN_ELEMENTS   24u" in header and "#define TINYHW_TOP_STREAM_OUT_BYTES     4u" in header
    assert "## AXI-Stream" in exp.interface_md.read_text()
    (tmp_path / "use.c").write_text("""\
#include <stdint.h>
static uint32_t regs[64];
#define TINYHW_WRITE32(addr, value) (regs[(addr) / 4] = (value))
#define TINYHW_READ32(addr) (regs[(addr) / 4])
#include "tinyhw.c"
#include "tinyhw_top.h"
int main(void)
{
    regs[0] = TINYHW_ID_STREAM;
    if (tinyhw_check_id(0)) return 1;
    tinyhw_stream_run(0);
    if (regs[TINYHW_REG_CTRL / 4] != TINYHW_CTRL_RUN) return 2;
    tinyhw_stream_stop(0);
    return (int)(regs[TINYHW_REG_CTRL / 4] + tinyhw_samples_in(0) + tinyhw_samples_out(0));
}
""")
    exe = tmp_path / "use"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", str(out), "-o", str(exe),
                    str(tmp_path / "use.c")], check=True, capture_output=True, text=True)
    assert subprocess.run([str(exe)]).returncode == 0


# ---------------------------------------------------------------------------------------------
# the map, the C, bad input

def test_the_map_puts_each_bank_in_its_window_at_its_element_width():
    point = mixed_int16()
    bmap = bus_map(point.design)
    assert bmap.window == 64 and bmap.size == 64 * (1 + len(point.design.host_ports))
    assert [(b.offset, b.container_bits, b.role) for b in bmap.banks] == \
        [(64 * (1 + i), 16 if p.width == 16 else 8, "input" if p.write else "output")
         for i, p in enumerate(point.design.host_ports)]
    a = bmap.holders[0]                  # an input held by two kernels: two holders, two sets of banks
    assert sum(h.buffer == a.buffer for h in bmap.holders) == 2
    assert bus_map(add_int64().design).banks[0].container_bits == 64


def test_a_wide_map_aligns_windows_to_the_largest_bank():
    design = compile_model(*designs.gemv_int8(M=16, K=40).outputs, config=HardwareConfig(mem_read="sync"))
    bmap = bus_map(design)
    assert [b.bytes for b in bmap.banks] == [640, 40, 64]      # W int8, x int8, y int32
    assert bmap.window == 1024 and bmap.addr_bits == 12        # 4 windows of 1 KiB


@pytest.mark.parametrize("name,hint", [("axilite", "did you mean 'axi-lite'?"), ("wishbon", "did you mean 'wishbone'?"),
                                       ("pcie", "")])
def test_an_unknown_bus_is_refused_with_the_closest_name(name, hint):
    with pytest.raises(BusError) as e:
        check_bus(name)
    assert str(e.value) == f"unknown bus {name!r}; {hint + ' ' if hint else ''}known: native, axi-lite, wishbone, axi-stream"


def test_a_bus_that_cannot_wrap_the_design_says_why(tmp_path):
    design = bus_gemv_int8().design
    with pytest.raises(BusError, match="bus 'axi-stream' streams samples into a dataflow design; k0_r_6_10 is a "
                                       "sequential design .* use axi-lite or wishbone"):
        export_design(design=design, out_dir=tmp_path / "o", bus="axi-stream")
    with pytest.raises(BusError, match="unknown bus 'axi'"):
        export_design(design=design, out_dir=tmp_path / "o", bus="axi")
    assert not (tmp_path / "o").exists()                         # refused before writing anything
    with pytest.raises(BusError, match="nothing to wrap"):
        wrap(design, "native")


def test_the_interface_and_the_c_header_state_the_map(tmp_path):
    point = bus_gemv_int8()
    exp = export_design(design=point.design, out_dir=tmp_path, bus="wishbone")
    info = json.loads(exp.interface_json.read_text())
    assert info["bus"]["kind"] == "wishbone" and info["bus"]["c"] == ["tinyhw.h", "tinyhw.c", "tinyhw_top.h"]
    ports = {p["name"] for p in info["ports"]}
    assert {"wb_cyc", "wb_stb", "wb_ack", "wb_err", "wb_stall", "irq"} <= ports and "host_sel" not in ports
    regs = {r["name"]: r["offset"] for r in info["bus"]["map"]["registers"]}
    assert regs == {"ID": 0, "CTRL": 4, "STATUS": 8, "CYCLES": 12, "IRQ_ENABLE": 16, "IRQ_STATUS": 20}
    header = (tmp_path / "tinyhw_top.h").read_text()
    banks = info["bus"]["map"]["banks"]
    assert all(f"#define TINYHW_TOP_BANK{b['sel']}_OFFSET    {b['offset']:#x}u" in header for b in banks)
    assert "#define TINYHW_TOP_CYCLES_MODEL  31u" in header
    md = exp.interface_md.read_text()
    assert "## Bus: wishbone" in md and "| 0x0c | CYCLES | RO |" in md
    # a native export afterwards drops the driver, which no longer fits the top
    export_design(design=point.design, out_dir=tmp_path)
    assert not (tmp_path / "tinyhw.c").exists()
    assert json.loads(exp.interface_json.read_text())["bus"] == {"kind": "native"}


@needs_cc
def test_the_c_driver_places_every_element_where_the_layout_does(tmp_path):
    """The driver's walk of the layout (compiler.bus.c_driver) against compiler/hw/layout.py: it
    writes a buffer of distinct elements into a memory image of the map, which must hold the
    banks scatter() gives, and reads it back unchanged."""
    design = compile_model(*designs.gemv_int8(M=6, K=10).outputs,
                           config=HardwareConfig(mem_read="sync", lanes=3, reduce_unroll=4))
    export_design(design=design, out_dir=tmp_path, bus="axi-lite")
    bmap = bus_map(design)
    (tmp_path / "image.c").write_text("""\
#include <stdio.h>
#include <string.h>
static unsigned char image[TINYHW_TOP_MAP_BYTES_];
#define TINYHW_WRITE32(addr, value) do { uint32_t v_ = (value); memcpy(image + (addr), &v_, 4); } while (0)
#define TINYHW_READ32(addr) (*(uint32_t *)(image + (addr)))
#include "tinyhw.c"
#include "tinyhw_top.h"
int main(void)
{
    uint8_t w[60], back[60];
    for (int i = 0; i < 60; i++) w[i] = (uint8_t)(i + 1);
    tinyhw_write_buffer(0, &tinyhw_top_input0, w);
    tinyhw_read_buffer(0, &(tinyhw_buffer){"w", 60u, 1u, 1u, tinyhw_top_input0_holders}, back);
    fwrite(image, 1, sizeof image, stdout);
    return memcmp(w, back, 60) != 0;
}
""")
    exe = tmp_path / "image"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Werror", f"-DTINYHW_TOP_MAP_BYTES_={bmap.size}", "-I", str(tmp_path),
                    "-o", str(exe), str(tmp_path / "image.c")], check=True, capture_output=True, text=True)
    run = subprocess.run([str(exe)], capture_output=True, check=True)
    image = np.frombuffer(run.stdout, dtype=np.uint8)
    buf = design.graph.inputs[0]
    for ref, bank in design.memory_words(buf, np.arange(1, 61)):
        sel = next(i for i, p in enumerate(design.host_ports) if (p.kernel, p.slot) == (ref.kernel, ref.slot))
        b = bmap.bank(sel)
        assert np.array_equal(image[b.offset:b.offset + b.elements], bank.astype(np.uint8)), f"bank {sel}"


@pytest.mark.slow
def test_a_bitstream_of_the_wrapped_design_builds(tmp_path):
    """--bitstream with --bus: the wrapped top through Yosys, nextpnr and ecppack."""
    from compiler.pnr.bitstream import write_bitstream
    design = compile_model(*designs.gemv_int8(M=4, K=6).outputs, config=HardwareConfig(mem_read="sync"))
    bit = write_bitstream(design=design, out_dir=tmp_path, device="25k", bus="wishbone")
    assert b"Part: LFE5U-25F" in bit.path.read_bytes()[:64] and bit.fmax_mhz
    netlist = json.loads((bit.log_dir / "netlist.json").read_text())
    assert {"wb_cyc", "wb_ack", "irq"} <= set(netlist["modules"]["top"]["ports"])

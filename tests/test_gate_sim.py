"""compiler.pnr.gate_sim: the netlist nextpnr places, simulated cell by cell with the design's
own exported testbench, passes where the design is right and fails where the netlist is not
the design (a register group taken out); the block RAM and multiplier models behave as the
ECP5 documents them, and a mode they do not model stops with its name."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import designs
from compiler import HardwareConfig, compile_model
from compiler.pnr.gate_sim import check_netlist, icarus
from compiler.synth.area import synthesize
from helpers import int8_mlp, needs_iverilog

pytestmark = [pytest.mark.slow, needs_iverilog]


def run_models(tmp_path: Path, body: str) -> str:
    """Icarus on a testbench module `t` (body) beside the cell models; its printed lines."""
    (tmp_path / "t.v").write_text(f"`timescale 1ns/1ps\nmodule t;\n{body}\nendmodule\n")
    return icarus(tmp_path, ["t.v"], top="t", timeout=300)[1]


def _pins(prefix: str, n: int, bus: str) -> str:
    return ", ".join(f".{prefix}{i}({bus}[{i}])" for i in range(n))


@pytest.mark.parametrize("width,outreg", [(1, False), (2, False), (4, False), (9, False), (18, False), (18, True),
                                          (36, False), (36, True)])
def test_a_block_ram_model_reads_back_what_it_was_written(tmp_path, width, outreg):
    """Words written through port A (with byte enables at 18 and 36 bits) read back through
    port B one cycle later, two with the output register; the 36-bit mode writes DIA/DIB and
    reads DOA/DOB."""
    rng = random.Random(width)
    words = {18: 1024, 36: 512}.get(width, 16384 // width if width < 9 else 2048)
    shift = {1: 0, 2: 1, 4: 2, 9: 3, 18: 4, 36: 5}[width]
    mem = {}
    writes = []
    for _ in range(40):
        addr, data = rng.randrange(words), rng.getrandbits(width)
        be = rng.getrandbits(4 if width == 36 else 2) if width >= 18 else 0
        writes.append((addr, data, be))
        old = mem.get(addr, 0)
        if width >= 18:
            mask = sum(((1 << 9) - 1) << (9 * i) for i in range(width // 9) if be >> i & 1)
            mem[addr] = (old & ~mask) | (data & mask)
        else:
            mem[addr] = data
    lines = []
    for addr, data, be in writes:
        ad = (addr << shift) | be
        lines.append(f"    ada = {ad}; dia = 36'h{data:x}; wea = 1; @(negedge clk);")
    lines.append("    wea = 0;")
    for addr in sorted(mem):
        lat = 2 if outreg else 1
        lines.append(f"    adb = {addr << shift}; @(negedge clk);" + (" @(negedge clk);" if lat == 2 else "")
                     + f" if (dob !== 36'h{mem[addr]:x}) begin errors = errors + 1;"
                     f" $display(\"addr %0d got %h want %h\", {addr}, dob, 36'h{mem[addr]:x}); end")
    wide = width == 36
    regmode = "OUTREG" if outreg else "NOREG"
    di = "diA = dia[17:0], diB = dia[35:18]"
    dob = "{doB, doA}" if wide else "{18'b0, doB}"
    body = f"""  reg clk = 0; always #5 clk = ~clk;
  reg [13:0] ada = 0, adb = 0; reg [35:0] dia = 0; reg wea = 0; integer errors = 0;
  wire [17:0] {di}; wire [17:0] doA, doB; wire [35:0] dob = {dob};
  DP16KD #(.DATA_WIDTH_A({width}), .DATA_WIDTH_B({width}), .REGMODE_A("{regmode}"), .REGMODE_B("{regmode}")) ram(
    {_pins("DIA", 18, "diA")}, {_pins("ADA", 14, "ada")}, .CEA(1'b1), .OCEA(1'b1), .CLKA(clk), .WEA(wea), .RSTA(1'b0),
    .CSA0(1'b0), .CSA1(1'b0), .CSA2(1'b0), {_pins("DOA", 18, "doA")},
    {_pins("DIB", 18, "diB" if wide else "18'b0")}, {_pins("ADB", 14, "adb")}, .CEB(1'b1), .OCEB(1'b1), .CLKB(clk),
    .WEB(1'b0), .RSTB(1'b0), .CSB0(1'b0), .CSB1(1'b0), .CSB2(1'b0), {_pins("DOB", 18, "doB")});
  initial begin
    @(negedge clk);
{chr(10).join(lines)}
    $display("errors %0d", errors); $finish;
  end"""
    if not wide:
        body = body.replace(_pins("DIB", 18, "18'b0"), ", ".join(f".DIB{i}(1'b0)" for i in range(18)))
    out = run_models(tmp_path, body)
    assert "errors 0" in out, out


def test_a_block_ram_word_written_by_one_port_and_read_by_the_other_at_once_reads_x(tmp_path):
    """The part leaves a read that collides with the other port's write undefined: x (ADA[1:0]:
    the 18-bit port's byte enables, both set)."""
    body = f"""  reg clk = 0; always #5 clk = ~clk;
  reg wea = 0; wire [17:0] doB;
  DP16KD ram({", ".join(f".DIA{i}(1'b1)" for i in range(18))}, {", ".join(f".ADA{i}(1'b{int(i < 2)})" for i in range(14))},
    .CEA(1'b1), .OCEA(1'b1), .CLKA(clk), .WEA(wea), .RSTA(1'b0),
    {", ".join(f".DIB{i}(1'b0)" for i in range(18))}, {", ".join(f".ADB{i}(1'b0)" for i in range(14))},
    .CEB(1'b1), .OCEB(1'b1), .CLKB(clk), .WEB(1'b0), .RSTB(1'b0), {_pins("DOB", 18, "doB")});
  initial begin
    @(negedge clk); wea = 1; @(negedge clk); $display("collision %b", doB[0]);
    wea = 0; @(negedge clk); $display("after %h", doB); $finish;
  end"""
    out = run_models(tmp_path, body)
    assert "collision x" in out and "after 3ffff" in out, out


def test_a_block_ram_mode_outside_the_model_stops_with_its_name(tmp_path):
    body = """  DP16KD #(.DATA_WIDTH_A(18), .DATA_WIDTH_B(9)) ram();
  initial begin #1 $display("ran on"); $finish; end"""
    out = run_models(tmp_path, body)
    assert "DATA_WIDTH_A 18 with DATA_WIDTH_B 9 is not modelled" in out and "ran on" not in out


@pytest.mark.parametrize("signed,regs", [((1, 1), ()), ((0, 0), ()), ((1, 0), ()),
                                         ((1, 1), ("INPUTA", "INPUTB", "OUTPUT")), ((1, 1), ("PIPELINE",))])
def test_the_multiplier_model_multiplies_with_its_registers(tmp_path, signed, regs):
    """P = A x B at 18 x 18 bits, signed as SIGNEDA / SIGNEDB say, one cycle later per register
    stage (inputs, pipeline, output)."""
    rng = np.random.default_rng(len(regs) + 2 * signed[0] + signed[1])
    a, b = rng.integers(0, 1 << 18, 30), rng.integers(0, 1 << 18, 30)

    def value(x, s):
        return int(x) - (1 << 18) if s and x >> 17 else int(x)
    want = [(value(x, signed[0]) * value(y, signed[1])) & ((1 << 36) - 1) for x, y in zip(a, b)]
    # register stages (A and B together one); p is sampled at the falling edge after the
    # rising edge that took a and b, so the first stage costs no sample
    stages = max(len({{"INPUTA": "in", "INPUTB": "in"}.get(r, r) for r in regs}) - 1, 0)
    params = ", ".join(f'.REG_{r}_CLK("CLK0")' for r in regs)
    feed = "\n".join(f"    a = 18'h{int(x):x}; b = 18'h{int(y):x}; @(negedge clk); got[{i}] = p;"
                     for i, (x, y) in enumerate(zip(a, b)))
    checks = "\n".join(f"    if (got[{i + stages}] !== 36'h{w:x}) begin errors = errors + 1; "
                       f"$display(\"%0d: got %h want %h\", {i}, got[{i + stages}], 36'h{w:x}); end"
                       for i, w in enumerate(want[:len(want) - stages]))
    body = f"""  reg clk = 0; always #5 clk = ~clk;
  reg [17:0] a = 0, b = 0; wire [35:0] p; reg [35:0] got [0:29]; integer errors = 0;
  MULT18X18D #({params}) m({_pins("A", 18, "a")}, {_pins("B", 18, "b")}, .SIGNEDA(1'b{signed[0]}),
    .SIGNEDB(1'b{signed[1]}), .SOURCEA(1'b0), .SOURCEB(1'b0), .CLK0(clk), .CE0(1'b1), .RST0(1'b0),
    {_pins("P", 36, "p")});
  initial begin
    #1;
{feed}
{checks}
    $display("errors %0d", errors); $finish;
  end"""
    out = run_models(tmp_path, body)
    assert "errors 0" in out, out


# ---------------------------------------------------------------------------------------------
# netlists of compiled designs

CONFIGS = {
    # LUT products of three registers rebuilt as carry-chain multipliers (the 2026-12-02 fault)
    "lut-products-200mhz": dict(mul="lut", target_mhz=200, lanes=2, reduce_unroll=2, fp_pipeline=3),
    # plain flip-flops moved into the multipliers' registers (pnr/dsp_registers)
    "dsp-registers": dict(mul="dsp", lanes=2, reduce_unroll=2, fp_pipeline=3),
    # block RAMs with their output registers (pnr/bram_registers)
    "block-ram": dict(mem_read="sync", lanes=4, fp_pipeline=3),
}


def _netlist(design, tmp_path: Path) -> Path:
    return Path(synthesize(design, netlist=True, workdir=tmp_path / "synth").netlist_path)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_netlist_of_a_design_passes_its_testbench(tmp_path, name):
    M, K = (16, 256) if name == "block-ram" else (6, 10)
    case = designs.gemv_int8(M=M, K=K)
    design = compile_model(*case.outputs, config=HardwareConfig(**CONFIGS[name]))
    netlist = _netlist(design, tmp_path)
    cells = {c["type"] for c in json.loads(netlist.read_text())["modules"]["top"]["cells"].values()}
    assert {"lut-products-200mhz": "CCU2C", "dsp-registers": "MULT18X18D", "block-ram": "DP16KD"}[name] in cells
    check = check_netlist(design, netlist, tmp_path / "gate")
    assert check.passed, check.message
    assert check.cycles == design.cycle_model().total


def bypass_a_register_group(module: dict) -> list[str]:
    """Take a LUT product's operand register group out of a Yosys JSON module (in place): its
    loads read its input. Returns the flip-flops removed."""
    ffs = sorted(n for n, c in module["cells"].items() if c["type"] == "TRELLIS_FF" and ".a_TRELLIS_FF" in n)
    group = [n for n in ffs if n.split(".a_TRELLIS_FF")[0] == ffs[0].split(".a_TRELLIS_FF")[0]]
    for name in group:
        cell = module["cells"].pop(name)
        q, d = cell["connections"]["Q"][0], cell["connections"]["DI"][0]
        for other in module["cells"].values():
            for pin, bits in other["connections"].items():
                if other.get("port_directions", {}).get(pin) == "input":
                    other["connections"][pin] = [d if b == q else b for b in bits]
    return group


def test_a_netlist_without_one_register_group_fails(tmp_path):
    """A product operand's register bypassed: the netlist computes one cycle early, as a wrong
    register count in a rewrite would, and the testbench fails."""
    case = designs.gemv_int8(M=6, K=10)
    design = compile_model(*case.outputs, config=HardwareConfig(**CONFIGS["lut-products-200mhz"]))
    netlist = json.loads(_netlist(design, tmp_path).read_text())
    assert bypass_a_register_group(netlist["modules"]["top"])
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(netlist))
    check = check_netlist(design, broken, tmp_path / "gate")
    assert not check.passed and "FAIL" in check.message, check.message


@pytest.mark.parametrize("broken", [False, True], ids=["right", "register-bypassed"])
def test_a_sweep_point_checks_its_netlist_before_placing_it(tmp_path, isolated_cache, monkeypatch, broken):
    """`timing: {check_netlist: true}`: the row carries the testbench's PASS line and is placed;
    a netlist that fails is a FAIL in stage `netlist`, never placed."""
    import compiler.pnr.gate_sim
    import compiler.pnr.timing
    from compiler.pnr.timing import TimingReport
    from dse.evaluate import Status, evaluate
    from dse.frozen import FrozenMap
    from dse.spec import DesignPoint, parse_spec
    placed = []

    def fake_pnr(netlist_path, target, workdir, timeout=None, **options):
        placed.append(netlist_path)
        return TimingReport(True, 150.0, "LFE5U-25F", "CABGA381", target, freq_mhz=options["freq_mhz"])
    monkeypatch.setattr(compiler.pnr.timing, "place_and_route", fake_pnr)
    if broken:
        real = compiler.pnr.gate_sim.prepare

        def prepare(netlist, target):
            out = real(netlist, target)
            bypass_a_register_group(netlist["modules"][out[0]])
            return out
        monkeypatch.setattr(compiler.pnr.gate_sim, "prepare", prepare)
    spec = parse_spec({"study": "gate", "target": "ecp5", "timing": {"check_netlist": True},
                       "models": [{"name": "g", "builtin": "gemv", "params": {"M": 6, "K": 10}}],
                       "knobs": {"mul": ["lut"], "target_mhz": [200], "lanes": [2], "reduce_unroll": [2],
                                 "fp_pipeline": [3]},
                       "dtypes": ["int8"], "objectives": ["latency_us", "luts"], "search": {"sampler": "grid"}})
    point = DesignPoint("g", "int8", FrozenMap({"mul": "lut", "target_mhz": 200, "lanes": 2, "reduce_unroll": 2,
                                                "fp_pipeline": 3}))
    m = evaluate(spec, point, tmp_path)
    if broken:
        assert m.status is Status.FAIL and m.stage == "netlist" and not placed
        assert "fails the design's testbench" in m.error and "mismatches" in m.error
    else:
        assert m.status is Status.OK and m.fmax_mhz == 150.0 and len(placed) == 1
        assert m.netlist_check.startswith("PASS") and m.netlist_check_s > 0


def test_a_dataflow_netlist_streams_its_samples(tmp_path):
    x, out, _ref = int8_mlp([12, 8, 4])
    design = compile_model(out, config=HardwareConfig(schedule="dataflow", fp_pipeline=3, mul="lut",
                                                                 target_mhz=150), stream=x)
    check = check_netlist(design, _netlist(design, tmp_path), tmp_path / "gate")
    assert check.passed, check.message


def test_a_netlist_with_a_mode_the_models_do_not_hold_is_not_checked(tmp_path):
    """A block RAM whose ports differ in width (not modelled) stops the check with its name: the
    netlist is neither passed nor failed."""
    from compiler.tools import ToolError
    case = designs.gemv_int8(M=16, K=256)
    design = compile_model(*case.outputs, config=HardwareConfig(**CONFIGS["block-ram"]))
    netlist = json.loads(_netlist(design, tmp_path).read_text())
    ram = next(c for c in netlist["modules"]["top"]["cells"].values() if c["type"] == "DP16KD")
    ram["parameters"]["DATA_WIDTH_B"] = "00000000000000000000000000000100"
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(netlist))
    with pytest.raises(ToolError, match="could not be checked: DP16KD .* is not modelled"):
        check_netlist(design, odd, tmp_path / "gate")


@pytest.mark.parametrize("mapping", [0, 1])
def test_a_constant_layer_mapped_area_first_passes_its_testbench(tmp_path, monkeypatch, mapping):
    """A combinational adder network (a constant layer) has its LUTs mapped by ABC's area-oriented
    script with SAT re-mapping, its choices from &synch2 (area.AREA_ABC) or from &dch
    (area.CHOICES_ABC): the netlist each mapping makes computes the layer on the design's own
    inputs."""
    from tinygrad import Tensor, dtypes
    from compiler.synth import area as synth_area
    rng = np.random.default_rng(1)
    W = rng.integers(-2, 2, (12, 12)).astype(np.int8)
    x = Tensor(rng.integers(-2, 2, 12).astype(np.int8)).realize()
    config = HardwareConfig.from_dict({"weights": "constant", "lanes": 12, "reduce_unroll": 12,
                                       "adder_graph": "per_product"})
    design = compile_model(Tensor(W).cast(dtypes.int32) @ x.cast(dtypes.int32), config=config, stream=x,
                           input_ranges={x: (-2, 1)})
    monkeypatch.setattr(synth_area, "ADDER_NETWORK_CELLS", 1)       # that mapping, not abc9's
    flow = synth_area._ADDER_FLOWS["ecp5"][mapping]
    monkeypatch.setitem(synth_area._ADDER_FLOWS, "ecp5", [flow])      # it alone
    area = synthesize(design, netlist=True, workdir=tmp_path / "synth", use_cache=False)
    assert area.fallback.startswith("a combinational adder network") and "&satlut" in area.script
    assert ("&dch" in area.script) == (mapping == 1)
    check = check_netlist(design, Path(area.netlist_path), tmp_path / "gate")
    assert check.passed, check.message
    assert check.cycles == design.cycle_model().total

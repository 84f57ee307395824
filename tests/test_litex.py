"""examples/litex_soc.py: a design exported with `--bus wishbone` added to a LiteX SoC as a
Wishbone peripheral, built to Verilog; then the SoC's Verilog (LiteX's interconnect, the
region decoding, our wrapper and design) runs in Icarus Verilog, where cocotb pokes the
registers and memories through the SoC's bus with no firmware: inputs in, start, the
interrupt, outputs out, compared with the golden outputs (tests/cocotb_bus/bus_tb.py).
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from compiler import export_design

from helpers import bus_gemv_int8 as gemv_int8, check_expected_files, needs_iverilog, pass_line, run_cocotb

ROOT = Path(__file__).resolve().parent.parent

litex = pytest.importorskip("litex", reason="LiteX not installed (the `test` extra installs it)")


def load_example():
    spec = importlib.util.spec_from_file_location("litex_soc", ROOT / "examples" / "litex_soc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@needs_iverilog
def test_the_litex_soc_builds_and_runs_the_design_through_its_bus(tmp_path, monkeypatch):
    example = load_example()
    point = gemv_int8()
    hw = tmp_path / "hw"
    export_design(design=point.design, out_dir=hw, bus="wishbone")
    check_expected_files(hw, point)
    soc_v = example.build(hw, tmp_path / "build")
    text = soc_v.read_text()
    assert "tinyhw_top tinyhw_top(" in text and "module litex_soc" in text
    # the SoC's top as the testbench's top: its Verilog and the export's, one folder
    sim = tmp_path / "sim"
    shutil.copytree(hw, sim)
    for f in soc_v.parent.glob("litex_soc*"):               # the Verilog and its memories' .init files
        shutil.copyfile(f, sim / f.name)
    log = run_cocotb(sim, top="litex_soc", sources=["litex_soc.v", "tinyhw_top.v"], monkeypatch=monkeypatch,
                     env={"TINYHW_BASE": hex(example.TINYHW_ORIGIN), "TINYHW_PORTS": "host,sys_clk,sys_rst",
                          "TINYHW_VIA": "a LiteX SoC"})
    assert f"over wishbone (classic) through a LiteX SoC at {example.TINYHW_ORIGIN:#x}" in pass_line(log)


def test_a_native_export_is_refused_by_the_litex_peripheral(tmp_path):
    example = load_example()
    export_design(design=gemv_int8().design, out_dir=tmp_path)
    with pytest.raises(ValueError, match="exported with bus 'native'; export it with --bus wishbone"):
        example.TinyHW(example.VerilogPlatform(), tmp_path)

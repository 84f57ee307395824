"""Per-unit synthesis (compiler.synth.units, `synthesize(units=True)`, spec `synthesis: units`)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from compiler import HardwareConfig, compile_model
from compiler.synth.area import synthesize
from compiler.synth.units import split_modules, split_units
from compiler.synth.rtlil_text import convert
from dse.models import zoo
from dse.evaluate import EvalContext, evaluate
from dse.spec import DesignPoint, parse_spec
from dse.frozen import FrozenMap


def gemv(dtype: str = "fp16", lanes: int = 2, M: int = 4, K: int = 8):
    built = zoo.ZOO["gemv"].build(dtype, M=M, K=K)
    arrays = zoo.make_inputs(built, 0)
    return compile_model(built.forward(*zoo.input_tensors(built, arrays)), config=HardwareConfig(lanes=lanes))


def scaled(N: int = 8):
    """x * 0.5 + y: one multiplier with a constant operand, one adder without."""
    from tinygrad import Tensor, dtypes
    x, y = (Tensor(np.linspace(-2, s, N, dtype=np.float32), dtype=dtypes.float32).realize() for s in (2, 3))
    return compile_model(x * 0.5 + y)


def test_split_modules_keeps_every_line():
    text = convert(gemv().top)
    head, modules = split_modules(text)
    assert head + "".join(line for m in modules for line in m.lines) == text.rstrip("\n") + "\n"
    assert modules[0].name == "\\top" and any(m.name.endswith(".fp0_wmul") for m in modules)   # fp16: exact products


def test_identical_units_are_cut_out_once_each():
    text = convert(gemv(lanes=2).top)
    split = split_units(text)
    assert split.units and all(u.instances == 2 for u in split.units)       # two lanes, one of each
    assert not re.search(r"^module \\top\.\S*\.fp\d+_", split.top, re.M)    # no unit left in the top
    for u in split.units:
        assert f"attribute \\blackbox 1\nmodule \\{u.name}\n" in split.top
        assert len(re.findall(rf"^\s*cell \\{re.escape(u.name)} ", split.top, re.M)) == 2
        assert u.text.count("module \\top\n") == 1 and "attribute \\top 1\n" in u.text
    # the cut-out text is the unit's own: same cells as the instance module it came from
    _, modules = split_modules(text)
    mul = next(m for m in modules if m.name.endswith(".fp0_wmul"))
    def body(lines):
        return sorted(line for line in lines if line.lstrip().startswith(("cell ", "connect ")))
    assert body(mul.lines) in [body(u.text.splitlines(keepends=True)) for u in split.units]
    assert all(u.name.startswith("unit_") for u in split.units)


def test_the_same_unit_has_one_name_in_every_design():
    """Amaranth numbers a unit's ports in the order its parent connects them, which differs
    between lane counts: the split puts them in name order, so one lane and four share units."""
    names = [{u.name for u in split_units(convert(gemv(lanes=lanes).top)).units} for lanes in (1, 2, 4)]
    assert names[0] == names[1] == names[2]


def test_a_constant_operand_is_inside_its_unit():
    """Amaranth writes x * 0.5's constant inside the multiplier's module (no `b` port): the unit
    synthesised alone folds it, as a flat synthesis does."""
    split = split_units(convert(scaled().top))
    assert sorted(u.instances for u in split.units) == [1, 1]          # the multiplier and the adder
    mul = next(u for u in split.units if "32'00111111000000000000000000000000" in u.text)   # 0.5
    assert not re.search(r"wire width 32 input \d+ \\b$", mul.text, re.M)
    add = next(u for u in split.units if u is not mul)
    assert re.search(r"wire width 32 input \d+ \\b$", add.text, re.M)


def test_a_signed_port_stays_signed_in_the_black_box():
    """int -> float: the converter's input is declared `input N signed \\a`."""
    from tinygrad import Tensor, dtypes
    i = Tensor(np.arange(-4, 4, dtype=np.int32), dtype=dtypes.int32).realize()
    f = Tensor(np.linspace(0, 1, 8, dtype=np.float32), dtype=dtypes.float32).realize()
    split = split_units(convert(compile_model(i.cast(dtypes.float32) + f).top))
    i2f = next(u for u in split.units if re.search(r"wire width 32 input \d+ signed \\a$", u.text, re.M))
    assert re.search(rf"module \\{re.escape(i2f.name)}\n(  wire .*\n)*  wire width 32 input \d+ signed \\a\n",
                     split.top)


@pytest.mark.slow
def test_units_count_the_top_plus_each_unit_times_its_instances(tmp_path, monkeypatch, isolated_cache):
    design = gemv(lanes=2)
    area = synthesize(design, "ecp5", tmp_path / "two", units=True)
    split = split_units(convert(design.top))
    assert area.units == sum(u.instances for u in split.units) == 2 * len(split.units)
    # the sum, from the parts' own `stat -json`
    def cells(folder):
        return json.loads((folder / "stat.json").read_text())["design"]["num_cells_by_type"]
    expected = {k: v for k, v in cells(tmp_path / "two").items() if not k.lstrip("\\").startswith("unit_")}
    for u in split.units:
        for k, v in cells(tmp_path / "two" / "units" / u.name).items():
            expected[k] = expected.get(k, 0) + 2 * v
    assert area.cells == expected
    assert area.luts == expected.get("LUT4", 0) + 2 * expected.get("CCU2C", 0)
    flat = synthesize(design, "ecp5", tmp_path / "flat")
    assert (area.ffs, area.bram, area.dsp) == (flat.ffs, flat.bram, flat.dsp)
    assert area.luts == pytest.approx(flat.luts, rel=0.25)     # abc9 maps each part on its own
    assert area.script.startswith("# per-unit synthesis") and not area.cached

    # four lanes: the same units, from the cache; only the top runs Yosys
    import compiler.synth.area as synth
    runs = []
    real = synth._run_yosys
    monkeypatch.setattr(synth, "_run_yosys", lambda *a, **k: runs.append(k["workdir"]) or real(*a, **k))
    four = synthesize(gemv(lanes=4), "ecp5", tmp_path / "four", units=True)
    assert runs == [tmp_path / "four"] and four.units == 4 * len(split.units)
    with pytest.raises(ValueError, match="writes no netlist"):
        synthesize(design, "ecp5", tmp_path / "n", units=True, netlist=True)


@pytest.mark.slow
def test_a_sweep_row_says_it_came_from_per_unit_synthesis(tmp_path, monkeypatch, isolated_cache):
    spec = parse_spec({"study": "u", "target": "ecp5", "synthesis": "units",
                       "models": [{"name": "g", "builtin": "gemv", "params": {"M": 4, "K": 8}}],
                       "dtypes": ["fp16", "int8"], "objectives": ["cycles", "luts"], "search": {"sampler": "grid"}})
    ctx = EvalContext.from_spec(spec, sim_backend="pysim")
    assert ctx.synthesis == "units"
    row = evaluate(ctx, DesignPoint("g", "fp16", FrozenMap({})), tmp_path / "f")
    assert row.correct and row.fidelity == "synth_units" and row.synth_units >= 2 and row.luts > 0
    assert row.synth_script.startswith("# per-unit synthesis")
    plain = evaluate(ctx, DesignPoint("g", "int8", FrozenMap({})), tmp_path / "i")
    assert plain.fidelity == "synth_units" and plain.synth_units == 0        # nothing to cut out


UNITS_SPEC = {"study": "u", "target": "ecp5", "synthesis": "units",
              "models": [{"name": "g", "builtin": "gemv", "params": {"M": 4, "K": 8}}],
              "dtypes": ["fp16"], "objectives": ["cycles", "luts"], "search": {"sampler": "grid"}}


def test_units_and_flat_rows_are_never_mixed():
    """Per-unit counts are other numbers than flat ones: the evaluation cache keys them apart
    (not the cheap tier, which does not synthesise), a study cannot resume across the modes, and
    the estimator learns from rows of the study's own mode only."""
    from dse.cache import key_material
    from dse.fidelity import _sample
    from dse.study.space import space_fingerprint
    units = parse_spec(UNITS_SPEC)
    flat = parse_spec({k: v for k, v in UNITS_SPEC.items() if k != "synthesis"})
    assert flat.synthesis == "flat" and "synthesis" not in space_fingerprint(flat)
    assert space_fingerprint(units) != space_fingerprint(flat)
    p = DesignPoint("g", "fp16", FrozenMap({}))
    ctx_u, ctx_f = EvalContext.from_spec(units), EvalContext.from_spec(flat)
    assert key_material(ctx_u, p) != key_material(ctx_f, p)
    cheap = {"synthesize": False, "simulate": False}
    assert key_material(EvalContext.from_spec(units, **cheap), p) == key_material(EvalContext.from_spec(flat, **cheap), p)
    row = {"fidelity": "synth_units", "target": "ecp5", "luts": 10, "features": "{\"x\": 1.0}"}
    assert _sample(row, "ecp5", "synth_units") is not None and _sample(row, "ecp5", "synth") is None


def test_validate_says_per_unit(tmp_path, capsys):
    import yaml
    from dse.cli import main
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(UNITS_SPEC))
    assert main(["validate", str(path)]) == 0
    assert "; per-unit synthesis (float units synthesised once each)" in capsys.readouterr().out

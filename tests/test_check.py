"""dse check: thresholds (the spec's gate: or a gate file), baseline Pareto points within a
tolerance, Optuna's hypervolume; exit 0 / 1 (a regression, with a Markdown table) / 2 (bad
input). The last test is the project's own CI gate: a real sweep of configs/ci_gate.yaml
checked against the baseline committed in tests/data/baseline_ci/."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.check import CheckError, check, hypervolumes, load_gate
from dse.cli import main
from dse.report import load_study_results

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tests" / "data" / "baseline_ci"
CI_SPEC = ROOT / "configs" / "ci_gate.yaml"
REGENERATE = ("dse sweep configs/ci_gate.yaml --results /tmp/ci && "
              "cp /tmp/ci/ci_gate/trials.csv /tmp/ci/ci_gate/pareto.csv tests/data/baseline_ci/")


@pytest.fixture
def current(tmp_path) -> Path:
    """A results folder identical to the committed baseline."""
    d = tmp_path / "results" / "ci_gate"
    shutil.copytree(BASELINE, d)
    return d


def edit(results: Path, **scale: float) -> None:
    """Multiply columns of trials.csv (and pareto.csv) by factors: a deliberately worse result."""
    for name in ("trials.csv", "pareto.csv"):
        df = pd.read_csv(results / name)
        for col, f in scale.items():
            df[col] = (df[col] * f).round().astype(int)
        df.to_csv(results / name, index=False)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------
# pass

def test_gate_passes_on_the_committed_baseline(current, capsys):
    code, out, err = run(capsys, current, "--gate", CI_SPEC, "--baseline", BASELINE)
    assert (code, err) == (0, "")
    assert out.startswith("## dse check `ci_gate`: PASS\n")
    assert "| gemv_8x16 | int8 | 4 | 1/1 hold | 2/2 matched | 0.3211 -> 0.3211 (+0.0%) |" in out
    assert "| add_relu_32 | int8 | 4 | 1/1 hold | 2/2 matched | 0.9023 -> 0.9023 (+0.0%) |" in out
    assert "Regressions" not in out
    assert (current / "check.md").read_text() + "\n" == out           # printed, and written for a PR comment


def test_better_results_pass(current, capsys):
    edit(current, luts=0.9, cycles=0.5)
    code, out, _ = run(capsys, current, "--baseline", BASELINE)
    assert code == 0 and "2/2 matched" in out


# ---------------------------------------------------------------------------------------------
# fail (exit 1) with a Markdown table of each regression

def test_inflated_luts_fail_with_exit_1(current, capsys):
    edit(current, luts=1.2)
    code, out, err = run(capsys, current, "--gate", CI_SPEC, "--baseline", BASELINE)
    assert code == 1
    assert err == f"dse check: 8 regressions (table in {current / 'check.md'})\n"
    assert out.startswith("## dse check `ci_gate`: FAIL: 8 regressions\n")
    assert "| check | model | dtype | point | metric | baseline | now | change |" in out
    # the gate's rules, each model's smallest point: gemv's 155 LUTs * 1.2 = 186 > 180, add_relu's 72 * 1.2 = 86 > 85
    assert "| threshold | gemv_8x16 | int8 | #0 mem_read=comb lanes=1 | luts | <= 180 | 186 | +3.3% |" in out
    assert "| threshold | add_relu_32 | int8 | #3 mem_read=comb lanes=1 | luts | <= 85 | 86 | +1.2% |" in out
    # each baseline Pareto point, with the closest point now (the same design, 20% more LUTs)
    assert ("| pareto | gemv_8x16 | int8 | mem_read=comb lanes=2 (baseline #2; closest now #2 mem_read=comb lanes=2) "
            "| luts | 195 | 234 | +20.0% |") in out
    assert ("| pareto | gemv_8x16 | int8 | mem_read=comb lanes=1 (baseline #0; closest now #0 mem_read=comb lanes=1) "
            "| luts | 155 | 186 | +20.0% |") in out
    assert out.count("| pareto |") == 4
    # normalised over baseline and current points together: 20% more LUTs on a narrow front
    assert "| hypervolume | gemv_8x16 | int8 | - | hypervolume (cycles, luts, normalised) | 0.7394 | 0.2441 | -67.0% |" in out
    assert out.count("| hypervolume |") == 2
    assert (current / "check.md").read_text().startswith("## dse check `ci_gate`: FAIL")


def test_tolerance_applies_to_points_and_hypervolume_alike(current, capsys):
    edit(current, luts=1.2)
    code, out, _ = run(capsys, current, "--baseline", BASELINE, "--tolerance", "10")
    assert code == 1 and out.count("0/2 matched") == 2
    assert ("| hypervolume | gemv_8x16 | int8 | - | hypervolume (cycles, luts, normalised) "
            "| 0.7394 (>= 0.3994 within 10%) | 0.2441 | -67.0% |") in out
    code, out, _ = run(capsys, current, "--baseline", BASELINE, "--tolerance", "25")
    assert code == 0 and out.count("2/2 matched") == 2
    assert "| gemv_8x16 | int8 | 4 | - | 2/2 matched | 0.7394 -> 0.2441 (-67.0%; >= 0.0473 needed) |" in out


def test_a_lost_pareto_point_is_reported_with_the_closest_point_now(current, capsys):
    t = pd.read_csv(current / "trials.csv")
    t[t["number"] != 2].to_csv(current / "trials.csv", index=False)     # the fast GEMV is gone
    code, out, _ = run(capsys, current, "--baseline", BASELINE)
    assert code == 1
    assert "| gemv_8x16 | int8 | 3 | - | 1/2 matched | 0.3211 -> 0.2100 (-34.6%) |" in out
    assert ("| pareto | gemv_8x16 | int8 | mem_read=comb lanes=2 (baseline #2; closest now #6 mem_read=sync lanes=2) "
            "| luts | 195 | 200 | +2.6% |") in out
    assert "| hypervolume | gemv_8x16 | int8 |" in out


def test_a_model_without_feasible_points_fails(current, capsys):
    t = pd.read_csv(current / "trials.csv")
    t.loc[t["model"] == "add_relu_32", "feasible"] = False
    t.to_csv(current / "trials.csv", index=False)
    code, out, _ = run(capsys, current, "--gate", CI_SPEC, "--baseline", BASELINE)
    assert code == 1
    assert "| pareto | add_relu_32 | int8 | - | feasible points | 4 | 0 | -100.0% |" in out
    assert "| threshold | add_relu_32 | int8 | - | cycles | <= 40 | no feasible point | - |" in out
    assert "| hypervolume | add_relu_32 | int8 | - | hypervolume (cycles, luts, normalised) | 0.9023 | 0.0000 | -100.0% |" in out


def test_threshold_rules_need_one_point_meeting_every_bound(current, tmp_path, capsys):
    # 65 cycles needs 195 LUTs, 155 LUTs needs 129 cycles: each bound alone holds, both at once do not
    gate = write(tmp_path / "gate.yaml", "- {model: gemv_8x16, cycles_max: 100, luts_max: 190}\n")
    code, out, _ = run(capsys, current, "--gate", gate)
    assert code == 1
    assert "| threshold | gemv_8x16 | int8 | #2 mem_read=comb lanes=2 | luts | <= 190 | 195 | +2.6% |" in out
    assert "| gemv_8x16 | int8 | 4 | 0/1 hold | - | - |" in out
    assert "| add_relu_32 | int8 | 4 | - | - | - |" in out


def test_gate_file_forms_are_equivalent(current, tmp_path):
    results = load_study_results(current)
    as_list = load_gate(write(tmp_path / "a.yaml", "- {luts_max: 400}\n"), results)
    as_map = load_gate(write(tmp_path / "b.yaml", "luts_max: 400\n"), results)
    wrapped = load_gate(write(tmp_path / "c.yaml", "gate: {luts_max: 400}\n"), results)
    assert as_list == as_map == wrapped
    assert check(current, gate=tmp_path / "b.yaml", write=False).passed
    assert not check(current, gate=write(tmp_path / "d.yaml", "cycles_max: 10\n"), write=False).passed


# ---------------------------------------------------------------------------------------------
# bad input (exit 2, one line on stderr)

@pytest.mark.parametrize("text, message", [
    ("- {model: gemv_8x16, lut_max: 300}\n", "{f}: gate[0].lut_max: unknown key; did you mean 'luts_max'?"),
    ("- {model: gemv_9x9, luts_max: 300}\n", "{f}: gate[0].model: unknown model 'gemv_9x9'; did you mean 'gemv_8x16'?"),
    ("- {dtype: int8, luts_max: -1}\n", "{f}: gate[0].luts_max: expected a non-negative integer, got -1"),
    ("luts_max: [300\n", "{f}:2:1: YAML syntax error: expected ',' or ']', but got '<stream end>'"),
    ("luts_max: 1\nluts_max: 2\n", "{f}:2:1: duplicate key 'luts_max' (first given on line 1)"),
    ("[]\n", "{f}: gate: must not be empty"),
    ("", "--gate {f}: the gate file is empty"),
    ("- {dtype: int16, luts_max: 300}\n", "{f}: gate[0].dtype: unknown dtype 'int16'; did you mean 'int8'?"),
    ("fmax_mhz_min: 100\n", "{f}: gate.fmax_mhz_min: 'fmax_mhz' needs place-and-route timing; add 'timing: true' to the spec"),
])
def test_malformed_gate_file_exits_2(current, tmp_path, capsys, text, message):
    gate = write(tmp_path / "gate.yaml", text)
    code, out, err = run(capsys, current, "--gate", gate)
    assert (code, out) == (2, "")
    assert err == "error: " + message.format(f=gate) + "\n"
    assert not (current / "check.md").exists()


def test_bad_input_exits_2(current, tmp_path, capsys):
    cases = [
        ([tmp_path / "nope", "--baseline", BASELINE], f"{tmp_path / 'nope'}: no such results folder (run `dse sweep SPEC` first)"),
        ([current, "--baseline", tmp_path / "nope"], f"--baseline: {tmp_path / 'nope'}: no such results folder (run `dse sweep SPEC` first)"),
        ([current], "nothing to check: give --gate FILE (thresholds) and/or --baseline DIR (Pareto points and "
                    "hypervolume of an earlier run)"),
        ([current, "--baseline", BASELINE, "--tolerance", "-1"], "--tolerance: expected a percentage in [0, 100), got -1.0"),
        ([current, "--gate", tmp_path / "none.yaml"], f"--gate {tmp_path / 'none.yaml'}: file not found"),
        ([current, "--gate", ROOT / "configs" / "int8.yaml"],
         f"--gate {ROOT / 'configs' / 'int8.yaml'}: rule gate[1] (gemv_64x256) matches no model x dtype of {current} "
         f"(gemv_8x16 x int8, add_relu_32 x int8)"),
    ]
    for argv, message in cases:
        code, out, err = run(capsys, *argv)
        assert (code, out, err) == (2, "", f"error: {message}\n"), argv
    nogate = write(tmp_path / "nogate.yaml", "\n".join(line for line in CI_SPEC.read_text().splitlines()
                                                       if not line.startswith(("gate:", "  - {model"))) + "\n")
    assert run(capsys, current, "--gate", nogate)[2] == f"error: --gate {nogate}: the spec has no `gate:` section\n"
    (current / "trials.csv").unlink()
    assert run(capsys, current, "--baseline", BASELINE)[2] == \
        f"error: {current}: no trials.csv (the results to check must be a sweep's)\n"
    with pytest.raises(SystemExit) as e:
        main(["check", str(current), "--tolerance", "many"])
    assert e.value.code == 2


# ---------------------------------------------------------------------------------------------
# hypervolume (Optuna's, on one normalisation of both sets)

def test_hypervolumes():
    base = np.array([[0.0, 10.0], [10.0, 0.0]])
    assert hypervolumes(base, base) == pytest.approx((0.21, 0.21))          # 1.1*0.1*2 - 0.01
    assert hypervolumes(base, base[:1]) == pytest.approx((0.21, 0.11))
    assert hypervolumes(base, np.zeros((0, 2))) == pytest.approx((0.21, 0.0))
    better = np.array([[0.0, 0.0]])
    assert hypervolumes(base, better) == pytest.approx((0.21, 1.21))
    with pytest.raises(CheckError, match=r"--tolerance: expected a percentage in \[0, 100\), got 200"):
        check(ROOT / "nope", baseline=BASELINE, tolerance=200)


# ---------------------------------------------------------------------------------------------
# the project's own CI gate

@pytest.mark.slow
def test_ci_gate_sweep_against_the_committed_baseline(tmp_path, capsys):
    """A real sweep of configs/ci_gate.yaml (Yosys, CXXRTL; the evaluation cache of TINYHW_CACHE
    is content-keyed, so a compiler change is evaluated anew), then `dse check` against the
    committed baseline and `dse report`. A failure here means the compiler got worse on these
    designs: fix it, or, if the change is intended, regenerate the baseline with
    `""" + REGENERATE + """`."""
    assert main(["sweep", str(CI_SPEC), "--results", str(tmp_path), "--progress", "off"]) == 0
    results = tmp_path / "ci_gate"
    capsys.readouterr()
    code = main(["check", str(results), "--gate", str(CI_SPEC), "--baseline", str(BASELINE), "--tolerance", "2"])
    out, err = capsys.readouterr()
    assert code == 0, f"dse check failed; if intended, regenerate the baseline: {REGENERATE}\n{out}{err}"
    assert out.startswith("## dse check `ci_gate`: PASS")
    assert main(["report", str(results)]) == 0
    md = (results / "report" / "report.md").read_text()
    spec_hash = load_study_results(results).spec_hash
    assert spec_hash and f"- **spec hash (SHA-256 of the search space in study.journal)**: {spec_hash}" in md
    assert (results / "report" / "plot_gemv_8x16.png").stat().st_size > 10_000


def test_example_workflow_runs_real_commands():
    """The documented workflow's `dse` lines parse with this CLI (with its env filled in)."""
    import shlex

    import yaml

    from dse.cli import build_parser
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "dse-gate.yml.example").read_text())
    env = wf["env"]
    assert (ROOT / env["SPEC"]).is_file() and (ROOT / env["BASELINE"] / "pareto.csv").is_file()
    runs = [s["run"] for s in wf["jobs"]["gate"]["steps"] if str(s.get("run", "")).startswith("dse ")]
    assert [r.split()[1] for r in runs] == ["sweep", "check", "report"]
    for r in runs:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            argv = [os.path.expandvars(a) for a in shlex.split(r)][1:]
        build_parser().parse_args(argv)


def test_a_baseline_of_pareto_csv_alone(current, tmp_path, capsys):
    """The front is all the baseline checks need."""
    base = tmp_path / "base"
    base.mkdir()
    shutil.copy(BASELINE / "pareto.csv", base)
    code, out, _ = run(capsys, current, "--baseline", base)
    assert code == 0 and out.count("2/2 matched") == 2
    edit(current, cycles=1.5)
    code, out, _ = run(capsys, current, "--baseline", base)
    assert code == 1 and "| cycles | 65 | 98 | +50.8% |" in out


def test_rows_of_several_code_versions_are_said_by_check_and_report(current, capsys):
    """A study resumed after an upgrade mixes rows computed by different code (code_digest):
    both commands say so, and a study of one version says nothing."""
    code, out, _ = run(capsys, current, "--gate", CI_SPEC)
    assert code == 0 and "Mixed code" not in out
    t = pd.read_csv(current / "trials.csv")
    t["code_digest"] = ["a" * 64] * (len(t) - 1) + ["b" * 64]
    t.to_csv(current / "trials.csv", index=False)
    code, out, _ = run(capsys, current, "--gate", CI_SPEC)
    assert code == 0
    assert (f"**Mixed code:** the rows were computed by 2 versions of the code (aaaaaaaaaaaa ({len(t) - 1} trials); "
            "bbbbbbbbbbbb (1 trial)): numbers from different code may not be comparable; "
            "`dse sweep --fresh` recomputes them with this one.") in out
    assert main(["report", str(current)]) == 0
    _, err = capsys.readouterr()
    assert err.startswith("warning: the rows were computed by 2 versions of the code")
    md = (current / "report" / "report.md").read_text()
    assert f"- **code_digest**: MIXED, points are not comparable: {'a' * 64} ({len(t) - 1} trials)" in md

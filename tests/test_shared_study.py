"""A study as users meet it damaged or shared (dse/study/journal.py, locks.py, take.py,
dse/results_csv.py): a journal whose last record a kill, a full disk or a power loss cut short;
a journal damaged otherwise; results files cut short; two `dse sweep`s of one study at once, and
one of them SIGKILLed midway.

The journal and CSV tests run in-process with a stand-in for Yosys (as test_sweep does). The
tests of whole `dse sweep` processes use tests/fake_synth_dse.py (the same command with that
stand-in) and a user model whose build sleeps, so that two processes overlap: what they test is
the driver, and they cost a few seconds of CPU, not Yosys' minutes."""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml

from compiler.synth.area import AreaReport
from dse.cli import main
from dse.report import load_study_results
from dse.results import load_results, pareto_rows
from dse.results_csv import ResultsFileError, intact_text
from dse.spec import load_spec
from dse.sweep import SweepOptions, sweep

ROOT = Path(__file__).resolve().parent.parent
FAKE_DSE = Path(__file__).resolve().parent / "fake_synth_dse.py"

SMALL = {"study": "t", "target": "ecp5",
         "models": [{"name": "gemv_4x8", "builtin": "gemv", "params": {"M": 4, "K": 8}},
                    {"name": "add_8", "builtin": "elementwise", "params": {"N": 8}}],
         "dtypes": ["int8"], "knobs": {"mem_read": ["sync", "comb"]}, "objectives": ["cycles", "luts"],
         "search": {"sampler": "grid", "seed": 0}}


@pytest.fixture
def fake_synth(monkeypatch):
    calls: list[str] = []

    def synthesize(design, target="ecp5", workdir=None, timeout=600, **options):
        calls.append(design.config.mem_read)
        comb = design.config.mem_read == "comb"
        return AreaReport(target=target, luts=100 * len(design.kernels) + (40 if comb else 0), ffs=50, bram=0,
                          lutram=0, dsp=1, yosys_version="fake yosys", script="fake", seconds=0.0)
    monkeypatch.setattr("compiler.synth.area.synthesize", synthesize)
    return calls


def _spec(tmp_path: Path, d: dict = SMALL):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return load_spec(path)


def _options(root: Path, cache: Path, **kw) -> SweepOptions:
    return SweepOptions(results_root=root, cache_dir=cache, sim_backend="pysim", progress="off", **kw)


def _trials(journal: Path, name: str = "t"):
    """The study's trials as Optuna's own reader sees the file (it skips a torn last line)."""
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    return optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(str(journal)))).trials


def _trials_of(data: bytes, name: str = "t"):
    """The trials of a journal's bytes (read from a copy)."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "j").write_bytes(data)
        return _trials(Path(tmp) / "j", name)


def _point(t) -> tuple:
    return tuple(sorted(t.params.items()))


def _complete(trials) -> dict[int, tuple]:
    return {t.number: (_point(t), tuple(t.values)) for t in trials if t.state.name == "COMPLETE"}


def _cuts(full: bytes) -> list[tuple[str, int]]:
    """Offsets to cut a finished journal at: between records (after a line end, the empty file
    included) and inside records (the issue's 37 bytes from the end, 1 byte into a record, the
    middle of a record, a record whole but for its line end)."""
    ends = [i + 1 for i, b in enumerate(full) if b == ord("\n")]
    starts = [0] + ends[:-1]
    n = len(ends)
    picks = sorted({0, n // 4, n // 2, 3 * n // 4, n - 2})
    cuts = [("between", 0)] + [("between", ends[k]) for k in picks]
    cuts += [("inside", len(full) - 37), ("inside", starts[n // 3] + 1), ("inside", (starts[n // 2] + ends[n // 2]) // 2),
             ("inside", (starts[-1] + ends[-1]) // 2), ("line end", len(full) - 1)]
    return cuts


@pytest.mark.slow            # 11 resumes of a study: ~5 s
def test_a_journal_cut_at_any_offset_resumes_and_loses_no_complete_trial(tmp_path, fake_synth, capsys):
    spec = _spec(tmp_path)
    cache = tmp_path / "cache"
    sweep(spec, _options(tmp_path / "first", cache))
    full = (tmp_path / "first" / "t" / "study.journal").read_bytes()
    assert len(fake_synth) == 4
    capsys.readouterr()
    cuts = _cuts(full)
    assert len(cuts) == 11 and sum(kind == "inside" for kind, _ in cuts) == 4
    for i, (kind, offset) in enumerate(cuts):
        root = tmp_path / f"cut{i}"
        journal = root / "t" / "study.journal"
        journal.parent.mkdir(parents=True)
        journal.write_bytes(full[:offset])
        before = _complete(_trials(journal)) if offset else {}
        r = sweep(spec, _options(root, cache))
        err = capsys.readouterr().err
        where = f"cut {kind} at byte {offset} of {len(full)}"

        trials = _trials(journal)
        after = _complete(trials)
        points = Counter(p for p, _ in after.values())
        assert len(points) == 4 and set(points.values()) == {1}, where      # every point once: no duplicate
        assert all(after.get(n) == v for n, v in before.items()), where       # no COMPLETE trial lost
        assert (r.evaluated, r.budget, r.ran - r.cached) == (4, 4, 0), where   # the rest from the cache
        assert len(fake_synth) == 4, where

        torn = list(journal.parent.glob("study.journal.torn-*"))
        notes = [line for line in err.splitlines() if line.startswith("note: ")]
        if kind == "inside":
            line_start = full.rfind(b"\n", 0, offset) + 1
            assert [p.read_bytes() for p in torn] == [full[line_start:offset]], where
            assert len(notes) == 1 and "cut short" in notes[0] and torn[0].name in notes[0], where
        elif kind == "line end":
            assert not torn and r.ran == 0, where                            # nothing dropped, nothing re-run
            assert notes == [f"note: {journal}: its last record had lost its line end (a write cut short): "
                             "restored, nothing dropped"]
        else:
            assert not torn and not notes, where
        df = load_results(root / "t")
        assert (df["status"] == "OK").sum() == 4 and len(df) == len(trials), where


def test_the_issues_cut_names_what_was_dropped(tmp_path, fake_synth, capsys):
    """37 bytes cut from a finished study's journal (the issue's example): its last record is the
    outcome of the last trial; the note says so, and that trial's point runs again."""
    spec = _spec(tmp_path)
    sweep(spec, _options(tmp_path / "results", tmp_path / "cache"))
    journal = tmp_path / "results" / "t" / "study.journal"
    os.truncate(journal, journal.stat().st_size - 37)
    capsys.readouterr()
    argv = ["sweep", str(tmp_path / "spec.yaml"), "--results", str(tmp_path / "results"), "--cache-dir",
            str(tmp_path / "cache"), "--sim", "pysim", "--progress", "off"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    (torn,) = journal.parent.glob("study.journal.torn-*")
    assert err == (f"note: {journal}: its last record was cut short (a write interrupted by a kill, a full disk or a "
                   f"power loss): dropped {torn.stat().st_size} bytes (the state of trial 3), kept in {torn.name}; "
                   "every other record is intact\n")
    assert out.startswith("study 't': 4/4 trials; this run 1 in ") and "(1 from the cache, 0 failed)" in out
    df = load_results(tmp_path / "results" / "t")
    assert list(df["status"]) == ["OK", "OK", "OK", "INTERRUPTED", "OK"]       # trial 3's outcome was torn


def test_a_torn_record_a_later_write_was_glued_to_is_cut_out(tmp_path, fake_synth, capsys):
    """The journal a writer that did not repair first leaves: the torn bytes, then a whole record
    on the same line, then more records (what `dse sweep` before this fix did to a torn journal;
    Optuna's reader then fails at that line)."""
    spec = _spec(tmp_path)
    sweep(spec, _options(tmp_path / "results", tmp_path / "cache"))
    journal = tmp_path / "results" / "t" / "study.journal"
    full = journal.read_bytes()
    lines = full.split(b"\n")[:-1]
    attr = next(line for line in lines if line.startswith(b'{"op_code":2,'))     # a study attribute, again
    torn = lines[-1][:80]
    journal.write_bytes(b"".join(line + b"\n" for line in lines[:-1]) + torn + attr + b"\n" + lines[-1] + b"\n")
    capsys.readouterr()
    assert main(["report", str(journal.parent)]) == 0                  # read without it, the file left alone
    assert "1 record(s) cut short, read without them" in capsys.readouterr().err
    r = sweep(spec, _options(tmp_path / "results", tmp_path / "cache"))
    (side,) = journal.parent.glob("study.journal.torn-*")
    assert side.read_bytes() == torn
    assert (r.evaluated, r.ran) == (4, 0)              # the last trial's outcome was written again whole
    assert Counter(p for p, _ in _complete(_trials(journal)).values()) == Counter(
        p for p, _ in _complete(_trials_of(full)).values())


def test_other_damage_is_one_error_and_fresh_sets_the_file_aside(tmp_path, fake_synth, capsys):
    spec = _spec(tmp_path)
    sweep(spec, _options(tmp_path / "results", tmp_path / "cache"))
    journal = tmp_path / "results" / "t" / "study.journal"
    lines = journal.read_bytes().split(b"\n")
    damaged = b"\n".join(lines[:10] + [b"this is not a record"] + lines[10:])
    journal.write_bytes(damaged)
    capsys.readouterr()
    argv = ["sweep", str(tmp_path / "spec.yaml"), "--results", str(tmp_path / "results"), "--cache-dir",
            str(tmp_path / "cache"), "--sim", "pysim", "--progress", "off"]
    message = (f"error: {journal}: line 11 is not an Optuna journal record ('this is not a record'): the study "
               "cannot be read past it. `dse sweep SPEC --fresh` sets it aside and starts over (points already "
               f"evaluated come back from the evaluation cache); {journal.parent / 'trials.csv'} keeps the 4 rows "
               "of the last run\n")
    assert main(argv) == 2
    assert capsys.readouterr() == ("", message)
    assert main(["report", str(journal.parent)]) == 2
    assert capsys.readouterr().err == message
    assert journal.read_bytes() == damaged                              # refused, and nothing touched

    assert main(argv + ["--fresh"]) == 0
    out, err = capsys.readouterr()
    (aside,) = journal.parent.glob("study.journal.damaged-*")
    assert aside.read_bytes() == damaged
    assert err == (f"note: --fresh: {journal} is damaged beyond a torn record; set aside as {aside.name}, "
                   "starting over\n")
    assert "4/4 trials; this run 4" in out and "(4 from the cache, 0 failed)" in out


HOLD_THE_JOURNAL_LOCK = """
import sys, time
from pathlib import Path
from dse.study.journal import FlockJournalLock
FlockJournalLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_a_writer_killed_holding_the_journal_lock_holds_nobody_up(tmp_path):
    """Killed inside an append (the moment a torn record is made), with the journal's path
    relative as `dse sweep` has it by default: the next sweep repairs the record and completes
    (with Optuna's own lock it waited forever: the lock, a symlink to a relative path, dangles,
    and Optuna's wait loop retries it without end)."""
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SMALL, sort_keys=False))
    env = {**os.environ, "TINYHW_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(FAKE_DSE), "sweep", "spec.yaml", "--sim", "pysim", "--progress", "off",
           "--results", "results"]
    assert subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, timeout=120).returncode == 0
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_JOURNAL_LOCK, "results/t/study.journal"], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    holder.kill()
    holder.wait()
    journal = tmp_path / "results" / "t" / "study.journal"
    os.truncate(journal, journal.stat().st_size - 37)          # what it was writing, cut short
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("study 't': 4/4 trials; this run 1 in ")
    assert "its last record was cut short" in again.stderr


def test_what_counts_as_a_torn_record():
    """A prefix of a record, or zero bytes (a power loss), is torn; anything else is damage."""
    from dse.study.journal import JournalError, scan
    a = b'{"op_code":2,"worker_id":"w-1","study_id":0,"user_attr":{"k":1}}'
    b = b'{"op_code":6,"worker_id":"w-1","trial_id":4,"state":1,"values":[1.0]}'
    found = scan(Path("j"), a + b"\n\0\0\0\n\n" + b[:20] + a + b"\n" + b[:45])
    assert found.kept == a + b"\n" + a + b"\n"
    assert [(t.line, t.glued, t.describe()) for t in found.torn] == [
        (2, False, "zero bytes"), (3, False, "an empty line"), (4, True, "the state of a trial"),
        (5, False, "the state of a trial")]               # b[:45] ends in "trial_id":4, cut or not
    assert scan(Path("j"), b[:46]).torn[0].describe(lambda trial_id: trial_id + 10) == "the state of trial 14"
    whole = scan(Path("j"), a + b"\n" + b)                     # only the line end was lost
    assert whole.kept == a + b"\n" + b + b"\n" and whole.newline_restored and not whole.torn
    for bad, line in ((a + b"\nnot json\n" + a + b"\n", 2), (a + b"\n" + b'{"op_code":99}\n', 2),
                      (a + b"\n" + b"xx" + a + b"\n", 2), (a + b"\ngarbage", 2)):
        with pytest.raises(JournalError, match=rf"^j: line {line} is not an Optuna journal record"):
            scan(Path("j"), bad)


# ---------------------------------------------------------------------------------------------
# results files cut short

def test_a_results_csv_cut_short_is_read_without_its_torn_row(tmp_path, fake_synth, capsys):
    spec = _spec(tmp_path)
    r = sweep(spec, _options(tmp_path / "results", tmp_path / "cache"))
    csv = r.results_dir / "trials.csv"
    whole = csv.read_bytes()
    full = load_results(r.results_dir)
    last_row = whole.rstrip(b"\n").rfind(b"\n") + 1
    for cut, rows in ((len(whole) - 5, 3), (last_row + 1, 3), (last_row, 3), (len(whole), 4)):
        csv.write_bytes(whole[:cut])
        capsys.readouterr()
        df = load_results(r.results_dir)
        assert df.equals(full.iloc[:rows]), cut
        err = capsys.readouterr().err
        if cut > last_row and cut < len(whole):
            assert err == (f"note: {csv}: its last row was cut short ({cut - last_row} bytes without a line end): "
                           "read without it; run `dse sweep SPEC` again: it writes trials.csv, pareto.csv and "
                           "pareto.md from the study, evaluating nothing\n")
        else:
            assert err == ""
    # a pareto.csv alone (a baseline that keeps only the front), cut short
    base = tmp_path / "baseline"
    base.mkdir()
    pareto = (r.results_dir / "pareto.csv").read_bytes()
    (base / "pareto.csv").write_bytes(pareto[:-3])
    assert len(load_study_results(base).trials) == len(pd.read_csv(io.BytesIO(pareto))) - 1
    assert "pareto.csv: its last row was cut short" in capsys.readouterr().err

    # a row short of fields inside the file is damage, not a torn write
    header, first, *rest = whole.split(b"\n")
    csv.write_bytes(b"\n".join([header, first.rsplit(b",", 3)[0]] + rest))
    with pytest.raises(ResultsFileError, match=r"trials.csv: record 2 has \d+ fields, the header \d+: the file is "
                                               r"damaged; run `dse sweep SPEC` again"):
        load_results(r.results_dir)
    assert main(["report", str(r.results_dir)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {csv}: record 2 has ")
    assert main(["sweep", str(tmp_path / "spec.yaml"), "--results", str(tmp_path / "results"), "--cache-dir",
                 str(tmp_path / "cache"), "--sim", "pysim", "--progress", "off"]) == 0
    assert load_results(r.results_dir).equals(full)                     # written again from the study


def test_a_row_cut_inside_a_quoted_field_is_torn():
    whole = b'number,notes,luts\n0,"two\nlines",12\n1,"three\nlines\nhere",34\n'
    assert intact_text(Path("x.csv"), whole) == (whole.decode(), 0)
    cut = whole.index(b"lines\nhere") + 6                 # just after a line end inside the quotes
    kept = 'number,notes,luts\n0,"two\nlines",12\n'
    assert intact_text(Path("x.csv"), whole[:cut]) == (kept, cut - len(kept))
    with pytest.raises(ResultsFileError, match="cut short inside its header line"):
        intact_text(Path("x.csv"), b"number,no")
    assert intact_text(Path("x.csv"), "n,é\n1,é".encode()[:-1]) == ("n,é\n", 3)     # a character cut in two


# ---------------------------------------------------------------------------------------------
# two `dse sweep` processes on one study

SLOW_MODEL = """
import time

def build(dtype, N=4):
    time.sleep(0.5)             # slow enough for two sweeps to overlap, and no CPU spent
    return {"x": ((N,), dtype)}, lambda x: x + 1
"""

TWO = {"study": "two", "target": "ecp5", "models": [{"name": "s", "source": "slow.py:build"}],
       "dtypes": ["int8", "int16"], "knobs": {"mem_read": ["sync", "comb"], "lanes": [1, 2]},
       "objectives": ["cycles", "luts"], "search": {"sampler": "grid", "seed": 0}}


def _start_two(tmp_path: Path) -> tuple[list[subprocess.Popen], Path]:
    (tmp_path / "slow.py").write_text(SLOW_MODEL)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(TWO, sort_keys=False))
    env = {**os.environ, "TINYHW_CACHE": str(tmp_path / "cache"), "TINYHW_FAKE_SYNTH_LOG": str(tmp_path / "synth.log"),
           "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(FAKE_DSE), "sweep", "spec.yaml", "--sim", "pysim", "--progress", "lines",
           "--results", "results"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) for _ in range(2)]
    return procs, tmp_path / "results" / "two"


def _check_outputs_agree(results: Path, trials) -> pd.DataFrame:
    """trials.csv is the storage's trials, pareto.csv its front, pareto.md says the same counts."""
    df = load_results(results)
    assert sorted(df["number"]) == sorted(t.number for t in trials)
    assert dict(zip(df["number"], df["trial_state"])) == {t.number: t.state.name for t in trials}
    spec = load_spec(results.parent.parent / "spec.yaml")
    assert pareto_rows(df, spec)["number"].tolist() == pd.read_csv(results / "pareto.csv")["number"].tolist()
    ok = int((df["status"] == "OK").sum())
    assert f"{len(df)} trials: {ok} OK, {len(df) - ok} failed or interrupted, " in (results / "pareto.md").read_text()
    return df


def _ran(out: str) -> int:
    return int(out.split("; this run ", 1)[1].split(" ", 1)[0])


@pytest.mark.slow
def test_two_sweeps_started_together_evaluate_every_point_once(tmp_path):
    procs, results = _start_two(tmp_path)
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "Traceback" not in err, err
        assert out.startswith("study 'two': 8/8 trials; this run "), out      # the study's count, in both
    assert sorted(_ran(out) for out, _ in outs)[0] >= 1                         # both took part
    assert sum(_ran(out) for out, _ in outs) == 8

    trials = _trials(results / "study.journal", "two")
    assert len(trials) == 8 and all(t.state.name == "COMPLETE" for t in trials)
    assert len({_point(t) for t in trials}) == 8                                # duplicates: 0
    assert len((tmp_path / "synth.log").read_text().splitlines()) == 8          # each point evaluated once
    df = _check_outputs_agree(results, trials)
    assert (df["status"] == "OK").all() and not df["cached"].any()


@pytest.mark.slow
def test_a_sweep_killed_midway_beside_another_loses_nothing_and_charges_nothing(tmp_path):
    """One of two sweeps SIGKILLed (its process group, as a CI time-out does) while evaluating:
    the other takes over its point and completes the study, every point COMPLETE once, nothing
    charged to a point (the kill test's rules)."""
    procs, results = _start_two(tmp_path)
    victim, survivor = procs
    journal = results / "study.journal"
    deadline = time.monotonic() + 120
    killed = None
    try:
        while time.monotonic() < deadline and killed is None:
            time.sleep(0.2)
            if not journal.exists():
                continue
            trials = _trials(journal, "two")
            done = [t for t in trials if t.state.name == "COMPLETE"]
            # a trial in flight whose point is whole: one killed between the sampler's suggestions
            # has no point yet, and so none to take over
            mine = [t for t in trials if t.state.name == "RUNNING" and done and set(t.params) == set(done[0].params)
                    and f"-{victim.pid}-" in str(t.system_attrs.get("tinyhw:run"))]
            if len(done) >= 2 and mine:
                os.killpg(victim.pid, signal.SIGKILL)
                killed = mine[0].number
        assert killed is not None, "the sweep to kill never had a trial in flight after two were done"
        out, err = survivor.communicate(timeout=300)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert victim.returncode == -signal.SIGKILL
    assert survivor.returncode == 0 and "Traceback" not in err, err
    assert out.startswith("study 'two': 8/8 trials; this run "), out

    trials = _trials(journal, "two")
    complete = [_point(t) for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 8 and len(set(complete)) == 8                       # nothing lost, duplicates: 0
    dead = trials[killed]
    assert dead.state.name == "FAIL" and dead.user_attrs.get("interrupted") is True
    assert _point(dead) in complete                                             # its point taken over
    assert not any(t.user_attrs.get("died") for t in trials)                    # charged to no point
    assert not any(t.user_attrs.get("stage") == "worker" for t in trials)       # nothing given up
    assert sum(t.state.name != "COMPLETE" for t in trials) == 1                 # only the killed trial
    df = _check_outputs_agree(results, trials)
    assert df.set_index("number").loc[killed, "status"] == "INTERRUPTED"

    again = subprocess.run([sys.executable, str(FAKE_DSE), "sweep", "spec.yaml", "--sim", "pysim", "--progress", "off",
                            "--results", "results"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "TINYHW_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)})
    assert again.returncode == 0 and again.stdout.startswith("study 'two': 8/8 trials; this run 0 in ")

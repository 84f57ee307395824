"""compiler.tools.run_tool: an external tool's output reaches its log while it runs, and a tool
that fails, times out or is cancelled keeps what it printed in the log and in its ToolError."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from compiler.tools import CANCEL, ToolError, cores, run_tool

WAITS_FOR_GO = """
import pathlib, sys, time
print("placing", flush=True)
while not pathlib.Path("go").exists():
    time.sleep(0.05)
print("routed")
"""


def test_the_log_grows_while_the_tool_runs(tmp_path: Path):
    done: dict = {}
    worker = threading.Thread(target=lambda: done.setdefault(
        "run", run_tool([sys.executable, "-c", WAITS_FOR_GO], cwd=tmp_path, log_name="tool.log", timeout=60)))
    worker.start()
    deadline = time.monotonic() + 30
    while "placing" not in _text(tmp_path / "tool.log"):      # printed, the tool still waiting
        assert time.monotonic() < deadline, "the log stayed empty while the tool ran"
        time.sleep(0.05)
    assert worker.is_alive()
    (tmp_path / "go").touch()
    worker.join(30)
    assert done["run"].output.split() == ["placing", "routed"]
    assert _text(tmp_path / "tool.log").split() == ["placing", "routed"]


def test_a_tool_that_times_out_keeps_its_output(tmp_path: Path):
    script = "import time; print('iter=1 overused=12', flush=True); time.sleep(30)"
    with pytest.raises(ToolError) as err:
        run_tool([sys.executable, "-c", script], cwd=tmp_path, log_name="tool.log", timeout=2)
    assert err.value.reason == "timed out after 2 s"
    assert "iter=1 overused=12" in err.value.log_tail
    assert "iter=1 overused=12" in _text(err.value.log_path)


def test_a_failing_tool_names_its_exit_code_and_output(tmp_path: Path):
    script = "import sys; print('ERROR: no bel for cell x', flush=True); sys.exit(3)"
    with pytest.raises(ToolError) as err:
        run_tool([sys.executable, "-c", script], cwd=tmp_path, log_name="tool.log")
    assert err.value.reason == "exited with code 3"
    assert "ERROR: no bel for cell x" in err.value.log_tail
    assert err.value.log_path == tmp_path / "tool.log"



def test_a_tool_started_under_a_cancel_event_is_killed_when_it_is_set(tmp_path: Path):
    """dse.evaluate's early synthesis: its thread sets CANCEL, and a stage that raises in the main
    thread stops the Yosys run nothing will read."""
    script = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    cancel, seen = threading.Event(), {}

    def work():
        CANCEL.set(cancel)          # this thread's context only
        t0 = time.monotonic()
        try:
            run_tool([sys.executable, "-c", script], cwd=tmp_path, log_name="tool.log", timeout=120)
        except ToolError as exc:
            seen["error"], seen["seconds"] = exc, time.monotonic() - t0

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + 30
    while not _text(tmp_path / "tool.log").strip():
        assert time.monotonic() < deadline, "the tool never started"
        time.sleep(0.05)
    pid = int(_text(tmp_path / "tool.log").split()[0])
    cancel.set()
    worker.join(30)
    assert seen["error"].reason == "cancelled" and seen["seconds"] < 30
    assert not Path(f"/proc/{pid}").exists(), "the cancelled tool still runs"
    assert CANCEL.get() is None     # the main thread's tools were never cancellable


def test_cores_is_what_this_process_may_use():
    import os
    assert 1 <= cores() <= (os.cpu_count() or 1)


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""

"""The sweep's progress display: trials done, failures, cache hits, ETA and the best feasible
point per objective so far.

On a terminal it is a tqdm bar (on stderr):

    gemv  62%|██████▏   | 25/40 [01:10<00:42, fail 4 cached 9 | cycles 12545 (int8 lanes=8), luts 806 (int8 lanes=1)]

elsewhere (CI logs, pipes) one line per trial, so a log shows what happened:

    [25/40] #24 gemv_128x784 int8 mem_read=sync: OK cycles=100609 luts=806 (8.1 s) | fail 4, cached 9, ETA 0:00:42

A multi-fidelity sweep (dse.fidelity) also counts the points estimated, synthesised and skipped,
and why each skipped one was (dse.fidelity.SKIP_KINDS):

    [412/11664] #411 jet int8 ...: OK ... (estimated: not synthesised) (0.1 s) | estimated 412, synthesised 23,
        skipped 389 (dominated 350, tolerance 30, infeasible 9), fail 0, cached 0, ETA 0:21:10
"""
from __future__ import annotations

import collections
import datetime
import sys
import time
from typing import Any, Sequence, TextIO


RECENT = 200
"""Trials the ETA takes its pace from (dse.progress.Progress.eta)."""


def _fmt(v: float) -> str:
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.4g}"


def _knobs(knobs: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in knobs.items())


class Progress:
    """`update(event)` once per finished trial (events come from dse.study.trial.run_asked_trial)."""

    def __init__(self, total: int, initial: int, objectives: Sequence, mode: str = "auto",
                 n_jobs: int = 1, stream: TextIO | None = None, desc: str = "sweep"):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode = mode
        self.total, self.done, self.start_done = total, initial, initial
        self.objectives = list(objectives)
        self.n_jobs = n_jobs
        self.failed = self.cached = 0
        self.synthesized = 0                 # multi-fidelity: points synthesised, and skipped by why
        self.skipped: dict[str, int] = {}
        self.best: list[tuple[float, dict[str, Any]] | None] = [None] * len(self.objectives)
        self.t0 = time.monotonic()
        self.finished: collections.deque[float] = collections.deque(maxlen=RECENT + 1)   # when each ended
        self.bar = None
        if mode == "bar":
            from tqdm.auto import tqdm
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="trial", file=self.stream,
                            dynamic_ncols=True, smoothing=0.1)

    def update(self, event: dict[str, Any]) -> None:
        """`event["study_done"]`, when given, is the study's count (other runs' trials included)."""
        before = self.done
        self.finished.append(time.monotonic())
        self.done = max(self.done + 1, event.get("study_done") or 0)
        self.failed += event["status"] != "OK"
        self.cached += bool(event.get("cached"))
        if "synthesized" in event:
            self.synthesized += bool(event["synthesized"])
            if event.get("skipped"):
                self.skipped[event["skipped"]] = self.skipped.get(event["skipped"], 0) + 1
        if event.get("feasible") and event.get("values"):
            for i, (o, v) in enumerate(zip(self.objectives, event["values"])):
                cur = self.best[i]
                better = cur is None or (v > cur[0] if str(o.direction) == "maximize" else v < cur[0])
                if better:
                    self.best[i] = (v, event)
        if self.bar is not None:
            self.bar.set_postfix_str(self.postfix(), refresh=False)
            self.bar.update(self.done - before)
        elif self.mode == "lines":
            self._print(self.line(event))

    def fidelity(self) -> str:
        """Multi-fidelity counts: `estimated 412, synthesised 23, skipped 389 (dominated 350, tolerance 30,
        infeasible 9)` ("" in a full sweep)."""
        ran = self.synthesized + sum(self.skipped.values())
        if not ran:
            return ""
        why = ", ".join(f"{k} {n}" for k, n in sorted(self.skipped.items(), key=lambda kv: -kv[1]))
        return (f"estimated {ran}, synthesised {self.synthesized}, skipped {sum(self.skipped.values())}"
                + (f" ({why})" if why else ""))

    def postfix(self) -> str:
        best = ", ".join(f"{o.metric} {_fmt(b[0])} ({b[1]['dtype']} {_knobs(b[1]['knobs'])})".replace(" )", ")")
                         for o, b in zip(self.objectives, self.best) if b is not None)
        counts = self.fidelity()
        return (f"fail {self.failed} cached {self.cached}" + (f" {counts}" if counts else "")
                + (f" | {best}" if best else ""))

    def eta(self) -> str:
        """The trials left at the pace of this run's last RECENT trials (all of them at first). A
        multi-fidelity grid queues its likely front first, so its early trials are syntheses and
        its late ones mostly skips: the pace of the whole run so far overstated the time left
        (on configs/jet_space.yaml the pace of trials grew about threefold within the first hour)."""
        left = self.total - self.done
        if left <= 0 or not self.finished:
            return "0:00:00"
        if len(self.finished) > RECENT:
            since, trials = self.finished[0], RECENT
        else:
            since, trials = self.t0, len(self.finished)
        return str(datetime.timedelta(seconds=round((time.monotonic() - since) / trials * left)))

    def line(self, event: dict[str, Any]) -> str:
        what = f"#{event['number']} {event['model']} {event['dtype']} {_knobs(event['knobs'])}".rstrip()
        status = event["status"]
        if event.get("values") is not None:
            status += " " + " ".join(f"{o.metric}={_fmt(v)}" for o, v in zip(self.objectives, event["values"]))
            if not event.get("feasible"):
                status += " (infeasible)"
        if event.get("estimated"):
            status += " (estimated: not synthesised)"
        if event.get("error"):
            status += f" [{event.get('stage') or '?'}] {event['error']}"
        cached = " cached" if event.get("cached") else ""
        counts = self.fidelity()
        return (f"[{self.done}/{self.total}] {what}: {status} ({event.get('seconds', 0):.1f} s{cached}) "
                f"| {counts + ', ' if counts else ''}fail {self.failed}, cached {self.cached}, ETA {self.eta()}")

    def message(self, text: str) -> None:
        if self.mode == "off":
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            self._print(text)

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

"""Rich progress bars on stderr for every step longer than a couple of seconds: training (step, ETA, the
labelled reward and clipped-token fraction, and which phase it is in), the cold start, evals.

A sweep's job that runs beside others (`side_by_side`, set by study/job.py in its worker) draws no live bar:
two processes' bars would redraw one terminal line in turn, and a job's own lines would be glued to the other's
bar. Its bars print whole lines instead, each opening with the job's label (`job 3/6 gspo s0: train 5/20 ...`),
about 20 per bar, and its log lines carry the same label.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from gspo.vocab.metrics import CLIP_TOKEN_FRAC, REWARD_MEAN

# rich estimates the speed over its last 30 s by default: with steps slower than that the ETA would read
# -:--:-- for most of a run; over the whole run it is there from the second step
_WHOLE_RUN_S = 7 * 24 * 3600.0
LINES_PER_BAR = 20  # a side-by-side job's bar: about this many lines from start to end
_JOB = {"label": None}  # the label of this process's sweep job while it runs beside others (None: live bars)


@contextmanager
def side_by_side(label: str):
    """While a sweep job runs beside other jobs: its bars are labelled lines, its log lines labelled too."""
    _JOB["label"] = label
    try:
        yield
    finally:
        _JOB["label"] = None


def _line(text: str) -> None:
    """One whole line on stderr in one write: two jobs' lines never share a line."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class Progress:
    """A bar `label` from `start` to `total`; `advance(row)` moves it one step and shows `stats(row)`."""

    def __init__(self, total: int, start: int = 0, *, enabled: bool = True, label: str = "train", stats=None,
                 clock=None):
        """`stats`: the row's numbers as text (default: the training step's); `clock`: rich's get_time."""
        self.job = _JOB["label"]
        self.enabled = enabled and total > start and self.job is None
        self.lines = enabled and total > start and self.job is not None
        self.total, self.done, self.since, self.every = total, start, time.monotonic(), max(1, total // LINES_PER_BAR)
        self.stats = stats or train_stats
        self.bar = RichProgress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[stats]}"), disable=not self.enabled,
            console=Console(stderr=True),  # stdout stays for results (the run directory)
            speed_estimate_period=_WHOLE_RUN_S, get_time=clock,
        )
        self.label = label
        self.task = self.bar.add_task(label, total=total, completed=start, stats="")
        self.task_start = start

    def __enter__(self) -> Progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def wrap(self, log):
        """A logger that prints above the live bar instead of through it (plain `log` when disabled)."""
        if self.job is not None:
            return lambda message: log(f"{self.job}: {message}")
        if not self.enabled:
            return log
        return lambda message: self.bar.console.print(message, markup=False, highlight=False, soft_wrap=True)

    def phase(self, what: str | None) -> None:
        """Say what the bar is doing now (`eval`: a held-out eval between steps); None: its own label."""
        self.bar.update(self.task, description=f"{self.label} ({what})" if what else self.label)

    def advance(self, row: dict | None = None, by: int = 1) -> None:
        self.bar.update(self.task, advance=by, stats=self.stats(row or {}), description=self.label)
        if self.lines:
            self._say_line(row or {}, by)

    def _say_line(self, row: dict, by: int) -> None:
        """`job 3/6 gspo s0: train 5/20 0:00:41 ETA 0:02:44 <stats>`, every `every` steps and at the end."""
        before, self.done = self.done, self.done + by
        if self.done // self.every == before // self.every and self.done < self.total:
            return
        spent = time.monotonic() - self.since
        rate = spent / max(self.done - self.task_start, 1)
        eta = rate * (self.total - self.done)
        _line(f"{self.job}: {self.label} {self.done}/{self.total} {clock(spent)} ETA {clock(eta)}  "
              f"{self.stats(row)}".rstrip())


def clock(seconds: float) -> str:
    """`h:mm:ss`."""
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def train_stats(row: dict) -> str:
    """The step's numbers, each with its name: the mean reward and clip/token_frac (the share of tokens
    whose clipped branch is active)."""
    return (f"{REWARD_MEAN} {row.get(REWARD_MEAN, float('nan')):.3f}  "
            f"{CLIP_TOKEN_FRAC} {row.get(CLIP_TOKEN_FRAC, float('nan')):.4f}")

"""Rich progress bars on stderr for every step longer than a couple of seconds: training (step, ETA, the
labelled reward and clipped-token fraction, and which phase it is in), the cold start, evals."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from gspo.vocab.metrics import CLIP_TOKEN_FRAC, REWARD_MEAN

# rich estimates the speed over its last 30 s by default: with steps slower than that the ETA would read
# -:--:-- for most of a run; over the whole run it is there from the second step
_WHOLE_RUN_S = 7 * 24 * 3600.0


class Progress:
    """A bar `label` from `start` to `total`; `advance(row)` moves it one step and shows `stats(row)`."""

    def __init__(self, total: int, start: int = 0, *, enabled: bool = True, label: str = "train", stats=None,
                 clock=None):
        """`stats`: the row's numbers as text (default: the training step's); `clock`: rich's get_time."""
        self.enabled = enabled and total > start
        self.stats = stats or train_stats
        self.bar = RichProgress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[stats]}"), disable=not self.enabled,
            console=Console(stderr=True),  # stdout stays for results (the run directory)
            speed_estimate_period=_WHOLE_RUN_S, get_time=clock,
        )
        self.label = label
        self.task = self.bar.add_task(label, total=total, completed=start, stats="")

    def __enter__(self) -> Progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def wrap(self, log):
        """A logger that prints above the live bar instead of through it (plain `log` when disabled)."""
        if not self.enabled:
            return log
        return lambda message: self.bar.console.print(message, markup=False, highlight=False, soft_wrap=True)

    def phase(self, what: str | None) -> None:
        """Say what the bar is doing now (`eval`: a held-out eval between steps); None: its own label."""
        self.bar.update(self.task, description=f"{self.label} ({what})" if what else self.label)

    def advance(self, row: dict | None = None, by: int = 1) -> None:
        self.bar.update(self.task, advance=by, stats=self.stats(row or {}), description=self.label)


def train_stats(row: dict) -> str:
    """The step's numbers, each with its name: the mean reward and clip/token_frac (the share of tokens
    whose clipped branch is active)."""
    return (f"{REWARD_MEAN} {row.get(REWARD_MEAN, float('nan')):.3f}  "
            f"{CLIP_TOKEN_FRAC} {row.get(CLIP_TOKEN_FRAC, float('nan')):.4f}")

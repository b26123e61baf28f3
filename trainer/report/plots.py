"""PNG plots of a report (matplotlib, Agg backend: no display needed).

Each plot draws every arm in its own colour: each seed as a faint line, the mean across seeds as a solid
line, and the 95% t interval across seeds as a band (no band where only one seed has a value); a dashed
line marks the step where a run collapsed, if one did. The x axis
is the step; for reward and held-out accuracy also the wall-clock time (the cumulative time/step_s of
each run: training steps only, held-out evals left out) and the generated tokens (cumulative
completion/len_mean x completions per step: training rollouts only). On those two axes the mean at a
step is drawn at the mean x of the seeds at that step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from gspo.trainer.progress import Progress
from gspo.trainer.report.arms import Arm  # noqa: E402
from gspo.trainer.report.runs import Run  # noqa: E402
from gspo.trainer.report.stats import mean_ci  # noqa: E402

X_LABELS = {"step": "step", "time": "wall-clock time (s)", "tokens": "generated tokens"}


@dataclass(frozen=True)
class PlotSpec:
    metric: str
    title: str
    log: bool = False
    axes: tuple[str, ...] = ("step",)


def plot_specs(task: str) -> list[PlotSpec]:
    every = ("step", "time", "tokens")
    return [
        PlotSpec("reward/mean", "training reward", axes=every),
        PlotSpec(f"eval/{task}/accuracy", "held-out accuracy (sampled)", axes=every),
        PlotSpec(f"eval/{task}/accuracy_greedy", "held-out accuracy (greedy)", axes=every),
        PlotSpec("clip/token_frac", "clipped-token fraction", log=True),
        PlotSpec("clip/seq_frac", "clipped-sequence fraction"),
        PlotSpec("completion/len_mean", "response length (tokens)"),
        PlotSpec("policy/entropy", "entropy (nats per token)"),
        PlotSpec("policy/kl_old", "KL to the old policy (k3)", log=True),
        PlotSpec("optim/grad_norm", "grad norm (before clipping)"),
        PlotSpec("time/step_s", "seconds per step"),
    ]


def _x(run: Run, axis: str) -> pd.Series:
    m = run.metrics.set_index("step")
    if axis == "step":
        return pd.Series(m.index.astype(float), index=m.index)
    if axis == "time":
        return m["time/step_s"].fillna(0).cumsum() if "time/step_s" in m else pd.Series(dtype=float)
    per_step = run.config.get("train.prompts_per_step", 1) * run.config.get("train.group_size", 1)
    return (m["completion/len_mean"].fillna(0) * per_step).cumsum() if "completion/len_mean" in m else pd.Series(dtype=float)


def _curves(arm: Arm, metric: str, axis: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(values, x): index step, one column per run, only steps where the metric was logged."""
    ys, xs = {}, {}
    for r in arm.runs:
        if metric in r.metrics:
            y = r.metrics.set_index("step")[metric].dropna().astype(float)
            ys[r.run_id], xs[r.run_id] = y, _x(r, axis).reindex(y.index)
    return pd.DataFrame(ys), pd.DataFrame(xs)


def _draw_arm(ax, arm: Arm, metric: str, axis: str, color, floor: float | None = None) -> bool:
    """One arm's seeds, mean and band; with `floor` (a log axis) the band's lower edge stops there
    instead of running below zero, which a log axis cannot show."""
    ys, xs = _curves(arm, metric, axis)
    if ys.empty or xs.isna().all().all():
        return False
    for run_id in ys:
        ax.plot(xs[run_id], ys[run_id], color=color, alpha=0.25, linewidth=0.8)
    cis = [mean_ci(list(row)) for _, row in ys.iterrows()]
    x = xs.mean(axis=1)
    ax.plot(x, [c.mean for c in cis], color=color, linewidth=2, label=f"{arm.label} (n={len(arm.runs)})")
    low = [c.low if floor is None else max(c.low, floor) for c in cis]
    ax.fill_between(x, low, [c.high for c in cis], color=color, alpha=0.2, linewidth=0)
    _mark_collapses(ax, arm, axis, color)
    return True


def _mark_collapses(ax, arm: Arm, axis: str, color) -> None:
    """A dashed line at the step where a run collapsed (run.json `collapsed`, trainer/collapse.py)."""
    for r in arm.runs:
        step = (r.status.get("collapsed") or {}).get("step")
        x = _x(r, axis) if step is not None else None
        if x is not None and step in x.index:
            ax.axvline(float(x[step]), color=color, linestyle="--", linewidth=1, alpha=0.7,
                       label=f"collapse ({r.run_id}, step {step})")


def _log_floor(arms: list[Arm], metric: str) -> float | None:
    """Half the smallest positive value any run logged: where a log axis' bands stop."""
    values = [v for arm in arms for r in arm.runs if metric in r.metrics for v in r.metrics[metric].dropna()]
    positive = [float(v) for v in values if v > 0]
    return min(positive) / 2 if positive else None


def draw(spec: PlotSpec, arms: list[Arm], axis: str, out: Path) -> bool:
    """Write one PNG; False (and nothing written) when no run logged this metric on this axis."""
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    floor = _log_floor(arms, spec.metric) if spec.log else None
    drawn = [_draw_arm(ax, arm, spec.metric, axis, colors[i % len(colors)], floor) for i, arm in enumerate(arms)]
    if any(drawn):
        log = spec.log and any((np.asarray(line.get_ydata(), dtype=float) > 0).any() for line in ax.lines)
        if log:  # zeros (no clipping at all) cannot be drawn on a log axis: then the axis stays linear
            ax.set_yscale("log")
        ax.set(title=f"{spec.title} by {X_LABELS[axis]}", xlabel=X_LABELS[axis],
               ylabel=spec.metric + (" (log scale)" if log else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out)
    plt.close(fig)
    return any(drawn)


def write_plots(arms: list[Arm], task: str, out_dir: Path, progress: bool = False) -> list[tuple[str, Path]]:
    """Every plot the runs' metrics allow: [(caption, png path)]; `progress`: a bar, plots done / total."""
    written = []
    jobs = [(spec, axis) for spec in plot_specs(task) for axis in spec.axes]
    with Progress(len(jobs), enabled=progress, label="report plots", stats=lambda _: "") as bar:
        for spec, axis in jobs:
            path = out_dir / f"{spec.metric.replace('/', '_')}_by_{axis}.png"
            if draw(spec, arms, axis, path):
                written.append((f"{spec.title} by {X_LABELS[axis]}", path))
            bar.advance()
    return written

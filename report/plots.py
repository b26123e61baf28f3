"""PNG plots of a report (matplotlib, Agg backend: no display needed).

Each arm has its own colour and line style (so arms that happen to be equal stay visible on top of each
other): each seed a thin line in the arm's colour, the mean across seeds a thick line, and a band: the 95%
t interval across seeds clipped to the metric's valid range from 3 seeds up, the seeds' min-max with 2
(said in the legend), none with 1. A dashed line marks the step where a run collapsed. Step axes have
integer ticks. The x axis is the step; for reward and held-out accuracy also the wall-clock time (the
cumulative time/step_s of each run: training steps only, held-out evals left out) and the generated tokens
(cumulative completion/len_mean x completions per step: training rollouts only). On those two axes the mean
at a step is drawn at the mean x of the seeds at that step. Times are drawn as the runs recorded them, also where the
report leaves a loaded run's times out of its comparison (report/load.py): such a plot's title says the load, and
where no run recorded a time the page says so in one sentence instead of drawing an empty axis (`time_note`).

Three figures lead the report: the forest plot (every headline difference with its interval, one shared
axis per metric, rows sorted, the verdict's own interval drawn at its level, zero marked), the grid of key curves (two rows of three) and, for a sweep over a numeric key, the sensitivity
plot (final metric against that key, one line per algorithm, the share of seeds that collapsed marked).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

import gspo.vocab.metrics as M  # noqa: E402
from gspo.report.arms import Arm, legend_note  # noqa: E402
from gspo.report.collapse import collapsed  # noqa: E402
from gspo.report.load import TIMING, as_recorded, load_words  # noqa: E402
from gspo.report.runs import Run  # noqa: E402
from gspo.report.stats import band, excludes_zero  # noqa: E402
from gspo.report.tables import Difference, Headline, arm_values, valid_range  # noqa: E402
from gspo.trainer.run.progress import Progress  # noqa: E402
from gspo.vocab.algorithms import title as algo_title  # noqa: E402

X_LABELS = {"step": "step", "time": "wall-clock time (s)", "tokens": "generated tokens"}
STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 1)))
COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


@dataclass(frozen=True)
class PlotSpec:
    metric: str
    title: str
    log: bool = False
    axes: tuple[str, ...] = ("step",)
    smooth: bool = False  # the key grid draws a moving average of the mean (the noisy training reward)


def _spec(name: str, *, axes: tuple[str, ...] = ("step",), smooth: bool = False, grid: bool = False) -> PlotSpec:
    """A plot of `name` as the metric catalogue labels and scales it (the key grid says "(log)" in its title)."""
    m = M.lookup(name)
    stat = name.rsplit("/", 1)[-1]
    if M.EVAL.matches(name) and stat in M.EVAL_STATS:
        m = M.EVAL_STATS[stat]
    log = m.scale == M.LOG
    title = m.label
    if grid and log:  # "KL to the old policy (k3)" -> "KL to the old policy (k3, log)"
        title = f"{title[:-1]}, log)" if title.endswith(")") else f"{title} (log)"
    return PlotSpec(name, title, log=log, axes=axes, smooth=smooth)


def plot_specs(task: str) -> list[PlotSpec]:
    every = ("step", "time", "tokens")
    acc, greedy = M.EVAL.format(task, M.EVAL_ACCURACY), M.EVAL.format(task, M.EVAL_ACCURACY_GREEDY)
    return [_spec(M.REWARD_MEAN, axes=every), _spec(acc, axes=every), _spec(greedy, axes=every),
            *[_spec(name) for name in (M.CLIP_TOKEN_FRAC, M.CLIP_SEQ_FRAC, M.LEN_MEAN, M.ENTROPY, M.KL_OLD,
                                       M.GRAD_NORM, M.TIME_STEP)]]


def key_specs(task: str) -> list[PlotSpec]:
    """The grid's six curves: reward, held-out accuracy, clipped tokens (log), entropy, KL (log), length."""
    return [_spec(M.REWARD_MEAN, smooth=True, grid=True), _spec(M.EVAL.format(task, M.EVAL_ACCURACY), grid=True),
            *[_spec(name, grid=True) for name in (M.CLIP_TOKEN_FRAC, M.ENTROPY, M.KL_OLD, M.LEN_MEAN)]]


def style(i: int) -> dict:
    return {"color": COLORS[i % len(COLORS)], "linestyle": STYLES[i % len(STYLES)]}


def _x(run: Run, axis: str) -> pd.Series:
    m = run.metrics.set_index("step")
    if axis == "step":
        return pd.Series(m.index.astype(float), index=m.index)
    if axis == "time":  # no time recorded at all: no x (not a line at 0 on a -0.04..0.04 axis)
        timed = M.TIME_STEP in m and m[M.TIME_STEP].notna().any()
        return m[M.TIME_STEP].fillna(0).cumsum() if timed else pd.Series(dtype=float)
    per_step = run.config.get("train.prompts_per_step", 1) * run.config.get("train.group_size", 1)
    return (m[M.LEN_MEAN].fillna(0) * per_step).cumsum() if M.LEN_MEAN in m else pd.Series(dtype=float)


def _curves(arm: Arm, metric: str, axis: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(values, x): index step, one column per run, only steps where the metric was logged."""
    ys, xs = {}, {}
    for r in arm.runs:
        if metric in r.metrics:
            y = r.metrics.set_index("step")[metric].dropna().astype(float)
            ys[r.run_id], xs[r.run_id] = y, _x(r, axis).reindex(y.index)
    return pd.DataFrame(ys), pd.DataFrame(xs)


def _draw_arm(ax, arm: Arm, metric: str, axis: str, i: int, valid=(None, None), floor: float | None = None,
              smooth: int = 0, label: bool = True) -> bool:
    """One arm's seeds, mean and band; with `floor` (a log axis) the band's lower edge stops there instead
    of running below zero, which a log axis cannot show; `smooth` > 1: the mean as a moving average."""
    ys, xs = _curves(arm, metric, axis)
    if ys.empty or xs.isna().all().all():
        return False
    st = style(i)
    for run_id in ys:
        ax.plot(xs[run_id], ys[run_id], color=st["color"], alpha=0.5, linewidth=0.7, linestyle=st["linestyle"])
    bands = [band(list(row), valid) for _, row in ys.iterrows()]
    x = xs.mean(axis=1)
    mean = pd.Series([b.mean for b in bands], index=ys.index)
    how = {b.how for b in bands if b.n >= 2}
    note = " min-max" if "min-max" in how else ""
    name = f"{arm.label} (n={len(arm.runs)}{note})" if label else None
    if smooth > 1:
        ax.plot(x, mean, color=st["color"], alpha=0.5, linewidth=1, linestyle=st["linestyle"])
        ax.plot(x, mean.rolling(smooth, min_periods=1).mean(), linewidth=2.2, label=name, **st)
    else:
        ax.plot(x, mean, linewidth=2, label=name, **st)
    low = [b.low if floor is None or math.isnan(b.low) else max(b.low, floor) for b in bands]
    ax.fill_between(x, low, [b.high for b in bands], color=st["color"], alpha=0.15, linewidth=0)
    _mark_collapses(ax, arm, axis, st["color"], label)
    return True


def _mark_collapses(ax, arm: Arm, axis: str, color, label: bool = True) -> None:
    """A dashed line at the step where a run collapsed (run.json `collapsed`, trainer/run/collapse.py)."""
    for r in arm.runs:
        step = (r.status.get("collapsed") or {}).get("step")
        x = _x(r, axis) if step is not None else None
        if x is not None and step in x.index:
            first = label and "a run collapsed" not in ax.get_legend_handles_labels()[1]
            ax.axvline(float(x[step]), color=color, linestyle="--", linewidth=1, alpha=0.7,
                       label="a run collapsed" if first else None)


def _log_floor(arms: list[Arm], metric: str) -> float | None:
    """Half the smallest positive value any run logged: where a log axis' bands stop."""
    values = [v for arm in arms for r in arm.runs if metric in r.metrics for v in r.metrics[metric].dropna()]
    positive = [float(v) for v in values if v > 0]
    return min(positive) / 2 if positive else None


def _panel(ax, spec: PlotSpec, arms: list[Arm], axis: str, smooth: int = 0, label: bool = True) -> bool:
    runs = [r for a in arms for r in a.runs]
    floor = _log_floor(arms, spec.metric) if spec.log else None
    valid = valid_range(spec.metric, runs)
    drawn = [_draw_arm(ax, arm, spec.metric, axis, i, valid, floor, smooth if spec.smooth else 0, label)
             for i, arm in enumerate(arms)]
    if not any(drawn):
        return False
    log = spec.log and floor is not None
    if log:  # zeros (no clipping at all) cannot be drawn on a log axis: then the axis stays linear
        ax.set_yscale("log")
    if axis == "step":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    return True


def _timed(spec: PlotSpec, axis: str) -> bool:
    return axis == "time" or spec.metric.startswith(TIMING)


NOTE_CHARS = 75  # a title's load note wrapped to this many characters: one line of it is wider than a 7-inch plot


def draw(spec: PlotSpec, arms: list[Arm], axis: str, out: Path) -> bool:
    """Write one PNG; False (and nothing written) when no run logged this metric on this axis. A plot of times
    (by wall-clock time, or of a time) draws them as recorded, its title saying the load where it was high."""
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    note = ""
    if _timed(spec, axis):
        arms = [Arm(a.label, a.values, [as_recorded(r) for r in a.runs]) for a in arms]
        note = load_words([r for a in arms for r in a.runs])
    drawn = _panel(ax, spec, arms, axis)
    if drawn:
        log = ax.get_yscale() == "log"
        title = f"{spec.title} by {X_LABELS[axis]}" + (f"\n{textwrap.fill(note, NOTE_CHARS)}" if note else "")
        ax.set(title=title, xlabel=X_LABELS[axis], ylabel=spec.metric + (" (log scale)" if log else ""))
        ax.title.set_fontsize(10 if note else 12)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out)
    plt.close(fig)
    return drawn


def key_grid(arms: list[Arm], task: str, out: Path, smooth: int = 5) -> bool:
    """The six key curves by step, three per row, one legend for all above them; False when none could be drawn."""
    specs = key_specs(task)
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.4), dpi=90)
    drawn = []
    for k, (spec, ax) in enumerate(zip(specs, axes.flat, strict=True)):
        ok = _panel(ax, spec, arms, "step", smooth, label=k == 0)
        if ok:
            note = f" ({smooth}-step moving average)" if spec.smooth and smooth > 1 else ""
            ax.set_title(spec.title + note, fontsize=10)
            ax.set_xlabel("step", fontsize=9)
        else:
            ax.set_axis_off()
        drawn.append(ok)
    if any(drawn):
        handles, labels = axes.flat[drawn.index(True)].get_legend_handles_labels()
        note = legend_note(list(arms[0].values)) if arms else ""
        # the legend above the panels: on the page it must be read with the curves' first screen, not below it
        fig.legend(handles, labels, loc="upper center", ncol=min(6, max(1, len(labels))), fontsize=8,
                   title=note or None, title_fontsize=8, frameon=False)
        rows = math.ceil(len(labels) / 6) + (1 if note else 0)  # legend lines, its title included
        fig.tight_layout(rect=(0, 0, 1, 0.99 - 0.037 * rows))
        fig.savefig(out)
    plt.close(fig)
    return any(drawn)


def _forest_row(ax, d: Difference, y: float) -> None:
    """One difference at height y: the 95% interval (thick), the verdict's own interval at its level (thin: Holm's,
    or the group-sequential repeated interval), the point; grey where there is no test (seeds that tied). A score's
    confirmatory line says resolved or no claim; any other line only whether its interval excludes zero."""
    color = "#1f77b4" if d.resolved else "#777777"
    if not math.isnan(d.ci.low) and d.ci.tested:
        adj = d.whisker
        if d.alpha != 0.05 and not math.isnan(adj.low):
            ax.plot([adj.low, adj.high], [y, y], color=color, linewidth=1, solid_capstyle="butt")
            ax.plot([adj.low, adj.high], [y, y], "|", color=color, markersize=8)
        ax.plot([d.ci.low, d.ci.high], [y, y], color=color, linewidth=3.5, solid_capstyle="butt", alpha=0.8)
    ax.plot([d.ci.mean], [y], "o", color=color, markersize=6)
    how = "paired" if d.method == "paired t" else "Welch"
    ax.text(1.01, y, forest_words(d) + f" ({how}, n={d.ci.n})",
            transform=ax.get_yaxis_transform(), ha="left", va="center", fontsize=8, color=color)


def forest_words(d: Difference) -> str:
    """What a forest row says: `resolved` / `no claim` for a confirmatory score's line only; a mechanism or an
    exploratory score says whether its interval excludes zero, in the words of its role (never `resolved`)."""
    if not d.ci.tested and d.ci.n >= 2:
        return "no test (tie)"
    if d.role in ("primary",) and d.confirmatory:
        refused = d.gate_refused and excludes_zero(d.whisker)
        return "resolved" if d.resolved else "no claim (sign-flip p > level)" if refused else "no claim"
    role = d.role or "described"
    return f"excludes 0 ({role})" if d.resolved else f"includes 0 ({role})"


def forest(diffs: list[Difference], out: Path) -> bool:
    """Every difference (an arm minus its baseline) with its interval: one panel per metric, all its rows on one
    shared x axis (so their intervals compare by eye), sorted by the estimate, zero marked; the thick bar is the
    95% interval, the thin one with end ticks the verdict's own interval at its level (Holm's in the page's family or
    within the metric, or the group-sequential repeated interval after rounds of seeds), so a whisker excludes zero
    exactly where the line does; Holm's levels are not a simultaneous family (0.926 of six cover at once)."""
    by_metric: dict[str, list[Difference]] = {}
    for d in diffs:
        if not math.isnan(d.ci.mean):
            by_metric.setdefault(d.head.metric, []).append(d)
    if not by_metric:
        return False
    heights = [len(ds) + 1.2 for ds in by_metric.values()]  # rows, and room for the panel's title and axis
    rows = sum(len(ds) for ds in by_metric.values())
    fig, axes = plt.subplots(len(by_metric), 1, figsize=(10, 0.3 * rows + 0.55 * len(heights) + 0.35), dpi=90,
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    for ax, ds in zip(axes[:, 0], by_metric.values(), strict=True):
        ds = sorted(ds, key=lambda d: d.ci.mean)
        for y, d in enumerate(ds):
            _forest_row(ax, d, y)
        ax.axvline(0, color="#c00", linewidth=1)
        ax.set_yticks(range(len(ds)), [f"{d.arm.label} - {d.base.label}" for d in ds], fontsize=8)
        ax.set_ylim(-0.6, len(ds) - 0.4)
        head = ds[0].head
        thin = (f"; thin: group-sequential repeated {1 - ds[0].alpha:.3g} CI of the last look" if ds[0].adjusted_by != "Holm"
                else f"; thin: at each line's Holm level in the page's family ({_levels(ds)})" if ds[0].family
                else f"; thin: at each line's Holm level over {ds[0].m} ({_levels(ds)})" if ds[0].m > 1 else "")
        ax.set_title(f"{head.info.label} ({head.reduce}){thin}", fontsize=9, loc="left", pad=2)
        ax.tick_params(axis="x", labelsize=7, pad=1)
        ax.grid(axis="x", alpha=0.3)
        for side in ("right", "top"):
            ax.spines[side].set_visible(False)
    fig.suptitle("Difference to the baseline: 95% interval (thick), the verdict's own level (thin); red: no difference",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(out)
    plt.close(fig)
    return True


def _levels(ds: list[Difference]) -> str:
    """`96.00% each` or `99.33% to 99.60%`: the confidence levels of a panel's whiskers."""
    lo, hi = min(1 - d.alpha for d in ds), max(1 - d.alpha for d in ds)
    return f"{lo:.2%} each" if math.isclose(lo, hi) else f"{lo:.2%} to {hi:.2%}"


def sensitivity(arms: list[Arm], key: str, head: Headline, out: Path) -> bool:
    """`head`'s value per run against the numeric `key`, one line per algorithm (mean, band across seeds,
    each seed a dot; a cross for a seed that collapsed), log x for a learning rate."""
    by_algo: dict[str, list[Arm]] = {}
    for arm in arms:
        by_algo.setdefault(str(arm.values.get("algo.name", "all")), []).append(arm)
    runs = [r for a in arms for r in a.runs]
    valid = valid_range(head.metric, runs)
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=90)
    drawn = False
    for i, (algo, group) in enumerate(by_algo.items()):
        group = sorted(group, key=lambda a: a.values[key])
        xs = [float(a.values[key]) for a in group]
        values = [arm_values(a, head) for a in group]
        if all(all(math.isnan(v) for v in vs) for vs in values):
            continue
        drawn = True
        st = style(i)
        bands = [band(vs, valid) for vs in values]
        name = algo_title(algo)
        how = " (min-max of 2 seeds)" if any(b.how == "min-max" for b in bands) else ""
        broke = " (top: seeds collapsed)" if any(collapsed(r) for a in group for r in a.runs) else ""
        ax.plot(xs, [b.mean for b in bands], marker="o", linewidth=2, label=f"{name}{how}{broke}", **st)
        ax.fill_between(xs, [b.low for b in bands], [b.high for b in bands], color=st["color"], alpha=0.15, linewidth=0)
        for x, a in zip(xs, group, strict=True):
            k = sum(collapsed(r) for r in a.runs)
            if k:  # one row per algorithm along the top: labels of two algorithms at one x never overlap
                ax.annotate(f"{k}/{len(a.runs)}", (x, 0.97 - 0.07 * i), xycoords=("data", "axes fraction"),
                            ha="center", va="top", fontsize=8, color=st["color"], fontweight="bold")
            for r in a.runs:
                v = arm_values(Arm(a.label, a.values, [r]), head)[0]
                ax.plot([x], [v], "x" if collapsed(r) else ".", color=st["color"], alpha=0.7,
                        markersize=7 if collapsed(r) else 5)
    if drawn:
        if key.endswith("lr") or all(float(a.values[key]) > 0 for a in arms) and \
                max(float(a.values[key]) for a in arms) / min(float(a.values[key]) for a in arms) >= 10:
            ax.set_xscale("log")
            ticks = sorted({float(a.values[key]) for a in arms})
            ax.set_xticks(ticks, [f"{t:.3g}" for t in ticks])
            ax.minorticks_off()
        elif all(float(a.values[key]).is_integer() for a in arms):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if any(collapsed(r) for r in runs):  # room above the curves for the rows of collapse counts
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, hi + (hi - lo) * 0.09 * len(by_algo))
        ax.set(xlabel=key, ylabel=f"{head.info.label} ({head.reduce})",
               title=f"{head.info.label} ({head.reduce}) against {key}: mean, band across seeds; x = a seed that collapsed")
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out)
    plt.close(fig)
    return drawn


def write_plots(arms: list[Arm], task: str, out_dir: Path, progress: bool = False) -> list[tuple[str, Path]]:
    """Every plot the runs' metrics allow: [(caption, png path)]; `progress`: a bar, plots done / total."""
    written = []
    jobs = [(spec, axis) for spec in plot_specs(task) for axis in spec.axes]
    with Progress(len(jobs), enabled=progress, label="report plots", stats=lambda _: "") as bar:
        for spec, axis in jobs:
            path = out_dir / f"{spec.metric.replace('/', '_')}_by_{axis}.png"
            if draw(spec, arms, axis, path):
                note = load_words([r for a in arms for r in a.runs]) if _timed(spec, axis) else ""
                written.append((f"{spec.title} by {X_LABELS[axis]}" + (f", {note}" if note else ""), path))
            bar.advance()
    return written


def time_note(arms: list[Arm]) -> str | None:
    """The sentence that stands in for the wall-clock plots where no run recorded a time per step (None: drawn)."""
    runs = [as_recorded(r) for a in arms for r in a.runs]
    if any(M.TIME_STEP in r.metrics and r.metrics[M.TIME_STEP].notna().any() for r in runs):
        return None
    return f"No plot by wall-clock time: no run recorded a time per step ({M.TIME_STEP})."


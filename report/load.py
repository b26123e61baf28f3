"""The load a run's times were taken under (run.json `load_start`, `load_max`, `load_end`: the machine's
1-minute load average, sampled at every step by the trainer's run directory), and per-step times left out
of comparisons where it was high.

A time per step measures the machine as much as the algorithm: on a shared 2-core machine one job beside
the test suite ran 4.7 s/step against 0.8 s alone. A run is `loaded` when its highest load exceeds
HIGH_LOAD times its CPUs (a run's own threads count about once per core, so a quiet machine running it
sits near 1x); its times (time/*, throughput/*) are then blanked before arms are compared, and the page
says which runs and why. Runs that recorded no load (older runs) keep their times, said once. The plots and the
eval's cost still show the times as recorded (`as_recorded`), under words that say the load (`load_words`).
"""

from __future__ import annotations

import dataclasses
import math

from gspo.report.runs import Run

HIGH_LOAD = 1.5  # load average per CPU above which a run's times are not the algorithm's
TIMING = ("time/", "throughput/")


def load_of(run: Run) -> float | None:
    """The highest 1-minute load average the run recorded (None: an older run that recorded none)."""
    seen = [run.status.get(k) for k in ("load_start", "load_max", "load_end")]
    seen = [float(v) for v in seen if isinstance(v, (int, float))]
    return max(seen) if seen else None


def loaded(run: Run) -> bool:
    load, cpus = load_of(run), run.status.get("cpus")
    return load is not None and isinstance(cpus, int) and cpus > 0 and load > HIGH_LOAD * cpus


def load_text(run: Run) -> str:
    """`2.1 on 2 CPUs` (or `-` when not recorded), for the table of runs."""
    load = load_of(run)
    return "-" if load is None else f"{load:.1f} on {run.status.get('cpus', '?')} CPUs" + (" (high)" if loaded(run) else "")


def without_loaded_times(runs: list[Run]) -> tuple[list[Run], list[str]]:
    """(the runs with the times of loaded runs blanked, what the page must say)."""
    out, said = [], []
    for r in runs:
        cols = [c for c in r.metrics.columns if c.startswith(TIMING)]
        if loaded(r) and cols:
            m = r.metrics.copy()
            m[cols] = math.nan
            out.append(dataclasses.replace(r, metrics=m, recorded=r.metrics))
            said.append(f"{r.run_id}: its per-step times are left out of the comparison: it ran under a load of "
                        f"{load_of(r):.1f} on {r.status.get('cpus')} CPUs (above {HIGH_LOAD}x), so they measure "
                        "the machine, not the algorithm")
        else:
            out.append(r)
    if any(load_of(r) is None for r in runs):
        said.append("per-step times of runs that recorded no load average (written before gspo recorded it) are "
                    "shown as measured: the load they ran under is unknown")
    return out, said


def as_recorded(run: Run) -> Run:
    """The run with its times as it recorded them (undoing `without_loaded_times`), for plots that say the load."""
    return run if run.recorded is None else dataclasses.replace(run, metrics=run.recorded, recorded=None)


def load_words(runs: list[Run]) -> str:
    """`recorded at a load of up to 12.3 on 2 CPUs (above 1.5x: the machine's times, not the algorithm's)` where any
    run ran loaded, else "" (quiet runs' times need no words)."""
    busy = [r for r in runs if loaded(r)]
    if not busy:
        return ""
    top = max(busy, key=load_of)
    return (f"recorded at a load of up to {load_of(top):.1f} on {top.status.get('cpus')} CPUs (above {HIGH_LOAD}x "
            "per CPU: the machine's times, not the algorithm's)")

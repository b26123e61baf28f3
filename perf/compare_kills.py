"""Kill `gspo compare` at random moments, count the workers it leaves behind, resume it, and compare the runs
with an uninterrupted compare (issue 48's acceptance for the joblib workers).

The compare is the TINY configuration (tests/conftest.py) of the default preset (GRPO and GSPO), two jobs side
by side under joblib (`hydra/launcher=joblib hydra.launcher.n_jobs=2`, as `gspo compare` picks on two cores).
First one compare runs to its end: the reference. Then each round starts the same compare in a fresh folder,
sends SIGKILL (or SIGTERM) after a random delay (early ones land while the workers are still starting, as a kill
of a compare does most often), lists the processes that descended from it, waits `--grace` seconds, counts those
still alive (orphans: must be 0), and runs the same command again, which must exit 0 and leave every run's
metrics rows equal to the reference's (timings aside). Each round's line: the delay, the signal, the workers
seen, the orphans, the resume's exit code and whether its metrics are identical.

    GSPO_CACHE=/tmp/cache-kills python perf/compare_kills.py --rounds 6 --out /tmp/compare-kills
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))
from conftest import TINY, without_timing  # noqa: E402

ARGS = ["compare", *TINY, "seed=0", "train.steps=4", "train.eval_every=2", "logger.progress=false",
        "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


GSPO = ["gspo"]  # the console script (--gspo: another install's, e.g. to measure the code before a fix)


def _command(folder: Path) -> list[str]:
    return [*GSPO, *ARGS, f"output_dir={folder / 'runs'}", f"hydra.sweep.dir={folder / 'sweep'}"]


def _descendants(pid: int) -> set[int]:
    """Every process whose parent chain reaches `pid` (read from /proc)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _name(pid: int) -> str:
    """A short name of the process: a loky worker, a resource tracker, or its program."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_text(errors="replace").replace("\0", " ")
    except OSError:
        return "gone"
    return "loky worker" if "popen_loky" in cmd else "resource tracker" if "resource_tracker" in cmd else cmd[:40]


def _metrics(folder: Path) -> dict[str, list[dict]]:
    """Each run's metrics rows by its job's overrides (timings left out)."""
    out = {}
    for record in sorted((folder / "sweep" / "runs").glob("*.json")):
        job = json.loads(record.read_text())
        run = Path(os.path.normpath(folder / "sweep" / job["run_dir"]))
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        out[job["overrides"]] = without_timing(rows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("/tmp/compare-kills"))
    parser.add_argument("--within", type=float, default=40.0, help="kill within this many seconds of the start")
    parser.add_argument("--grace", type=float, default=15.0, help="seconds the workers get to end themselves")
    parser.add_argument("--linger", type=float, default=120.0, help="then this long for those still ending")
    parser.add_argument("--after", type=float, default=1.0, help="kill no sooner than this many seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gspo", default="gspo", help="the gspo console script to run")
    args = parser.parse_args()
    GSPO[:] = [args.gspo]
    rng = random.Random(args.seed)
    shutil.rmtree(args.out, ignore_errors=True)
    reference = args.out / "reference"
    t0 = time.time()
    done = subprocess.run(_command(reference), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    want = _metrics(reference)
    print(f"reference: {len(want)} runs in {time.time() - t0:.0f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    orphans_total = identical = 0
    for i in range(args.rounds):
        folder = args.out / f"round-{i}"
        sig = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM])
        delay = rng.uniform(args.after, args.within)
        proc = subprocess.Popen(_command(folder), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen: set[int] = set()
        end = time.time() + delay
        while time.time() < end and proc.poll() is None:
            seen |= _descendants(proc.pid)
            time.sleep(0.2)
        seen |= _descendants(proc.pid)
        finished_first = proc.poll() is not None
        proc.send_signal(sig)
        proc.wait()
        time.sleep(args.grace)
        late = {p: _name(p) for p in seen if _alive(p)}  # still ending (a run saving its interrupted state, a tracker)
        end = time.time() + args.linger
        while time.time() < end and any(_alive(p) for p in late):
            time.sleep(0.5)
        orphans = sorted(p for p in late if _alive(p))
        orphans_total += len(orphans)
        for p in orphans:  # ours: ended so the next round starts clean
            os.kill(p, signal.SIGKILL)
        again = subprocess.run(_command(folder), capture_output=True, text=True)
        same = again.returncode == 0 and _metrics(folder) == want
        identical += same
        print(f"round {i}: {signal.Signals(sig).name} after {delay:.1f} s{' (had finished)' if finished_first else ''}, "
              f"{len(seen)} descendant process(es) seen, {len(late)} alive after {args.grace:.0f} s "
              f"({', '.join(sorted(late.values())) or 'none'}), {len(orphans)} orphan(s) after {args.grace + args.linger:.0f} s; "
              f"resume exit {again.returncode}, metrics {'identical' if same else 'DIFFERENT'}"
              + ("" if again.returncode == 0 else f": {again.stderr.strip().splitlines()[-1:]}"), flush=True)
    print(f"{args.rounds} kills: {orphans_total} orphan(s) left, {identical}/{args.rounds} resumes identical to the "
          f"uninterrupted compare ({time.time() - t0:.0f} s, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()

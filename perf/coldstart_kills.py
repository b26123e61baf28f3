"""Kill the cold-start build at random moments and say what is left (issue 37's acceptance for the cache).

Each round starts a builder of the TINY cold start (tests/conftest.py) in a fresh interpreter on one cache
folder, waits for its "building" line, sends SIGKILL (or SIGTERM) after a random delay within the build, and
lists the cache's coldstart/ folder: the key's folder must be absent or intact (complete.json matches), never
half-written. A round whose build finished first has its folder removed, so the next round builds again. Last,
one builder runs to the end: it clears what killed builders left and leaves one intact folder, which a further
run uses without a word.

    python perf/coldstart_kills.py --rounds 8 --cache /tmp/gspo-kills
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

BUILDER = """
import sys
sys.path.insert(0, sys.argv[2])
from conftest import TINY
from gspo.conf import compose_config
from gspo.trainer.coldstart import cold_start_path
from gspo.trainer.policy import tiny_spec
cold_start_path(tiny_spec(compose_config(TINY)), sys.argv[1], log=lambda m: print(m, flush=True))
print("returned", flush=True)
"""
TESTS = str(Path(__file__).resolve().parents[1] / "tests")


def _builder(cache: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUILDER, str(cache), TESTS], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def _state(cache: Path) -> tuple[str, list[str]]:
    from gspo.trainer.coldstart import cache_problem

    root = cache / "coldstart"
    names = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
    keys = [n for n in names if not n.startswith(".") and not n.endswith(".lock")]
    verdict = "absent" if not keys else "; ".join(f"{k}: {cache_problem(root / k) or 'intact'}" for k in keys)
    return verdict, names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/gspo-coldstart-kills"))
    parser.add_argument("--within", type=float, default=6.0, help="kill within this many seconds of 'building'")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    shutil.rmtree(args.cache, ignore_errors=True)
    for n in range(args.rounds):
        sig = signal.SIGTERM if n % 4 == 3 else signal.SIGKILL
        proc = _builder(args.cache)
        started = None
        for line in proc.stdout:
            if "building the embedded model" in line:
                started = time.time()
                break
        delay = rng.uniform(0, args.within)
        time.sleep(max(0.0, delay - (time.time() - started)) if started else 0)
        proc.send_signal(sig)
        rest = proc.stdout.read()
        proc.wait()
        done = "returned" in rest
        verdict, names = _state(args.cache)
        print(f"round {n}: {signal.Signals(sig).name} {delay:.2f} s after 'building' -> "
              f"{'finished first' if done else f'exit {proc.returncode}'}; key folder: {verdict}; coldstart/: {names}")
        assert verdict in ("absent",) or verdict.endswith(": intact"), verdict
        if done:
            for folder in (args.cache / "coldstart").iterdir():
                if folder.is_dir() and not folder.name.startswith("."):
                    shutil.rmtree(folder)
    for label in ("after the kills, a builder runs to the end", "the next run"):
        proc = _builder(args.cache)
        out = proc.communicate()[0]
        verdict, names = _state(args.cache)
        said = [ln for ln in out.splitlines() if ln.startswith("cold start:")][:1]
        print(f"{label}: exit {proc.returncode}; said {said or 'nothing'}; key folder: {verdict}; coldstart/: {names}")


if __name__ == "__main__":
    main()

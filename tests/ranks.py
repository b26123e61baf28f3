"""Data-parallel runs against one process, shared by the torchrun tests (tests/trainer/parallel/) and the Slurm
tests (tests/study/test_slurm.py): the torchrun command, the one-process reference at a rank's one thread, and
the comparisons (every logged metric and the weights within RTOL relative)."""

from __future__ import annotations

import math
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
from conftest import TINY, without_timing
from safetensors.torch import load_file

RTOL = 1e-6
# The layout both runs share, so that the ranks run exactly one process's forwards: generation in chunks of
# 4 rows (a rank's one group of 4), and micro-batches set explicitly (unset, one process runs a minibatch
# whole and W processes 1/W of it each).
SAME_FORWARDS = ("rollout.batch_size=4",)


def torchrun(gspo, nproc: int, *args: str, script: Path | None = None, timeout: float = 300):
    """`torchrun --standalone --nproc-per-node N -m gspo.cli.main train ...` (or a wrapper script)."""
    target = [str(script)] if script else ["-m", "gspo.cli.main"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *target,
           "train", "-q", *TINY, *args]
    return subprocess.run(cmd, env=gspo.env | {"OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=timeout, check=False)


@contextmanager
def threads(n: int):
    """The in-process run at n torch threads (intra-op and MKL), as a torchrun rank runs with OMP_NUM_THREADS=n."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def one_process(gspo, tmp_path: Path, *common: str) -> Path:
    """The one-process reference run, at the rank's one thread."""
    with threads(1):
        return gspo.train(tmp_path, "one", *common)


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a == b
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=0.0)


def assert_rows_match(one: list[dict], two: list[dict]) -> None:
    one, two = without_timing(one), without_timing(two)
    assert [sorted(r) for r in one] == [sorted(r) for r in two]
    bad = [(r["step"], k, r[k], s[k]) for r, s in zip(one, two, strict=True) for k in r if not close(r[k], s[k])]
    assert not bad, bad


def weights(run: Path) -> dict[str, torch.Tensor]:
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    return load_file(latest / "model.safetensors")

"""Shared fixtures: a tiny, fast configuration of the embedded model and task, built once per session.

TINY shrinks the cold-started model (~10k parameters, 16 fine-tune steps on one-digit problems) so a
two-step `gspo train` takes seconds. It is too weak to be useful, but right often enough that some groups
have unequal rewards, so the updates move the weights (LEARNING_SEED is a seed where one does at step 1,
whose update leaves AdamW momentum that moves the weights at later steps too; tests that need a learning
signal assert it). Every test run writes under pytest's tmp dirs,
with GSPO_CACHE pointing at a session cache and W&B and the Hugging Face hub kept offline. Under pytest-xdist
(the README's command runs `-n auto`) each worker has its own tmp dirs, so its own cold-start cache, and a
share of the cores for torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

# `gspo` as installed beside this interpreter (a venv's bin/ or the system's), else whatever PATH finds
CONSOLE_SCRIPT = str(Path(sys.executable).parent / "gspo") if (Path(sys.executable).parent / "gspo").is_file() else "gspo"

TINY = [
    "model.tiny.hidden_size=32",
    "model.tiny.num_layers=1",
    "model.tiny.intermediate_size=64",
    "model.tiny.num_heads=2",
    "model.tiny.num_kv_heads=1",
    "model.tiny.sft_max_steps=16",
    "model.tiny.sft_batch_size=8",
    "model.tiny.sft_lr=1e-2",
    "model.tiny.sft_eval_every=16",
    "task.eval_size=8",
    "task.min_digits=1",
    "task.max_digits=1",
    "train.prompts_per_step=2",
    "train.group_size=4",
    "train.minibatches=2",
    "rollout.max_new_tokens=16",
    "logger=local",
]
LEARNING_SEED = 10  # with TINY, a group of step 1 includes a right and a wrong answer (the hf engine's per-row sampler)

# Keys that measure the machine, not the run: excluded when runs are compared for equality.
TIMING_PREFIXES = ("time/", "throughput/")
TIMING_KEYS = ("time",)  # when an evals.jsonl row was written


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(TIMING_PREFIXES) and k not in TIMING_KEYS} for r in rows]


def _workers() -> int:
    """How many pytest-xdist workers share the machine (1 without xdist)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def _threads_per_worker() -> int | None:
    """Torch threads for each worker when several share the cores (None: leave torch's default).

    The embedded model's matmuls are small: two workers at one thread each finish the suite far sooner than
    one worker at two threads, and two workers at two threads each oversubscribe a 2-core machine."""
    if _workers() <= 1:
        return None
    return max(1, (os.cpu_count() or 1) // _workers())


def pytest_configure(config) -> None:
    """Under xdist, each worker (and every console script it starts) gets its share of the cores."""
    threads = _threads_per_worker()
    if threads:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


def load_scaled(seconds: float) -> float:
    """A wall-clock limit of `seconds` on a quiet machine, stretched by the machine's load per core when the
    call starts (os.getloadavg: 25 on 2 cores gives 12.5x), so a busy runner gives slow passes, not timeouts;
    still a limit, so a hung command fails the test rather than the whole session."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return seconds
    return seconds * max(1.0, load / (os.cpu_count() or 1))


def _offline_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR")}
    env.update(GSPO_CACHE=str(cache), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_SILENT="true",
               TRANSFORMERS_VERBOSITY="error", COLUMNS="200")
    return env


@pytest.fixture(scope="session")
def gspo_env(tmp_path_factory) -> dict[str, str]:
    """The environment of every gspo run in the tests (also applied to this process for the session)."""
    env = _offline_env(tmp_path_factory.mktemp("gspo_cache"))
    mp = pytest.MonkeyPatch()
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR"):
        mp.delenv(key, raising=False)
    for key in ("GSPO_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "WANDB_SILENT", "TRANSFORMERS_VERBOSITY"):
        mp.setenv(key, env[key])
    yield env
    mp.undo()


@pytest.fixture(scope="session")
def cold_start(gspo_env) -> Path:
    """Build the TINY cold start once per session; every later TINY run loads it from the cache."""
    from gspo.conf import compose_config
    from gspo.trainer.coldstart import cold_start_path
    from gspo.trainer.policy import tiny_spec

    return cold_start_path(tiny_spec(compose_config(TINY)), None, log=lambda _m: None)


class Gspo:
    """Runs `gspo train` on TINY in-process (Typer's CliRunner) or as the console script."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.runner = CliRunner()

    def invoke(self, *args: str):
        """`gspo <args>` in-process; returns click's Result (exit_code, stdout, stderr, exception)."""
        from gspo.cli.main import app

        return self.runner.invoke(app, list(args), env={"COLUMNS": "200"})

    def train(self, out: Path, run_id: str, *overrides: str) -> Path:
        """A finished TINY run `out/run_id` (in-process); fails the test if the command fails."""
        result = self.invoke("train", "-q", *TINY, f"output_dir={out}", f"run_id={run_id}", *overrides)
        assert result.exit_code == 0, (result.exception, result.output)
        return out / run_id

    def subprocess(self, *args: str, cwd: Path | None = None, timeout: float | None = 300) -> subprocess.CompletedProcess:
        """The installed console script `gspo <args>`, with captured text output: the one installed beside the
        interpreter running the tests (a venv's, whether or not it is on PATH: .ci/vllm runs its venv's python
        without activating it, and the `gspo` on PATH was then the main environment's, which has no vLLM).
        `timeout`: seconds on a quiet machine, stretched by its load (load_scaled); None: no limit, for bounded work."""
        return subprocess.run([CONSOLE_SCRIPT, *args], cwd=cwd, env=self.env, capture_output=True, text=True,
                              timeout=None if timeout is None else load_scaled(timeout), check=False)

    def batch(self, commands: list[tuple[list[str], Path]], timeout: float = 600) -> list[subprocess.CompletedProcess]:
        """Several `gspo <args>` (each in its folder) one after another in one fresh interpreter, through the
        console script's own entry point (gspo.cli.entry.main: its one-line errors and exit codes): the
        interpreter's start and imports are paid once, not per command. Each gives what `subprocess` would:
        an exception escaping the entry point is a traceback and exit 1, as Python's would be."""
        import json

        todo = json.dumps([{"args": list(args), "cwd": str(cwd)} for args, cwd in commands])
        proc = subprocess.run([sys.executable, "-c", _BATCH], input=todo, env=self.env, capture_output=True, text=True,
                              timeout=load_scaled(timeout), check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [subprocess.CompletedProcess(["gspo", *c["args"]], c["code"], c["stdout"], c["stderr"])
                for c in json.loads(proc.stdout.splitlines()[-1])]


# Gspo.batch's interpreter: runs each command through the console script's entry point, in its own folder.
_BATCH = """
import contextlib, io, json, os, sys, traceback
from gspo.cli.entry import main
done = []
for cmd in json.loads(sys.stdin.read()):
    out, err, code = io.StringIO(), io.StringIO(), 0
    os.chdir(cmd["cwd"])
    sys.argv = ["gspo", *cmd["args"]]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    done.append({"args": cmd["args"], "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(done))
"""


@pytest.fixture(scope="session")
def gspo(gspo_env, cold_start) -> Gspo:
    return Gspo(gspo_env)


@pytest.fixture(scope="session")
def finished_run(gspo, tmp_path_factory) -> Path:
    """A finished two-step TINY run with LEARNING_SEED, shared by the session: read it, never write to it."""
    return gspo.train(tmp_path_factory.mktemp("runs"), "finished", f"seed={LEARNING_SEED}", "train.steps=2")


@pytest.fixture(scope="session")
def sweep_dir(gspo, tmp_path_factory) -> Path:
    """`gspo sweep algo=grpo,gspo seed=0,1 train.steps=2` on TINY (the console script), shared by the
    session and, under xdist, by every worker (the first to need it builds it under a lock in the session's
    shared tmp root; the others wait and read it): four finished runs under <tmp>/runs, the sweep folder
    returned. Read it, never write to it. No wall-clock limit: the work is bounded (four 2-step TINY runs), and on
    a runner at load 15-25 a fixed 300 s limit failed every test that uses it while the sweep finished seconds later."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # <basetemp>/popen-gwN: the parent is the session's, common to the workers
    cwd, done = shared / "shared-sweep", shared / "shared-sweep.done"
    with FileLock(str(shared / "shared-sweep.lock")):
        if not done.exists():
            cwd.mkdir(exist_ok=True)
            result = gspo.subprocess("sweep", *TINY, "algo=grpo,gspo", "seed=0,1", "train.steps=2",
                                     "logger.progress=false", f"output_dir={cwd / 'runs'}", "hydra.sweep.dir=sweep",
                                     cwd=cwd, timeout=None)
            assert result.returncode == 0, result.stderr[-3000:]
            assert f"gspo report sweep --out {Path('sweep') / 'report'}" in result.stdout
            done.touch()
    return cwd / "sweep"

"""Data-parallel training under torchrun (gloo, 2 CPU processes) against one process on the same seed: the
weights after a step and every logged metric agree within 1e-6 relative; bad layouts are refused in one
line; a failing rank's error lands in run.json; a killed 2-process run resumes where it stopped.

Each torchrun start costs two fresh interpreters (~10 s of CPU each on 2 cores), so the runs are one to three
TINY steps."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import LEARNING_SEED, TINY, without_timing
from safetensors.torch import load_file

from gspo.trainer.distributed import RowShard, World, check_layout, group_range
from gspo.trainer.rundir import read_jsonl

pytestmark = pytest.mark.slow

RTOL = 1e-6
# Log-ratio statistics: a log-ratio is a difference of two nearly equal fp32 log-probs, so the last-bit
# differences of log-probs computed in other batch compositions (a rank's rows, not all of them) come out
# magnified; measured over 3 steps of GRPO and GSPO: up to 2.6e-4 relative (policy/kl_old ~5e-6,
# diag/seq_logratio_var ~1.5e-7). loss/policy joins them: at the first update every ratio is 1 up to that
# last-bit noise and a group's advantages sum to 0, so the loss is sum_i A_i (ratio_i - 1) / N, a log-ratio
# statistic too (GSPO, lean sampler's old log-probs: 4.2e-5 relative). Every other metric, and the weights,
# stay within RTOL.
LOG_RATIO_STATS, LOG_RATIO_RTOL = ("diag/", "policy/kl_old", "loss/policy"), 1e-3


def _torchrun(gspo, nproc: int, *args: str, script: Path | None = None, timeout: float = 300):
    """`torchrun --standalone --nproc-per-node N -m gspo.cli.main train ...` (or a wrapper script)."""
    target = [str(script)] if script else ["-m", "gspo.cli.main"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *target,
           "train", "-q", *TINY, *args]
    return subprocess.run(cmd, env=gspo.env | {"OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _close(key: str, a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a == b
    return math.isclose(a, b, rel_tol=LOG_RATIO_RTOL if key.startswith(LOG_RATIO_STATS) else RTOL, abs_tol=0.0)


def _assert_rows_match(one: list[dict], two: list[dict]) -> None:
    one, two = without_timing(one), without_timing(two)
    assert [sorted(r) for r in one] == [sorted(r) for r in two]
    bad = [(r["step"], k, r[k], s[k]) for r, s in zip(one, two, strict=True) for k in r if not _close(k, r[k], s[k])]
    assert not bad, bad


def _weights(run: Path) -> dict[str, torch.Tensor]:
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    return load_file(latest / "model.safetensors")


@pytest.mark.parametrize("algo, extra", [("grpo", ("train.micro_batch_size=1",)), ("gspo", ())])
def test_two_processes_give_the_one_process_step(gspo, tmp_path, algo, extra):
    """One step of GRPO (with gradient accumulation) and of GSPO: same weights, same metrics rows (training
    and eval; log-ratio statistics within LOG_RATIO_RTOL), same samples. The step learns (a group has a right and a wrong answer), so the comparison
    has something to compare; each rank holds one of the two groups."""
    common = (f"algo={algo}", f"seed={LEARNING_SEED}", "train.steps=1", *extra)
    one = gspo.train(tmp_path, "one", *common)
    result = _torchrun(gspo, 2, *common, f"output_dir={tmp_path}", "run_id=two")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("run finished:") == 1  # rank 0 alone speaks
    two = tmp_path / "two"

    rows = read_jsonl(one / "metrics.jsonl")
    assert rows[1]["optim/grad_norm"] > 0 and rows[1]["reward/frac_zero_std_groups"] < 1
    _assert_rows_match(rows, read_jsonl(two / "metrics.jsonl"))
    assert read_jsonl(one / "evals.jsonl") == read_jsonl(two / "evals.jsonl")
    assert read_jsonl(one / "samples.jsonl") == read_jsonl(two / "samples.jsonl")
    a, b = _weights(one), _weights(two)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=RTOL, atol=0.0, msg=k)
    assert json.loads((two / "run.json").read_text())["status"] == "finished"


def test_more_ranks_than_groups_is_one_line_and_writes_nothing(gspo, tmp_path):
    result = _torchrun(gspo, 3, f"output_dir={tmp_path}", "run_id=r", timeout=120)
    assert result.returncode != 0 and "exitcode  : 2" in result.stderr  # every rank exits 2 (torchrun's summary)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines == ["error: 3 processes but train.prompts_per_step=2 groups: each rank needs at least one whole "
                     "group (a prompt's 4 completions never split); use at most 2 processes or raise "
                     "train.prompts_per_step"]
    assert not (tmp_path / "r").exists()


def test_layouts_that_do_not_split_into_whole_groups_are_refused():
    from gspo.conf import compose_config
    from gspo.conf.errors import GspoError

    cfg = compose_config([*TINY, "train.prompts_per_step=3"])
    with pytest.raises(GspoError, match=r"^train.prompts_per_step=3 groups do not divide across 2 processes"):
        check_layout(cfg.train, World(0, 2))
    with pytest.raises(GspoError, match=r"^4 processes but train.prompts_per_step=3 groups"):
        check_layout(cfg.train, World(0, 4))
    with pytest.raises(GspoError, match=r"on_nonfinite=skip runs in one process only"):
        check_layout(compose_config([*TINY, "train.on_nonfinite=skip"]).train, World(1, 2))
    vllm_tp = compose_config([*TINY, "rollout=vllm", "rollout.tensor_parallel_size=2"]).rollout
    with pytest.raises(GspoError, match=r"^rollout.tensor_parallel_size=2 with 2 processes: .*colocated"):
        check_layout(cfg.train, World(0, 2), vllm_tp)
    check_layout(cfg.train, World(0, 3))
    check_layout(cfg.train, World(0, 1))


def test_a_rank_holds_whole_groups_and_sees_the_global_minibatch():
    shard = RowShard(first=4, n=4, lengths=[3, 1, 2, 5, 4, 4, 1, 2], world=World(1, 2))
    assert group_range(4, World(1, 2)) == range(2, 4)
    assert shard.local([7, 0, 4, 3, 5]) == [3, 0, 1]  # global rows 7, 4, 5 in the minibatch's order
    assert shard.local([0, 1, 2]) == []


FAIL_ON_RANK1 = """
import os, sys
from gspo.trainer import loop
real = loop.train_step

def step(step, *args, **kwargs):
    if step == 2 and os.environ["RANK"] == "1":
        raise RuntimeError("injected failure on rank 1")
    return real(step, *args, **kwargs)

loop.train_step = step
from gspo.cli.main import main
sys.argv = ["gspo", *sys.argv[1:]]
main()
"""


def test_a_failing_rank_ends_the_job_with_its_error_in_run_json(gspo, tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(FAIL_ON_RANK1)
    result = _torchrun(gspo, 2, "train.steps=3", f"output_dir={tmp_path}", "run_id=r", script=script)
    assert result.returncode != 0
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["status"] == "failed" and info["failed_rank"] == 1, info
    assert info["error"] == "rank 1: RuntimeError: injected failure on rank 1"
    assert [r["step"] for r in read_jsonl(tmp_path / "r" / "metrics.jsonl")] == [0, 1]


KILL_AFTER_CHECKPOINT = """
import os, signal, sys
from gspo.trainer import loop
real = loop.save_checkpoint

def save(run, step, *args, **kwargs):
    out = real(run, step, *args, **kwargs)
    if step == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # rank 0 dies at once; torchrun then stops rank 1
    return out

loop.save_checkpoint = save
from gspo.cli.main import main
sys.argv = ["gspo", *sys.argv[1:]]
main()
"""


def test_a_killed_two_process_run_resumes_like_an_uninterrupted_one(gspo, tmp_path):
    """SIGKILL of rank 0 right after the checkpoint of step 2; the resumed 2-process run ends with exactly the
    rows and weights of an uninterrupted 2-process run, as the one-process resume test asks of one process.
    (Against one process, after 3 steps the diag/ variances of log-ratios agree to ~1e-5 only: a log-ratio is
    a difference of two nearly equal log-probs, which magnifies their last-bit differences.)"""
    common = (f"seed={LEARNING_SEED}", "train.steps=3", "train.save_every=1", "train.eval_every=1")
    script = tmp_path / "kill.py"
    script.write_text(KILL_AFTER_CHECKPOINT)
    killed = _torchrun(gspo, 2, *common, f"output_dir={tmp_path}", "run_id=r", script=script)
    assert killed.returncode != 0
    run = tmp_path / "r"
    info = json.loads((run / "run.json").read_text())  # rank 0 had no time to say more; rank 1 lost it
    assert info["status"] == "running" or info["error"].startswith("rank 1: "), info
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_000002"
    resumed = _torchrun(gspo, 2, *common, f"output_dir={tmp_path}", "run_id=r", "resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight = _torchrun(gspo, 2, *common, f"output_dir={tmp_path}", "run_id=straight")
    assert straight.returncode == 0, straight.stderr[-3000:]

    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert without_timing(rows) == without_timing(read_jsonl(tmp_path / "straight" / "metrics.jsonl"))
    assert rows[1]["optim/grad_norm"] > 0
    a, b = _weights(tmp_path / "straight"), _weights(run)
    assert all(torch.equal(a[k], b[k]) for k in a)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished" and info["step"] == 3 and info["failed_rank"] is None and info["world_size"] == 2


@pytest.mark.parametrize("name, nodes", [("slurm_1x8", 1), ("slurm_2x8", 2)])
def test_slurm_launcher_configs_compose(gspo, name, nodes):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    result = gspo.invoke("train", "--cfg", "hydra", f"hydra/launcher={name}")
    assert result.exit_code == 0, result.output
    launcher = yaml.safe_load(result.output)["hydra"]["launcher"]
    assert (launcher["nodes"], launcher["tasks_per_node"], launcher["gpus_per_node"]) == (nodes, 8, 8)
    assert launcher["_target_"].endswith("SlurmLauncher")


def test_a_slurm_launcher_without_its_plugin_is_one_line(gspo, tmp_path, monkeypatch):
    from gspo.cli import sweep
    from gspo.conf.errors import GspoError

    monkeypatch.setattr(sweep, "plugin_installed", lambda module: False)
    result = gspo.invoke("sweep", "hydra/launcher=slurm_2x8", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                         f"output_dir={tmp_path / 'runs'}")
    assert isinstance(result.exception, GspoError)
    assert str(result.exception) == ("hydra/launcher=slurm_2x8 needs Hydra's submitit launcher plugin, which is not "
                                     "installed: pip install 'gspo[submitit]'")
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "runs").exists()


def test_a_slurm_task_becomes_a_rank(monkeypatch):
    """Task 9 of a 2-node x 8-task Slurm step gets torchrun's variables from Slurm's (through submitit)."""
    pytest.importorskip("submitit")
    from gspo.trainer.distributed import export_slurm_world, world_from_env

    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE"):
        # set first, so monkeypatch removes what export_slurm_world writes (a bare delenv of an absent key is
        # not undone, and a leaked WORLD_SIZE=16 would make later in-process runs wait for 15 ranks)
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    slurm = {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "42", "SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_STEP_NUM_TASKS": "16",
             "SLURM_LOCALID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1",
             "SLURM_JOB_NODELIST": "gpu[07-08]"}
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    export_slurm_world()
    assert world_from_env() == World(rank=9, size=16, local_rank=1)
    assert os.environ["MASTER_ADDR"] == "gpu07"

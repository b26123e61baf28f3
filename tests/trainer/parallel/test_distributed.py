"""Data-parallel training under torchrun (gloo, 2 CPU processes) against one process on the same seed: the
weights after a step and every logged metric agree within 1e-6 relative; bad layouts are refused in one
line; a failing rank's error lands in run.json; a killed 2-process run resumes where it stopped.

Both sides of every comparison run the same forwards in the same shapes (SAME_FORWARDS) and the same number of
threads per process (torchrun gives each rank one; the one-process run is pinned to one too): only then does
every kernel see exactly the same inputs. On CPUs whose kernels round differently with the thread count (seen
with MKL's AVX code path, which MKL_ENABLE_INSTRUCTIONS=AVX selects on any x86 machine: the attention of the
sampler's decode step, at 2 threads against 1, moved log-ratio statistics by 3e-6 relative), a one-process run
at another thread count is equal only to rounding.

Each torchrun start costs two fresh interpreters (~10 s of CPU each on 2 cores), so the runs are one to three
TINY steps."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import LEARNING_SEED, TINY, without_timing
from ranks import RTOL, SAME_FORWARDS
from ranks import assert_rows_match as _assert_rows_match
from ranks import one_process as _one_process
from ranks import torchrun as _torchrun
from ranks import weights as _weights
from safetensors.torch import load_file

from gspo.trainer.parallel.distributed import World, check_layout, group_range, mine
from gspo.trainer.run.rundir import read_jsonl
from gspo.trainer.step.update import micro_batches

pytestmark = pytest.mark.slow

@pytest.mark.parametrize("algo, extra", [("grpo", ("train.micro_batch_size=1",)),
                                         ("gspo", ("train.micro_batch_size=2",)),
                                         ("gspo", ("train.micro_batch_size=2", "algo.old_logp_source=recompute"))])
def test_two_processes_give_the_one_process_step(gspo, tmp_path, algo, extra):
    """One step of GRPO (4 micro-batches per minibatch: 2 per rank) and of GSPO (2: one per rank; old
    log-probs from the sampler, and from a scoring pass dealt across ranks): the same weights and every
    metric of the training and eval rows within 1e-6 relative, log-ratio statistics and the loss included;
    the same samples. The step learns (a group has a right and a wrong answer), so the comparison has
    something to compare; each rank generates one of the two groups."""
    common = (f"algo={algo}", f"seed={LEARNING_SEED}", "train.steps=1", *SAME_FORWARDS, *extra)
    one = _one_process(gspo, tmp_path, *common)
    result = _torchrun(gspo, 2, *common, f"output_dir={tmp_path}", "run_id=two")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("run finished:") == 1  # rank 0 alone speaks
    two = tmp_path / "two"

    rows = read_jsonl(one / "metrics.jsonl")
    assert rows[1]["optim/grad_norm"] > 0 and rows[1]["reward/frac_zero_std_groups"] < 1
    _assert_rows_match(rows, read_jsonl(two / "metrics.jsonl"))
    assert without_timing(read_jsonl(one / "evals.jsonl")) == without_timing(read_jsonl(two / "evals.jsonl"))
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
    dynamic = compose_config([*TINY, "algo=dapo"])  # DAPO's dynamic sampling: one process only
    with pytest.raises(GspoError, match=r"^rollout.dynamic_sampling runs in one process only"):
        check_layout(dynamic.train, World(0, 2), dynamic.rollout)
    check_layout(dynamic.train, World(0, 1), dynamic.rollout)
    check_layout(cfg.train, World(0, 3))
    check_layout(cfg.train, World(0, 1))


def test_moe_routing_replay_on_two_processes_gives_the_one_process_step(gspo, tmp_path):
    """tiny-moe with Routing Replay: the experts recorded in the scoring pass dealt across ranks are summed into
    every rank's record (RoutingRecorder.share), and the update's replayed routing and moe/* metrics are the
    one-process ones: weights and every metric within 1e-6 after a step that learns. One micro-batch per rank
    per minibatch: the ranks' gradients then add up in the only order two terms have, so the second update
    starts from the one-process weights (with more, the sums' association differs, the weights by ~1e-8
    relative, and statistics of log-ratios, differences of nearly equal log-probs, magnify that to ~1e-5:
    measured on this model with 2 micro-batches per rank)."""
    common = ("model=tiny-moe", "algo=grpo_replay", "algo.old_logp_source=recompute", "seed=1", "train.steps=1",
              "train.prompts_per_step=4", "train.group_size=4", "train.minibatches=2", "train.micro_batch_size=4",
              "rollout.batch_size=8", "task.eval_size=8", "train.eval_every=0", "logger=local")
    env = gspo.env | {"OMP_NUM_THREADS": "1"}  # both runs: one thread per process (the matmuls' summation order)
    for run_id, launcher in (("one", []), ("two", ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"])):
        cmd = [sys.executable, *launcher, "-m", "gspo.cli.main", "train", "-q", *common, f"output_dir={tmp_path}",
               f"run_id={run_id}"]
        # the first run builds tiny-moe's cold start at one thread: minutes on a loaded 2-core machine
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    rows = read_jsonl(tmp_path / "one" / "metrics.jsonl")
    assert rows[1]["optim/grad_norm"] > 0 and rows[1]["moe/routing_changed_frac"] > 0
    _assert_rows_match(rows, read_jsonl(tmp_path / "two" / "metrics.jsonl"))
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=RTOL, atol=0.0, msg=k)


@pytest.mark.parametrize("overrides, message", [
    ((), r"^train.fsdp=true shards the model across processes: launch it under torchrun"),
    (("model.lora.r=8",), r"^train.fsdp=true with LoRA"),
    (("train.precision=fp16",), r"^train.fsdp=true with train.precision=fp16"),
    (("model.dtype=bfloat16",), r"^train.fsdp=true with model.dtype=bfloat16"),
    (("train.compile=true",), r"^train.fsdp=true with train.compile=true"),
])
def test_fsdp_settings_it_cannot_run_are_refused(overrides, message):
    from gspo.conf import compose_config
    from gspo.conf.errors import GspoError
    from gspo.trainer.parallel.fsdp import check

    world = World(0, 1) if not overrides else World(0, 2)
    with pytest.raises(GspoError, match=message):
        check(compose_config([*TINY, "train.fsdp=true", *overrides]), world)
    check(compose_config([*TINY, "train.fsdp=true"]), World(0, 2))
    check(compose_config([*TINY, *overrides]), World(0, 1))  # without fsdp: not this check's business


def test_fsdp_trains_in_bf16_with_a_sharded_reference_and_every_rank_exits_cleanly(gspo, tmp_path):
    """GSPO with a KL term under FSDP in bf16 (MixedPrecisionPolicy over fp32 shards; the reference model
    sharded too, its forwards dealt like the policy's): two steps finish with finite, moving numbers. Run three
    times in a row: every time both ranks exit 0 with no abort at teardown (a rank once died at exit with
    "terminate called without an active exception" in a full suite run), and the runs are the same run."""
    runs = []
    for attempt in range(3):
        result = _torchrun(gspo, 2, f"seed={LEARNING_SEED}", "train.steps=2", "algo=gspo", "algo.kl_beta=0.01",
                           "train.precision=bf16", "train.fsdp=true", f"output_dir={tmp_path}", f"run_id=bf{attempt}")
        assert result.returncode == 0, (attempt, result.stderr[-3000:])
        assert "terminate called" not in result.stderr and "exitcode" not in result.stderr, (attempt, result.stderr)
        runs.append(read_jsonl(tmp_path / f"bf{attempt}" / "metrics.jsonl"))
    rows = runs[0]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[1]["optim/grad_norm"] > 0 and rows[2]["policy/kl_ref"] > 0
    assert all(math.isfinite(v) for r in rows[1:] for v in r.values() if isinstance(v, float))
    assert without_timing(runs[1]) == without_timing(rows) == without_timing(runs[2])


def test_a_rank_holds_whole_groups_and_is_dealt_whole_micro_batches():
    """Plain data parallelism deals a minibatch's micro-batches in contiguous blocks (a rank's gradients
    accumulate in one process's order before the all_reduce), FSDP and scoring round-robin."""
    assert group_range(4, World(1, 2)) == range(2, 4)
    idx = [7, 0, 4, 3, 5, 1]
    assert micro_batches(idx, 2, World(0, 2)) == [[7, 0], [4, 3], [5, 1]]  # what one process runs
    assert micro_batches(idx, None, World(0, 1)) == [idx]  # unset: the whole minibatch in one process
    assert micro_batches(idx, None, World(0, 4)) == [[7, 0], [4, 3], [5, 1]]  # ... 1/W of it (rounded up)
    assert [k for k in range(3) if mine(k, World(1, 2))] == [1]  # round-robin (scoring chunks, FSDP): k mod W
    assert [k for k in range(5) if mine(k, World(0, 2), 5)] == [0, 1, 2]  # contiguous blocks of ceil(n / W)
    assert [k for k in range(5) if mine(k, World(1, 2), 5)] == [3, 4]


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
    from gspo.conf.errors import GspoError
    from gspo.study import launch as sweep

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
    from gspo.trainer.parallel.distributed import export_slurm_world, world_from_env

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


def test_fsdp_gives_the_one_process_step(gspo, tmp_path):
    """FSDP2 (train.fsdp=true, 2 gloo processes, each decoder layer and the root sharded) against one process
    without it, one GRPO step with 4 micro-batches per minibatch: the same weights (the final checkpoint's
    gathered model.safetensors) and every metric within 1e-6 relative."""
    common = ("algo=grpo", f"seed={LEARNING_SEED}", "train.steps=1", *SAME_FORWARDS, "train.micro_batch_size=1")
    one = _one_process(gspo, tmp_path, *common)
    result = _torchrun(gspo, 2, *common, "train.fsdp=true", f"output_dir={tmp_path}", "run_id=fsdp")
    assert result.returncode == 0, result.stderr[-3000:]
    two = tmp_path / "fsdp"
    rows = read_jsonl(one / "metrics.jsonl")
    assert rows[1]["optim/grad_norm"] > 0
    _assert_rows_match(rows, read_jsonl(two / "metrics.jsonl"))
    assert without_timing(read_jsonl(one / "evals.jsonl")) == without_timing(read_jsonl(two / "evals.jsonl"))
    a, b = _weights(one), _weights(two)
    assert sorted(a) == sorted(b)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=RTOL, atol=0.0, msg=k)
    latest = two / "checkpoints" / "step_000001"
    assert (latest / "dcp" / ".metadata").is_file()  # the shards, beside the gathered weights


KILL_AFTER_SHARDED_CHECKPOINT = """
import os, signal, sys
from gspo.trainer import loop
real = loop.save_sharded_checkpoint

def save(run, step, *args, **kwargs):
    out = real(run, step, *args, **kwargs)
    if step == 2 and os.environ["RANK"] == "0":
        os.kill(os.getpid(), signal.SIGKILL)  # rank 0 dies once every rank has written its shards
    return out

loop.save_sharded_checkpoint = save
from gspo.cli.main import main
sys.argv = ["gspo", *sys.argv[1:]]
main()
"""


def test_a_killed_fsdp_run_resumes_exactly_and_its_shards_convert_for_gspo_eval(gspo, tmp_path):
    """Rank 0 SIGKILLed right after the sharded checkpoint of step 2 of 3; resumed under torchrun, the run ends
    with the rows and weights of an uninterrupted FSDP run. The killed run's step-2 checkpoint (shards only)
    converts with gspo export-hf into a folder with the weights the uninterrupted run's step-2 shards convert
    to, not its final ones, which gspo eval reads; gspo eval eval.run= on a shards-only checkpoint says to
    convert it, in one line."""
    common = (f"seed={LEARNING_SEED}", "train.steps=3", "train.save_every=1", "train.eval_every=0",
              "train.keep_checkpoints=3", "train.fsdp=true", *SAME_FORWARDS, "train.micro_batch_size=2")
    script = tmp_path / "kill.py"
    script.write_text(KILL_AFTER_SHARDED_CHECKPOINT)
    killed = _torchrun(gspo, 2, *common, f"output_dir={tmp_path}", "run_id=r", script=script)
    assert killed.returncode != 0
    run = tmp_path / "r"
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_000002"
    step2 = tmp_path / "step2-hf"
    exported = gspo.subprocess("export-hf", str(run / "checkpoints" / "step_000002"), str(step2))
    assert exported.returncode == 0, exported.stderr
    refused = gspo.subprocess("eval", f"eval.run={run}", "eval.benches=[arith]")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "holds FSDP shards only: gspo export-hf" in refused.stderr

    resumed = _torchrun(gspo, 2, *common, f"output_dir={tmp_path}", "run_id=r", "resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight = _torchrun(gspo, 2, *common, f"output_dir={tmp_path}", "run_id=straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3] and rows[1]["optim/grad_norm"] > 0
    assert without_timing(rows) == without_timing(read_jsonl(tmp_path / "straight" / "metrics.jsonl"))
    a, b = _weights(tmp_path / "straight"), _weights(run)
    assert all(torch.equal(a[k], b[k]) for k in a)

    again = tmp_path / "step2-straight"
    assert gspo.subprocess("export-hf", str(tmp_path / "straight" / "checkpoints" / "step_000002"),
                           str(again)).returncode == 0
    x, y = load_file(step2 / "model.safetensors"), load_file(again / "model.safetensors")
    assert sorted(x) == sorted(y) and all(torch.equal(x[k], y[k]) for k in x)
    assert not all(torch.equal(x[k], a[k]) for k in x)  # step 2's weights, not step 3's
    evaluated = gspo.subprocess("eval", "model=hf", f"model.name={step2}", "model.chat_template=false", *TINY,
                                "eval.benches=[arith]",
                                "eval.limit=4", f"eval.output={tmp_path / 'ev'}", "logger=local")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]

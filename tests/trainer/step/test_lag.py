"""rollout.lag (trainer/step/lagged.py): lag 0 is today's loop; under lag k the batch of step t is drawn by the
weights of step t - k, its log-probs are that behaviour policy's, and the step's ratios, corrections and metrics
read them against the trainer's weights at step t's start (checked by hand from the run's own checkpoints)."""

from __future__ import annotations

import pytest
import torch
from conftest import LEARNING_SEED, TINY, without_timing
from safetensors.torch import load_file

from gspo.conf import GspoError, compose_config
from gspo.trainer.model.precision import Precision
from gspo.trainer.parallel.distributed import World
from gspo.trainer.policy import load_policy
from gspo.trainer.run.rundir import read_jsonl
from gspo.trainer.step.lagged import PENDING, LaggedBatches, behaviour_version, check_lag
from gspo.trainer.step.scoring import score
from gspo.vocab import metrics as M


def test_behaviour_versions_of_a_lag():
    # step t's batch: the weights after max(0, t - 1 - k) updates; the first k + 1 steps read the start model
    assert [behaviour_version(t, 0) for t in range(1, 5)] == [0, 1, 2, 3]
    assert [behaviour_version(t, 2) for t in range(1, 7)] == [0, 0, 0, 1, 2, 3]


def test_lag_zero_is_todays_loop(gspo, tmp_path, finished_run):
    """finished_run is the session's 2-step run without the option; the same run with rollout.lag=0 written out
    logs the same rows and saves the same weights and optimizer state, to the last bit."""
    run = gspo.train(tmp_path, "lag0", f"seed={LEARNING_SEED}", "train.steps=2", "rollout.lag=0")
    assert without_timing(read_jsonl(run / "metrics.jsonl")) == without_timing(read_jsonl(finished_run / "metrics.jsonl"))
    assert not any(k.startswith("lag/") for r in read_jsonl(run / "metrics.jsonl") for k in r)
    ours, theirs = (load_file(r / "checkpoints" / "step_000002" / "model.safetensors") for r in (run, finished_run))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    a, b = (torch.load(r / "checkpoints" / "step_000002" / "optimizer.pt", weights_only=True)["optimizer"]["state"]
            for r in (run, finished_run))
    assert all(torch.equal(a[i][k], b[i][k]) for i in a for k in a[i])
    assert not (run / "checkpoints" / "step_000002" / PENDING).exists()


def _scored(cfg, model, rollout) -> torch.Tensor:
    precision = Precision(model, "fp32", torch.device("cpu"))
    return score(model, rollout, precision=precision, train=cfg.train, sampling=cfg.rollout)[0]


LAGGED = (f"seed={LEARNING_SEED}", "train.steps=3", "rollout.lag=2", "train.save_every=1", "algo=grpo",
          "algo.old_logp_source=engine", "algo.correction.kind=tis")


def test_lag_k_reads_its_ratios_against_the_policy_k_steps_before(gspo, tmp_path):
    """lag 2, GRPO with token-level TIS: step 3's batch (pending in the checkpoint of step 2) was drawn by the start
    model, and step 3's correction weights rho = pi_old / pi_s and the logged gap are those of step 2's weights
    (pi_old) against the start model's (pi_s), recomputed here by scoring the batch under each."""
    run = gspo.train(tmp_path, "lag2", *LAGGED)
    cfg = compose_config([*TINY, *LAGGED])
    rows = {r["step"]: r for r in read_jsonl(run / "metrics.jsonl")}
    assert [rows[t][M.LAG_BEHIND] for t in (1, 2, 3)] == [0.0, 1.0, 2.0]
    pending = torch.load(run / "checkpoints" / "step_000002" / PENDING, weights_only=True)
    assert pending["lag"] == 2 and sorted(pending["batches"]) == [3, 4]
    batch = pending["batches"][3]
    assert batch["version"] == 0
    from gspo.trainer.engines.rollout import Rollout

    rollout = Rollout(**batch["rollout"])
    mask = rollout.completion_mask.bool()
    start = load_policy(cfg)[0]
    pi_s = _scored(cfg, start, rollout)
    assert torch.allclose(pi_s[mask], rollout.engine_logp[mask], atol=1e-5)  # the start model drew it
    pi_old = _scored(cfg, load_policy(cfg, path=str(run / "checkpoints" / "step_000002"))[0], rollout)
    gap = (pi_old - pi_s)[mask]
    assert gap.abs().max() > 1e-3  # two updates moved the policy: the lag is visible
    row = rows[3]
    assert row[M.MISMATCH_LOGP] == pytest.approx(gap.abs().mean().item(), rel=1e-3)
    assert row[M.LAG_GAP_MAX] == pytest.approx(gap.abs().max().item(), rel=1e-3)
    assert row[M.CORRECTION_MEAN] == pytest.approx(gap.exp().mean().item(), rel=1e-5)
    assert row[M.CORRECTION_MAX] == pytest.approx(gap.exp().max().item(), rel=1e-4)
    assert row[M.LAG_TOKEN_STD] == pytest.approx(gap.exp().std(correction=0).item(), rel=1e-2)
    card = (run / "estimator.txt").read_text()
    assert "rollout.lag=2" in card and "correction's rho is pi_old / pi_s" in card


@pytest.mark.slow
def test_resume_reads_the_pending_batches_back(gspo, tmp_path):
    """A 3-step lag-1 run extended to 4 steps by a resume (its checkpoint of step 3 holds batch 4, drawn while
    step 3 updated) logs the rows and weights of an uninterrupted 4-step run."""
    common = (f"seed={LEARNING_SEED}", "rollout.lag=1", "train.eval_every=0")
    whole = gspo.train(tmp_path, "whole", *common, "train.steps=4")
    part = gspo.train(tmp_path, "part", *common, "train.steps=3")
    result = gspo.invoke("train", "-q", f"resume={part}", "train.steps=4")
    assert result.exit_code == 0, (result.exception, result.output)
    def rows(r):  # the 3-step run evaluated at its last step, 3: its eval keys there are its own
        return [{k: v for k, v in row.items() if not k.startswith("eval/")} for row in without_timing(
            read_jsonl(r / "metrics.jsonl"))]

    assert rows(part) == rows(whole)
    ours, theirs = (load_file(r / "checkpoints" / "step_000004" / "model.safetensors") for r in (part, whole))
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


@pytest.mark.parametrize(("override", "words"), [("rollout=vllm", "rollout.engine=vllm"),
                                                  ("train.compile=true", "train.compile")])
def test_a_lag_the_loop_cannot_honour_is_one_line(override, words):
    cfg = compose_config([*TINY, "rollout.lag=1", override])
    with pytest.raises(GspoError, match=f"rollout.lag=1 runs in one process.*{words}") as err:
        check_lag(cfg, World())
    assert "\n" not in str(err.value)
    check_lag(compose_config([*TINY, "rollout.lag=1"]), World())  # the default passes
    with pytest.raises(GspoError, match="rollout.lag"):
        compose_config([*TINY, "rollout.lag=-1"])


def test_a_resume_without_pending_batches_is_one_line(tmp_path, finished_run):
    cfg = compose_config([*TINY, "rollout.lag=1"])
    lagged = LaggedBatches.__new__(LaggedBatches)
    lagged.lag = 1
    with pytest.raises(GspoError, match="holds no pending batches"):
        lagged.load(finished_run / "checkpoints" / "step_000002", 2)
    assert cfg.rollout.lag == 1


PAUSE_IN_FLIGHT = """
import os, sys
from gspo.trainer.step import lagged
fd, at = int(sys.argv[1]), int(sys.argv[2])
real = lagged.LaggedBatches.take

def take(self, step):
    out = real(self, step)
    if step == at:  # batch at + 1 was just launched: in flight
        os.write(fd, b"%d\\n" % step)
        sys.stdin.read()  # paused until the test kills this process
    return out

lagged.LaggedBatches.take = take
from gspo.cli.main import main
sys.argv = ["gspo", *sys.argv[3:]]
main()
"""


@pytest.mark.slow
def test_sigkill_with_a_batch_in_flight_then_resume_equals_an_uninterrupted_run(gspo, tmp_path):
    """Killed in step 3 of a lag-1 run while batch 4 is being drawn (the last checkpoint, step 2's, holds batch 3):
    the resumed run ends with the rows and weights of an uninterrupted one."""
    import os
    import signal
    import subprocess
    import sys

    common = (*TINY, f"seed={LEARNING_SEED}", "rollout.lag=1", "train.steps=4", "train.save_every=2",
              "train.eval_every=2", "logger.progress=false")
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", PAUSE_IN_FLIGHT, str(w), "3", "train", *common,
                             f"output_dir={tmp_path}", "run_id=killed"], env=gspo.env, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as pipe:
        line = pipe.readline()
    if line.strip() != "3":
        proc.kill()
        raise AssertionError(proc.communicate()[1][-2000:])
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdin.close()
    run = tmp_path / "killed"
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_000002"
    result = gspo.subprocess("train", *common, f"output_dir={tmp_path}", "run_id=killed", "resume=true")
    assert result.returncode == 0, result.stderr[-2000:]
    straight = gspo.train(tmp_path, "straight", *common[len(TINY):])
    assert without_timing(read_jsonl(run / "metrics.jsonl")) == without_timing(read_jsonl(straight / "metrics.jsonl"))
    ours, theirs = (load_file(p / "checkpoints" / "step_000004" / "model.safetensors") for p in (run, straight))
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)

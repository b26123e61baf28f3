"""Non-finite guards: the update that would apply a NaN/inf never reaches the weights; a run with
`train.lr=1e9` stops at the first non-finite value, writes its dump and is marked failed."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TINY
from omegaconf import OmegaConf

from gspo.conf import GspoError, compose_config
from gspo.trainer.engines.rollout import Rollout
from gspo.trainer.model.models import build_tiny_qwen3
from gspo.trainer.model.precision import Precision
from gspo.trainer.run.guards import NonFinite
from gspo.trainer.run.rundir import read_jsonl
from gspo.trainer.state import make_optimizer
from gspo.trainer.step.context import StepContext
from gspo.trainer.step.update import Batch, run_updates


def _batch(advantages: list[float]) -> Batch:
    """N=4 sequences of 2 prompt and 3 completion tokens, every completion token real."""
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 5, 4, 3], [2, 1, 3, 3, 3], [2, 1, 4, 5, 6]])
    rollout = Rollout(input_ids=ids, attention_mask=torch.ones_like(ids), completion_mask=torch.ones(4, 3),
                      texts=["a"] * 4, truncated=torch.zeros(4, dtype=torch.bool))
    return Batch(rollout, torch.tensor(advantages), torch.full((4, 3), -2.0), None, [3, 3, 3, 3])


def _model_and_optimizer(*overrides: str):
    cfg = compose_config(["train.minibatches=2", "train.prompts_per_step=2", "train.group_size=2", "algo=grpo",
                          *overrides])
    model = build_tiny_qwen3(8, hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2, num_kv_heads=1,
                             seed=0)
    precision = Precision(model, "fp32", torch.device("cpu"))
    optimizer, scheduler = make_optimizer(precision.master, cfg.train)
    return cfg, model, precision, optimizer, scheduler


def _update_with(bad: float, cfg, model, precision, optimizer, scheduler):
    # the shuffle with seed 0 puts sequences 0 and 1 in the first minibatch: a finite update, applied
    with pytest.raises(NonFinite, match=r"optim/grad_norm, loss/policy in update 2") as err:
        ctx = StepContext(cfg.algo, cfg.train, cfg.rollout, model=model, precision=precision, optimizer=optimizer,
                          scheduler=scheduler)
        run_updates(ctx, _batch([1.0, -1.0, bad, 0.5]), seed=0, undoable=cfg.train.on_nonfinite == "skip")
    return err.value


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_nonfinite_update_never_reaches_the_weights(bad):
    cfg, model, precision, optimizer, scheduler = _model_and_optimizer()  # train.on_nonfinite=stop
    before = {k: v.clone() for k, v in model.state_dict().items()}
    err = _update_with(bad, cfg, model, precision, optimizer, scheduler)
    after_first = {k: v.clone() for k, v in model.state_dict().items()}
    assert any(not torch.equal(before[k], after_first[k]) for k in before)  # update 1 moved the weights
    assert all(torch.isfinite(v).all() for v in after_first.values())
    assert all(p.grad is None for p in model.parameters())  # the bad gradient is gone
    assert optimizer.state_dict()["state"][0]["step"] == 1  # and the optimizer took one step, not two
    assert set(err.dump["ratio_stats"]) >= {"ratio/token_mean", "clip/token_frac"}


def test_skip_undoes_the_whole_batch():
    cfg, model, precision, optimizer, scheduler = _model_and_optimizer("train.on_nonfinite=skip")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _update_with(float("nan"), cfg, model, precision, optimizer, scheduler)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # update 1 undone too
    assert optimizer.state_dict()["state"] == {} and scheduler.last_epoch == 0


# With TINY, step 1 has no learning signal and step 2 does; at lr=1e9 its first update overflows the second.
NONFINITE_SEED = 9


def test_lr_1e9_stops_at_the_first_nonfinite_value_with_a_dump(gspo, tmp_path):
    result = gspo.invoke("train", "-q", *TINY, f"seed={NONFINITE_SEED}", "train.steps=3", "train.lr=1e9",
                         f"output_dir={tmp_path}", "run_id=r")
    run = tmp_path / "r"
    assert isinstance(result.exception, GspoError)
    message = str(result.exception)
    assert message.startswith("step 2: optim/grad_norm in update 2; stopped before it reached the weights")
    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "failed" and status["error"].startswith("GspoError: step 2: optim/grad_norm")
    dump = json.loads((run / "nonfinite_step_000002.json").read_text())
    assert len(dump["prompts"]) == len(dump["completions"]) == len(dump["rewards"]) == 8
    assert "ratio/seq_max" in dump["ratio_stats"]
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1]  # the failed step is not logged
    assert not (run / "checkpoints").exists()


def test_skip_drops_the_batch_and_goes_on(gspo, tmp_path):
    run = gspo.train(tmp_path, "r", *TINY, f"seed={NONFINITE_SEED}", "train.steps=3", "train.lr=1e9",
                     "train.on_nonfinite=skip", "train.eval_every=0")
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3] and rows[2] == {"step": 2, "guard/skipped_batch": 1.0}
    assert (run / "nonfinite_step_000002.json").exists()
    assert OmegaConf.load(run / "config.yaml").train.on_nonfinite == "skip"

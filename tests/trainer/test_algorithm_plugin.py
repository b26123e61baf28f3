"""A new algorithm is its loss (registered with `algos.register`) and its preset: nothing in the trainer,
conf/ or the report names it. A throwaway one, registered here and given a preset through hydra.searchpath,
trains a step with its own loss."""

from __future__ import annotations

import json

import torch

from gspo.algos.common import masked_mean
from gspo.algos.registry import ALGOS, register
from gspo.vocab.metrics import LOSS_POLICY, reductions
from tests.conftest import LEARNING_SEED

CALLS: list[float] = []


def plain_pg_loss(*, logp, old_logp, advantages, mask, clip_low, clip_high):
    """The throwaway: an unclipped ratio-weighted policy gradient, -mean_t(r_t A); clip bounds unused."""
    loss = -masked_mean(torch.exp(logp - old_logp) * advantages.unsqueeze(-1), mask)
    CALLS.append(loss.item())
    return loss, {LOSS_POLICY: loss.detach()}


def test_a_new_algorithm_is_its_loss_and_its_preset(gspo, tmp_path):
    conf = tmp_path / "conf"
    (conf / "algo").mkdir(parents=True)
    (conf / "algo" / "plain_pg.yaml").write_text("name: plain_pg\nclip_low: 0.2\nclip_high: 0.2\n")  # unused by its loss
    register("plain_pg", metrics=reductions((LOSS_POLICY,)))(plain_pg_loss)
    CALLS.clear()
    try:
        run = gspo.train(tmp_path, "plain", f"seed={LEARNING_SEED}", "train.steps=1", "train.eval_every=0",
                         "logger.progress=false", f"hydra.searchpath=[file://{conf}]", "algo=plain_pg")
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert CALLS  # the update ran this loss, and logged what it returned
        assert any(row.get(LOSS_POLICY) is not None for row in rows)
        assert "algo:\n  name: plain_pg" in (run / "config.yaml").read_text()
    finally:
        del ALGOS["plain_pg"]

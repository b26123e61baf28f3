"""The metric catalogue (gspo/vocab/metrics.py) declares every metric a run logs, once, with what a report needs."""

from __future__ import annotations

import json

import pytest
import torch

from gspo.algos import ALGOS, correction_weights, mismatch_metrics, ratio_diagnostics
from gspo.trainer.step.update import UPDATE_METRICS
from gspo.vocab import metrics as catalogue


def _undeclared(names, task: str = "arith") -> list[str]:
    """Names the catalogue lacks; a family name counts only with a real part (reward/<task>, not reward/<typo>)."""
    out = []
    for name in names:
        metric = catalogue.lookup(name)
        if metric is None or (metric is catalogue.CATALOGUE[catalogue.REWARD_TASK.name] and name != f"reward/{task}"):
            out.append(name)
    return out


def test_a_finished_run_logs_only_catalogued_metrics_in_their_valid_range(finished_run):
    rows = [json.loads(line) for line in (finished_run / "metrics.jsonl").read_text().splitlines()]
    names = {k for row in rows for k in row if k != "step"}
    assert {"reward/mean", "clip/token_frac", "optim/grad_norm", "eval/arith/accuracy", "time/generate_s"} <= names
    assert _undeclared(names) == []
    out_of_range = [(k, v) for row in rows for k, v in row.items() if k != "step" and not catalogue.lookup(k).in_range(v)]
    assert out_of_range == []


def test_a_name_the_catalogue_lacks_is_caught():
    assert _undeclared(["reward/mean", "clip/token_fracc", "reward/arithh", "eval/arith/accuracy"]) == [
        "clip/token_fracc", "reward/arithh"]


def test_every_algorithm_and_the_update_reduce_as_the_catalogue_says():
    for algo in ALGOS.values():
        assert {k: catalogue.CATALOGUE[k].reduction for k in algo.metrics} == dict(algo.metrics), algo.name
    assert {k: catalogue.CATALOGUE[k].reduction for k in UPDATE_METRICS} == UPDATE_METRICS


def test_diagnostics_mismatch_and_corrections_make_only_catalogued_names():
    g = torch.Generator().manual_seed(0)
    logp, other = -torch.rand(4, 6, generator=g), -torch.rand(4, 6, generator=g)
    mask = torch.ones(4, 6)
    mask[1, 3:] = 0
    names = set(ratio_diagnostics(log_ratio=logp - other, mask=mask))
    names |= set(mismatch_metrics(logp=logp, engine_logp=other, mask=mask, clip_low=0.2, clip_high=0.27))
    for kind in ("tis", "mis"):
        names |= set(correction_weights(old_logp=logp, engine_logp=other, mask=mask, kind=kind, level="token", cap=2.0,
                                        low=0.5, high=2.0)[1])
    assert any("/len_" in n for n in names)  # the length buckets are families
    assert _undeclared(names) == []


def test_a_metric_is_declared_once_and_each_says_what_a_report_needs():
    with pytest.raises(ValueError, match="declared twice"):
        catalogue.declare(catalogue.Metric("reward/mean", "again"))
    for m in catalogue.CATALOGUE.values():
        assert m.meaning and "\n" not in m.meaning and m.label, m.name
        assert m.scale in (catalogue.LINEAR, catalogue.LOG) and m.kind in (catalogue.HIGHER, catalogue.LOWER,
                                                                           catalogue.MECHANISM)
        assert m.reduction is None or m.reduction in ("token_mean", "seq_mean", "sum", "min", "max")
    assert catalogue.REWARD_MEAN in {m.name for m in catalogue.headlines()}
    assert catalogue.EVAL.format("aime24", "pass@1") == "eval/aime24/pass@1"

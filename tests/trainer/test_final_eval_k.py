"""The final held-out eval draws train.final_eval_k samples per problem, the intermediate ones train.eval_k, and
each sampled eval records every sample's reward (evals.jsonl `outcomes`), what a report pairs by sample
(issue 45)."""

from __future__ import annotations

from conftest import LEARNING_SEED

from gspo.report.heldout import final_outcomes
from gspo.report.runs import load_run
from gspo.trainer.run.rundir import read_jsonl

EVAL = "eval/arith/accuracy"
BASE = (f"seed={LEARNING_SEED}", "train.eval_k=2", "train.final_eval_k=3", "logger.progress=false")


def _sampled(run) -> list[dict]:
    return [r for r in read_jsonl(run / "evals.jsonl") if r["benchmark"] == "arith" and r["temperature"] > 0]


def test_the_final_eval_uses_final_eval_k_and_the_intermediate_ones_eval_k(gspo, tmp_path):
    run = gspo.train(tmp_path, "r", *BASE, "train.steps=3", "train.eval_every=2")
    rows = _sampled(run)
    assert [(r["step"], r["k"]) for r in rows] == [(0, 2), (2, 2), (3, 3)]
    for r in rows:  # each sample's reward, [n problems][k], in draw order; the counts and the value agree
        assert len(r["outcomes"]) == 8 and {len(o) for o in r["outcomes"]} == {r["k"]}
        assert [sum(o) for o in r["outcomes"]] == r["correct"]
        assert sum(map(sum, r["outcomes"])) / (8 * r["k"]) == r["value"]
    metrics = read_jsonl(run / "metrics.jsonl")
    assert metrics[-1][EVAL] == rows[-1]["value"] and metrics[2][EVAL] == rows[1]["value"]
    final = final_outcomes(load_run(run), EVAL)
    assert (final.step, final.k, final.samples.tolist()) == (3, 3, rows[-1]["outcomes"])


def test_a_run_stopped_at_an_intermediate_eval_ends_with_a_final_one(gspo, tmp_path):
    """A rule stops the run at step 1 (every entropy counts as collapsed), whose eval at eval_k the rule read:
    the held-out task is evaluated again at final_eval_k, the step's last row, which metrics and the report hold."""
    run = gspo.train(tmp_path, "r", *BASE, "train.steps=3", "train.eval_every=1", "train.stop_on_collapse=true",
                     "train.collapse.entropy_min=20")
    rows = [r for r in _sampled(run) if r["step"] == 1]
    assert [r["k"] for r in rows] == [2, 3]
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1] and metrics[-1][EVAL] == rows[-1]["value"]
    assert final_outcomes(load_run(run), EVAL).k == 3

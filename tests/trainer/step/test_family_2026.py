"""The 2026 members train through `gspo train algo=...` on TINY (their presets, one step each), and their own
metrics reach metrics.jsonl; a GDPO run reads the arith task's two reward components."""

from __future__ import annotations

import json
import math

import pytest

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.trainer.step.advantages import check_algorithm
from gspo.trainer.tasks.registry import arith_components, build_task
from tests.conftest import LEARNING_SEED, TINY

STEPS = (f"seed={LEARNING_SEED}", "train.steps=1", "train.eval_every=0")


@pytest.mark.slow  # five short TINY runs
@pytest.mark.parametrize("algo, own", [("dppo_tv", None), ("dppo_kl", None), ("opsm", "clip/opsm_masked_frac"),
                                       ("maxrl", None), ("gdpo", None)])
def test_each_2026_member_trains_through_gspo_train(gspo, tmp_path, algo, own):
    run = gspo.train(tmp_path, algo, *STEPS, f"algo={algo}")
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][1:]
    assert [r["step"] for r in rows] == [1]
    assert all(math.isfinite(r["loss/policy"]) and math.isfinite(r["optim/grad_norm"]) for r in rows)
    if own:
        assert all(0.0 <= r[own] <= 1.0 for r in rows)


def test_arith_reward_components_are_correctness_and_format():
    assert arith_components("3+4|#7", "7") == (1.0, 1.0)
    assert arith_components("3+4|#8", "7") == (0.0, 1.0)
    assert arith_components("3+4|", "7") == (0.0, 0.0)


def test_a_member_without_what_it_reads_is_one_error_line():
    cfg = compose_config([*TINY, "algo=gdpo"])
    one_reward = build_task(cfg.task)
    one_reward._components = None  # a task with one reward (math, code): nothing for GDPO to normalise apart
    with pytest.raises(GspoError, match="has one reward"):
        check_algorithm(cfg.algo, one_reward)
    cfg = compose_config([*TINY, "algo=maxrl", "algo.advantage=gdpo"])
    with pytest.raises(GspoError, match="applies to algo.advantage=group"):
        check_algorithm(cfg.algo, build_task(cfg.task))


def test_maxrl_refuses_negative_rewards():
    with pytest.raises(GspoError, match="overlong"):
        compose_config([*TINY, "algo=maxrl", "rollout.overlong_buffer=0.2"])

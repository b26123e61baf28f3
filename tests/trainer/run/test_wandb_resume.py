"""W&B after a resume: the resumed process logs into the same W&B run id, only the steps it trained,
with the numbers metrics.jsonl holds for them (no re-logged or missing step)."""

from __future__ import annotations

import pytest

from gspo.trainer.run.rundir import read_jsonl
from tests.conftest import LEARNING_SEED

pytest.importorskip("wandb.proto.wandb_internal_pb2")


def test_resumed_run_logs_its_new_steps_to_the_same_wandb_run(gspo, tmp_path):
    from tests.trainer.run.test_wandb_logger import _wait_for_exit_record, history_by_step, read_records

    common = (f"seed={LEARNING_SEED}", "logger=wandb", "logger.wandb=offline", "logger.progress=false",
              "train.eval_every=0")
    run = gspo.train(tmp_path, "wbres", *common, "train.steps=1")
    first = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(first) == 1
    gspo.train(tmp_path, "wbres", *common, "train.steps=2", "resume=true")
    logs = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(logs) == 2
    second = next(p for p in logs if p != first[0])
    _wait_for_exit_record(first[0])
    _wait_for_exit_record(second)
    ids = set()
    for log in logs:
        ids |= {r.run.run_id for r in read_records(log) if r.WhichOneof("record_type") == "run"}
    assert ids == {"wbres"}
    rows = {r["step"]: r for r in read_jsonl(run / "metrics.jsonl")}
    assert sorted(rows) == [0, 1, 2]
    for log, steps in ((first[0], [0, 1]), (second, [2])):
        history = history_by_step(read_records(log))
        assert sorted(history) == steps, log
        for step in steps:
            for key, value in rows[step].items():
                if key != "step" and value is not None:
                    assert history[step][key] == pytest.approx(value, rel=1e-12), (step, key)

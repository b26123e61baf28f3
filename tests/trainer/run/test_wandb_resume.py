"""W&B after a resume: the resumed process logs into the same W&B run id the steps it trains, and first the
steps of metrics.jsonl that W&B lacks (a SIGKILLed attempt's last ones), each with the numbers metrics.jsonl
holds for it (no step twice, none missing)."""

from __future__ import annotations

import json
import signal
from types import SimpleNamespace

import pytest

from gspo.trainer.run.loggers import Loggers
from gspo.trainer.run.rundir import read_jsonl
from gspo.trainer.run.wandb_history import logged_steps
from tests.conftest import LEARNING_SEED, TINY

pytest.importorskip("wandb.proto.wandb_internal_pb2")


def test_resumed_run_logs_its_new_steps_to_the_same_wandb_run(gspo, tmp_path):
    from tests.trainer.run.test_wandb_logger import _wait_for_exit_record, history_by_step, read_records

    common = (f"seed={LEARNING_SEED}", "logger=wandb", "logger.wandb=offline", "logger.progress=false",
              "train.eval_every=0")
    run = gspo.train(tmp_path, "wbres", *common, "train.steps=1")
    first = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(first) == 1
    # in-process, wandb-core may still be writing the first attempt's log (a process exit flushes it): the resume
    # reads it to find the steps W&B lacks, so it must be whole first, as it is when each attempt is a command
    _wait_for_exit_record(first[0])
    gspo.train(tmp_path, "wbres", *common, "train.steps=2", "resume=true")
    logs = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(logs) == 2
    second = next(p for p in logs if p != first[0])
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


def test_steps_a_sigkilled_attempt_never_got_into_wandb_are_logged_first_by_the_resume(gspo, tmp_path):
    """A real SIGKILL right after the checkpoint of step 2, whose metrics row is written and handed to
    wandb.log: wandb-core (its own process) holds a step until the next one is logged and buffers its writes,
    and when its parent dies it shuts down without flushing, so the killed attempt's record log lacks step 2
    (and often more), which the resume, starting from that checkpoint, never trains again. A real kill rather
    than a truncated record log: what wandb-core keeps at a kill is its behaviour to observe, not ours to
    assume. The resume logs the lacking rows before step 3: every step is in exactly one of the run's logs."""
    from tests.trainer.run.test_kill import _start_paused_after_checkpoint
    from tests.trainer.run.test_wandb_logger import _key, _wait_for_exit_record, history_by_step, read_records

    common = (*TINY, f"seed={LEARNING_SEED}", "train.steps=3", "train.save_every=2", "train.eval_every=0",
              "logger.progress=false", "logger=wandb", "logger.wandb=offline")
    proc = _start_paused_after_checkpoint(gspo, tmp_path, "wbkill", common=common)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdin.close()
    proc.stderr.close()
    run = tmp_path / "wbkill"
    (killed,) = run.glob("wandb/offline-run-*/run-*.wandb")
    before = logged_steps([killed])  # torn by the kill: the strict reader of the tests may refuse it
    assert 2 not in before  # the loss this test is about (without it, the test would prove nothing)

    result = gspo.subprocess("train", *common, f"output_dir={tmp_path}", "run_id=wbkill", "resume=true")
    assert result.returncode == 0, result.stderr[-2000:]
    (resumed,) = [p for p in run.glob("wandb/offline-run-*/run-*.wandb") if p != killed]
    _wait_for_exit_record(resumed)
    rows = {r["step"]: r for r in read_jsonl(run / "metrics.jsonl")}
    assert sorted(rows) == [0, 1, 2, 3]
    records = read_records(resumed)
    order = [int(json.loads(i.value_json)) for r in records if r.WhichOneof("record_type") == "history"
             for i in r.history.item if _key(i) == "_step"]
    lacking = sorted(set(range(3)) - before)
    assert order == [*lacking, 3]  # in step order, before the attempt's own step, each once
    history = history_by_step(records)
    for step in order:
        expected = {k: v for k, v in rows[step].items() if k != "step" and v is not None}
        assert {k: v for k, v in history[step].items() if not k.startswith("_")} == expected, step
    assert f"W&B run wbkill lacked step(s) {', '.join(map(str, lacking))} of metrics.jsonl" in result.stderr


class _FakeRun:
    """What Loggers.catch_up reads of an online wandb Run after a resume, and the calls it makes."""

    def __init__(self, starting_step: int):
        self.settings, self.starting_step, self.id, self.logged = SimpleNamespace(mode="online"), starting_step, "x", []

    def log(self, data: dict, step: int) -> None:
        self.logged.append((step, data))


def test_an_online_resume_logs_the_rows_from_the_step_wandb_resumed_at(tmp_path):
    """Online, W&B's resume says only the next step it expects (one past the last it holds) and drops lower
    steps: the rows from that step on are logged again, in step order, the others left alone."""
    folder = tmp_path / "run"
    folder.mkdir()
    rows = [{"step": s, "loss": s / 10, "kl": None} for s in (0, 2, 1, 3)]  # order as a rebuilt log may have
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    loggers = object.__new__(Loggers)
    loggers.run, loggers.wandb = SimpleNamespace(path=folder), _FakeRun(starting_step=2)
    said = []
    assert loggers.catch_up(said.append) == [2, 3]
    assert loggers.wandb.logged == [(2, {"loss": 0.2}), (3, {"loss": 0.3})]
    assert said == ["resume: W&B run x lacked step(s) 2, 3 of metrics.jsonl (an attempt killed before W&B wrote "
                    "them); logged them again"]
    loggers.wandb = _FakeRun(starting_step=4)
    assert loggers.catch_up(said.append) == [] and len(said) == 1

"""Collapse detection on hand-made metric rows, and through `gspo train` (run.json, stop_on_collapse, resume)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import LEARNING_SEED
from omegaconf import OmegaConf

from gspo.conf.schema import CollapseConfig
from gspo.trainer.run.collapse import CollapseDetector
from gspo.trainer.run.rundir import read_jsonl

KEY = "eval/arith/accuracy"


def _detector(**overrides) -> CollapseDetector:
    return CollapseDetector(OmegaConf.merge(OmegaConf.structured(CollapseConfig), overrides), KEY)


def _feed(detector, rewards, **extra):
    return [detector.observe({"step": i + 1, "reward/mean": r, **extra}) for i, r in enumerate(rewards)]


def test_reward_collapse_needs_patience_and_fires_once():
    d = _detector(window=2, patience=3, reward_drop=0.5)
    # moving averages from step 2: 0.4, 0.4, 0.3, 0.15, 0.1, 0.1, 0.1; best 0.4; below 0.2 at steps 5, 6, 7
    out = _feed(d, [0.4, 0.4, 0.4, 0.2, 0.1, 0.1, 0.1, 0.1])
    assert [o.step if o else None for o in out] == [None, None, None, None, None, None, 7, None]
    assert "0.100 below 50% of its best 0.400 for 3 steps" in out[6].reason


def test_a_dip_that_recovers_is_not_a_collapse():
    d = _detector(window=1, patience=3, reward_drop=0.5)
    assert not any(_feed(d, [0.5, 0.1, 0.1, 0.5, 0.1, 0.1, 0.5]))


def test_reward_rule_waits_for_a_meaningful_best():
    d = _detector(window=1, patience=2, min_best=0.05)
    assert not any(_feed(d, [0.04, 0.0, 0.0, 0.0, 0.0]))  # never right enough to fall


def test_heldout_accuracy_drop():
    d = _detector(eval_drop=0.5)
    assert d.observe({"step": 0, KEY: 0.30}) is None
    assert d.observe({"step": 10, KEY: 0.45}) is None
    assert d.observe({"step": 20, KEY: 0.23}) is None  # above half of 0.45
    found = d.observe({"step": 30, KEY: 0.20})
    assert found.step == 30 and "0.200 after a best of 0.450" in found.reason


def test_entropy_collapse_explosion_and_length_blowup():
    assert "entropy collapse" in _detector().observe({"step": 3, "policy/entropy": 0.001}).reason
    d = _detector(entropy_max_factor=3.0)
    assert d.observe({"step": 1, "policy/entropy": 0.5}) is None
    assert d.observe({"step": 2, "policy/entropy": 1.49}) is None
    assert "3.0x the first step's" in d.observe({"step": 3, "policy/entropy": 1.51}).reason
    assert "95% of completions" in _detector().observe({"step": 1, "completion/truncated_frac": 0.95}).reason


def test_disabled_detector_is_silent():
    assert _detector(enabled=False).observe({"step": 1, "policy/entropy": 0.0}) is None


def test_train_records_the_collapse_stops_and_resume_remembers_it(gspo, tmp_path):
    # an entropy floor above any real entropy makes step 1 "collapse" deterministically
    run = gspo.train(tmp_path, "c", f"seed={LEARNING_SEED}", "train.steps=3", "train.collapse.entropy_min=20",
                     "train.stop_on_collapse=true")
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished" and info["stopped"] == "collapse"
    assert info["collapsed"]["step"] == 1 and info["collapsed"]["reason"].startswith("entropy collapse")
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1]
    assert (run / "checkpoints" / "step_000001").is_dir()  # the stopped run can be resumed


def test_report_marks_the_collapse_step_on_every_axis(finished_run, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gspo.report.arms import group_arms
    from gspo.report.plots import _mark_collapses
    from gspo.report.runs import load_run

    run = tmp_path / "collapsed"
    shutil.copytree(finished_run, run)
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(info | {"collapsed": {"step": 2, "reason": "test"}}))
    loaded = load_run(run)
    (arm,) = group_arms([loaded])
    steps_s = [r["time/step_s"] for r in read_jsonl(run / "metrics.jsonl") if "time/step_s" in r]
    for axis, expected in (("step", 2.0), ("time", sum(steps_s[:2]))):
        fig, ax = plt.subplots()
        _mark_collapses(ax, arm, axis, "red")
        (line,) = ax.lines
        assert line.get_xdata()[0] == pytest.approx(expected) and line.get_linestyle() == "--"
        plt.close(fig)
    (run / "run.json").write_text(json.dumps({k: v for k, v in info.items() if k != "collapsed"}))
    fig, ax = plt.subplots()
    _mark_collapses(ax, group_arms([load_run(run)])[0], "step", "red")
    assert not ax.lines  # a run that did not collapse gets no mark
    plt.close(fig)

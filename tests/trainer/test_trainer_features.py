"""Training options through `gspo train`, end to end on TINY: each test checks a number that only a
working option produces (hand-computed from what the run wrote, or a difference between two settings).

The unit tests of `trainer.update` (test_trainer_update.py) show the update honours its arguments;
these show the config reaches them: adv_scale, aggregation, kl_beta, epochs, the lr schedule,
algo.old_logp_source (engine log-probs), chat_template, micro_batch_size and gspo_token.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from gspo.trainer import loop
from gspo.trainer.step import scoring
from gspo.trainer.step import update as update_module
from tests.conftest import LEARNING_SEED, without_timing

ONE_STEP = (f"seed={LEARNING_SEED}", "train.steps=1", "train.eval_every=0", "logger.progress=false")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _spy(monkeypatch, module, name: str, record: list, pick):
    real = getattr(module, name)

    def spy(*args, **kwargs):
        record.append(pick(*args, **kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)


@pytest.mark.parametrize("scale", ["std", "none"])
def test_adv_scale_and_aggregation_reach_the_update(gspo, tmp_path, monkeypatch, scale):
    """The advantages the update gets are the hand-computed ones from the step's rewards under
    algo.adv_scale, and every loss call gets algo.options.aggregation and algo.kl_beta."""
    batches, calls = [], []
    _spy(monkeypatch, loop, "run_updates", batches, lambda ctx, batch, **k: batch.advantages.clone())
    _spy(monkeypatch, update_module, "policy_loss", calls,
         lambda name, **k: (name, k["aggregation"], k["kl_beta"], k["ref_logp"] is not None))
    run = gspo.train(tmp_path, f"scale-{scale}", *ONE_STEP, "algo=grpo", f"algo.adv_scale={scale}", "algo.options.aggregation=token_mean",
                     "logger.samples_per_step=8")
    rewards = torch.tensor([s["reward"] for s in _rows(run / "samples.jsonl")], dtype=torch.float64).view(2, 4)
    centred = rewards - rewards.mean(1, keepdim=True)
    assert (rewards.std(1) > 0).any(), "LEARNING_SEED: a group with a right and a wrong answer at step 1"
    want = centred / (rewards.std(1, keepdim=True) + 1e-6) if scale == "std" else centred
    assert len(batches) == 1
    torch.testing.assert_close(batches[0].double(), want.flatten(), rtol=1e-6, atol=1e-6)
    assert calls == [("grpo", "token_mean", 0.0, False)] * 2  # two minibatches


def test_kl_beta_trains_against_the_initial_model(gspo, tmp_path, monkeypatch):
    calls = []
    _spy(monkeypatch, update_module, "policy_loss", calls, lambda name, **k: (k["kl_beta"], k["ref_logp"] is not None))
    run = gspo.train(tmp_path, "kl", *ONE_STEP, "algo=gspo", "algo.kl_beta=0.05")
    row = _rows(run / "metrics.jsonl")[1]
    assert calls == [(0.05, True)] * 2
    # the first minibatch is scored by the model the reference copies (kl 0), the second after one step
    assert 0 < row["policy/kl_ref"] < 1e-2


def test_epochs_and_the_lr_schedule_count_optimizer_steps(gspo, tmp_path):
    """steps=1, M=2, E=2: four optimizer steps under a linear decay over four: factors 1, .75, .5, .25;
    optim/lr is their mean. Ignoring epochs in the update (.875) or in the schedule (.375) shows."""
    run = gspo.train(tmp_path, "epochs", *ONE_STEP, "train.epochs=2", "train.lr_schedule=linear", "train.lr=1e-3")
    assert _rows(run / "metrics.jsonl")[1]["optim/lr"] == pytest.approx(1e-3 * 0.625, rel=1e-6)


def test_warmup_in_a_run(gspo, tmp_path):
    """warmup_steps=3 of four optimizer steps (two per training step): factors 1/3, 2/3 | 1, 1."""
    run = gspo.train(tmp_path, "warmup", *ONE_STEP, "train.steps=2", "train.warmup_steps=3", "train.lr=1e-3")
    rows = _rows(run / "metrics.jsonl")
    assert [rows[1]["optim/lr"], rows[2]["optim/lr"]] == pytest.approx([1e-3 * 0.5, 1e-3], rel=1e-6)


def _shift_engine_logprobs(monkeypatch, shift: float):
    """The sampler's log-probs, as the engine returns them, moved by `shift` on every completion token."""
    real = loop.make_engine

    def make(cfg, model, tokenizer):
        engine = real(cfg, model, tokenizer)
        generate = engine.generate

        def shifted(prompts, **kw):
            out = generate(prompts, **kw)
            if out.engine_logp is not None:
                out.engine_logp = out.engine_logp + shift * out.completion_mask
            return out

        engine.generate = shifted
        return engine

    monkeypatch.setattr(loop, "make_engine", make)


@pytest.mark.parametrize("use", [True, False])
def test_engine_logprobs_are_the_old_logprobs_and_the_mismatch_is_logged(gspo, tmp_path, monkeypatch, use):
    """One minibatch: the ratios are measured before the policy moves, so they are exp(trainer logp - old
    logp): exp(-0.25) on every token when old log-probs come from an engine shifted by +0.25, 1 when they
    are recomputed by the trainer."""
    _shift_engine_logprobs(monkeypatch, 0.25)
    run = gspo.train(tmp_path, f"engine-{use}", *ONE_STEP, "train.minibatches=1",
                     f"algo.old_logp_source={'engine' if use else 'recompute'}")
    row = _rows(run / "metrics.jsonl")[1]
    if use:
        assert row["mismatch/logp_abs_diff"] == pytest.approx(0.25, abs=1e-4)
        for key in ("ratio/token_mean", "ratio/token_min", "ratio/token_max", "ratio/seq_mean"):
            assert row[key] == pytest.approx(math.exp(-0.25), abs=1e-4), key
    else:
        assert "mismatch/logp_abs_diff" not in row
        assert row["ratio/token_min"] == pytest.approx(1.0, abs=1e-5) and row["ratio/token_max"] == pytest.approx(1.0, abs=1e-5)


def test_auto_old_logprobs_are_the_samplers_and_agree_with_a_recompute(gspo, tmp_path, monkeypatch):
    """algo.old_logp_source=auto (the default) on the fp32 tiny model takes the old log-probs and the
    entropy from the lean sampler, with no scoring forward; with one minibatch the update's ratios are then
    exp(trainer - sampler) = 1 to fp32 tolerance, and the logged entropy is the recompute's."""
    scored: list = []
    _spy(monkeypatch, scoring, "score", scored, lambda *a, **k: True)
    auto = _rows(gspo.train(tmp_path, "auto", *ONE_STEP, "train.minibatches=1") / "metrics.jsonl")[1]
    assert scored == []
    recompute = _rows(gspo.train(tmp_path, "recompute", *ONE_STEP, "train.minibatches=1",
                                 "algo.old_logp_source=recompute") / "metrics.jsonl")[1]
    assert scored == [True]
    assert auto["ratio/token_min"] == pytest.approx(1.0, abs=1e-5)
    assert auto["ratio/token_max"] == pytest.approx(1.0, abs=1e-5)
    assert auto["policy/entropy"] == pytest.approx(recompute["policy/entropy"], abs=1e-5)
    assert auto["reward/mean"] == recompute["reward/mean"]  # same draws


def test_chat_template_wraps_training_and_eval_prompts(gspo, tmp_path, monkeypatch):
    """model.chat_template=true sends prompts through the tokenizer's template (here one that appends
    '|' after the user's text) for rollouts and for the held-out eval."""
    real = loop.load_policy

    def with_template(cfg, log=print, *, path=None):
        model, tokenizer = real(cfg, log, path=path)
        tokenizer.chat_template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                                   "{% if add_generation_prompt %}|{% endif %}")
        return model, tokenizer

    monkeypatch.setattr(loop, "load_policy", with_template)
    seen = []
    _spy(monkeypatch, loop, "eval_task", seen, lambda engine, task, prompts, **k: list(prompts))
    for chat in ("true", "false"):
        run = gspo.train(tmp_path, f"chat-{chat}", *ONE_STEP, f"model.chat_template={chat}")
        prompts = [s["prompt"] for s in _rows(run / "samples.jsonl")]
        assert all(p.endswith("=|") for p in prompts) if chat == "true" else all(p.endswith("=") for p in prompts)
    assert all(p.endswith("=|") for p in seen[0]) and all(p.endswith("=") for p in seen[-1])


def test_micro_batches_change_no_number(gspo, finished_run, tmp_path):
    """train.micro_batch_size=1 (gradient accumulation over single sequences) reproduces the run without
    it: losses, clip fractions, ratios and the learned weights' evals, to float32 summation order. The diag/
    statistics of log-ratios get 1e-3: a log-ratio is a difference of two nearly equal log-probs, which
    magnifies their last-bit differences (measured 1.5e-4 on a correlation)."""
    run = gspo.train(tmp_path, "micro", f"seed={LEARNING_SEED}", "train.steps=2", "train.micro_batch_size=1")
    got, want = (without_timing(_rows(r / "metrics.jsonl")) for r in (run, finished_run))
    assert [set(r) for r in got] == [set(r) for r in want]
    for g, w in zip(got, want, strict=True):
        for key, value in w.items():
            assert g[key] == pytest.approx(value, rel=1e-3 if key.startswith("diag/") else 1e-4, abs=1e-6), key


def test_gspo_token_trains_like_gspo_and_grpo_does_not(gspo, tmp_path):
    """Same clip bounds for all three: gspo_token (A_it = A_i) gives GSPO's numbers; GRPO's loss differs."""
    clip = ("algo.clip_low=0.001", "algo.clip_high=0.002")
    rows = {name: _rows(gspo.train(tmp_path, name, *ONE_STEP, f"algo={name}", *clip) / "metrics.jsonl")[1]
            for name in ("gspo", "gspo_token", "grpo")}
    for key in ("loss/policy", "clip/seq_frac", "clip/token_frac", "ratio/seq_mean", "optim/grad_norm"):
        assert rows["gspo_token"][key] == pytest.approx(rows["gspo"][key], rel=1e-4, abs=1e-7), key
    assert abs(rows["grpo"]["clip/token_frac"] - rows["gspo"]["clip/token_frac"]) > 0.01


FAMILY = ("dapo", "dr_grpo", "cispo", "sapo", "gmpo")


@pytest.mark.slow  # five short runs (~5 s each on TINY)
def test_each_family_member_trains_through_gspo_train(gspo, tmp_path, monkeypatch):
    """algo=<name> reaches the update under its own name and options, and its run logs every standard
    metric of gspo.algos, finite, at each step."""
    from gspo.algos import STANDARD_METRICS

    calls = []
    _spy(monkeypatch, update_module, "policy_loss", calls,
         lambda name, **k: (name, k["clip_low"], k["clip_high"], k.get("aggregation"), k.get("tau_neg")))
    for name in FAMILY:
        run = gspo.train(tmp_path, name, f"seed={LEARNING_SEED}", "train.steps=2", "train.eval_every=0",
                         f"algo={name}")
        rows = [r for r in _rows(run / "metrics.jsonl") if "loss/policy" in r]
        assert len(rows) == 2, name
        for row in rows:
            missing = [k for k in STANDARD_METRICS if k != "policy/kl_ref" and not math.isfinite(row.get(k, math.nan))]
            assert not missing, (name, missing)
            # DAPO's preset turns on its rollout options: B = 2 groups kept or refilled, the penalty logged
            dapo = {"sampling/groups_kept", "sampling/groups_refilled", "reward/overlong_penalty"}
            if name == "dapo":
                assert row["sampling/groups_kept"] + row["sampling/groups_refilled"] == 2.0
                assert row["sampling/groups_drawn"] == 2.0 * row["sampling/draws"] and row["reward/overlong_penalty"] <= 0
            else:
                assert not dapo & set(row), name
    seen = {c[0]: c[1:] for c in calls}
    assert seen == {"dapo": (0.2, 0.28, "token_mean", None), "dr_grpo": (0.2, 0.27, "seq_mean_token_sum_norm", None),
                    "cispo": (1.0, 4.0, "token_mean", None), "sapo": (0.2, 0.28, "seq_mean_token_mean", 1.05),
                    "gmpo": (0.4, 0.4, None, None)}

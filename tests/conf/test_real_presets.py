"""The real-model recipe: conf/sweep/qwen3-*.yaml compose, each value they (and conf/model/qwen3-*.yaml) set says
its source on its line, `model=qwen3-0.6b` alone gets the model's scale, and the tiny twin keeps the toy's."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from gspo.conf import compose_config

REAL = ["qwen3-0.6b", "qwen3-1.7b", "qwen3-0.6b-family"]
MODELS = {"qwen3-0.6b": "Qwen/Qwen3-0.6B", "qwen3-1.7b": "Qwen/Qwen3-1.7B", "qwen3-0.6b-family": "Qwen/Qwen3-0.6B"}


def _text(group: str, name: str) -> str:
    return resources.files("gspo.conf").joinpath(group, f"{name}.yaml").read_text()


@pytest.mark.parametrize("name", REAL)
def test_each_real_preset_composes_to_the_recipe(name):
    cfg = compose_config([f"+sweep={name}", "algo=gspo"])
    assert (cfg.model.name, cfg.model.dtype, cfg.model.chat_template) == (MODELS[name], "bfloat16", True)
    assert (cfg.task.kind, cfg.task.dataset) == ("math", "agentica-org/DeepScaleR-Preview-Dataset")
    assert cfg.rollout.engine == "auto" and cfg.rollout.temperature == 1.0 and cfg.rollout.max_new_tokens == 2048
    t = cfg.train
    assert (t.lr, t.weight_decay, t.prompts_per_step, t.group_size, t.minibatches) == (1e-6, 0.1, 32, 8, 4)
    assert t.warmup_steps == t.steps * t.minibatches // 20  # verl's lr_warmup_steps_ratio=0.05 of the optimizer steps
    assert (t.eval_k, cfg.task.eval_size, list(cfg.eval.benches), cfg.eval.k) == (4, 128, ["aime24", "math500"], 4)
    assert (cfg.algo.clip_low, cfg.algo.clip_high, cfg.algo.kl_beta) == (3e-4, 4e-4, 0.0)  # GSPO paper sec. 5.1
    assert compose_config([f"+sweep={name}", "algo=grpo"]).algo.clip_high == 0.27


@pytest.mark.parametrize("name", REAL)
def test_every_value_a_real_preset_sets_names_its_source(name):
    """A leaf set under train:, task:, eval: or rollout: has a comment on its line (the one-line source), and the
    header states the expected time as an estimate."""
    lines = _text("sweep", name).splitlines()
    body = yaml.safe_load("\n".join(lines))
    assert "ESTIMATE" in _text("sweep", name) and "results/time-to-answer/README.md" in _text("sweep", name)
    for group in ("train", "task", "eval"):
        block = lines[lines.index(f"{group}:") + 1:]
        for key in body[group]:
            line = next(ln for ln in block if ln.startswith(f"  {key}:"))
            assert "#" in line, (name, group, key)


@pytest.mark.parametrize("model", ["qwen3-0.6b", "qwen3-1.7b"])
def test_a_qwen3_model_alone_gets_its_scale_not_the_toys(model):
    cfg = compose_config([f"model={model}"])
    assert (cfg.train.lr, cfg.rollout.max_new_tokens, cfg.model.dtype, cfg.train.micro_batch_size) == (
        1e-6, 2048, "bfloat16", 8)
    toy = compose_config([])
    assert (toy.train.lr, toy.rollout.max_new_tokens, toy.model.dtype) == (1e-4, 64, "float32")
    for line in _text("model", model).splitlines():
        if line.startswith("  ") and ":" in line:
            assert "#" in line or line.strip().startswith("name:"), line  # each scale setting says where it is from


def test_the_tiny_twin_keeps_the_preset_shape_and_the_toys_scale():
    """The command line wins over the preset's defaults list: model=tiny task=arith undo its model and task, its
    run shape stays (32 x 8, 4 minibatches), and the model-scale values fall back to the schema's."""
    cfg = compose_config(["+sweep=qwen3-0.6b", "model=tiny", "task=arith", "eval.benches=[]"])
    assert (cfg.model.name, cfg.task.kind, cfg.train.lr, cfg.rollout.max_new_tokens) == ("tiny", "arith", 1e-4, 64)
    assert (cfg.train.prompts_per_step, cfg.train.group_size, cfg.train.minibatches, cfg.rollout.engine) == (
        32, 8, 4, "auto")


def test_cfg_job_prints_the_resolved_preset(gspo, tmp_path):
    result = gspo.subprocess("train", "+sweep=qwen3-0.6b", "--cfg", "job", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    cfg = yaml.safe_load(result.stdout)
    assert (cfg["model"]["name"], cfg["train"]["lr"], cfg["rollout"]["engine"]) == ("Qwen/Qwen3-0.6B", 1e-6, "auto")

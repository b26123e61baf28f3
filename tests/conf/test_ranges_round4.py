"""Round four (issue 59): every numeric and list setting has a rule that states what the code needs, each one line
at compose time, before anything is written or allocated. Seen before: train.adam_betas=[0.9], [1,1] and
[0.9,0.99,0.5], train.lr=1e300 (an overflow inside AdamW), rollout.temperature=1e-300 (an index error in the
sampler), model.lora.alpha=1e308, model.lora.r=1e9, model.tiny.hidden_size=100000 and rollout.max_new_tokens=1e9
(the allocator's traceback), task.max_digits=100000 (an OverflowError counting problems), head counts that do
not divide the width (three forms), each a traceback; train.collapse.entropy_min=1e308 every run collapsed;
model.tiny.sft_max_steps=0 an error naming the task's split instead of the setting."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.conf.ranges import LENGTHS, RULES, tiny_parameters
from gspo.conf.schema import Config


def _list_keys(cls, prefix: str = ""):
    for f in dataclasses.fields(cls):
        kind = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _list_keys(kind, f"{prefix}{f.name}.")
        elif typing.get_origin(kind) is list or any(typing.get_origin(a) is list for a in typing.get_args(kind)):
            yield f"{prefix}{f.name}"


def test_every_list_setting_has_a_length_rule():
    keys = list(_list_keys(Config))
    assert "train.adam_betas" in keys and "model.lora.target_modules" in keys  # the walk sees nested list fields
    assert [k for k in keys if k not in LENGTHS] == []
    assert [k for k in LENGTHS if k not in keys] == []  # no rule for a setting that is gone


BETAS = "(AdamW's beta1 and beta2: a moment's decay, 1 would never forget and never correct its bias)"
HEADS = "(each attention head takes an equal share of the width)"


@pytest.mark.parametrize("override, message", [
    ("train.adam_betas=[0.9]", f"train.adam_betas=[0.9]: must be a list of exactly 2 items {BETAS}"),
    ("train.adam_betas=[1,1]", f"train.adam_betas[0]=1.0: must be >= 0 and < 1 {BETAS}"),
    ("train.adam_betas=[0.9,0.99,0.5]", f"train.adam_betas=[0.9,0.99,0.5]: must be a list of exactly 2 items {BETAS}"),
    ("train.lr=1e300", "train.lr=1e+300: must be > 0 and <= 3.40282e+38 (AdamW takes it as a float32)"),
    ("rollout.temperature=1e-300", "rollout.temperature=1e-300: must be >= 0.01 (logits are divided by it"),
    ("model.lora.alpha=1e308", "model.lora.alpha=1e+308: must be > 0 and <= 10000 (alpha / r scales"),
    ("model.lora.r=1000000000", "model.lora.r=1000000000: must be >= 0 and <= 65536 (0 is no LoRA; the rank is at"),
    ("model.tiny.hidden_size=100000", "model.tiny.hidden_size=100000: must be >= 1 and <= 65536 (a layer's width"),
    ("rollout.max_new_tokens=1000000000", "rollout.max_new_tokens=1000000000: must be >= 1 and <= 131072 (the KV"),
    ("eval.max_new_tokens=1000000000", "eval.max_new_tokens=1000000000: must be >= 1 and <= 131072 (the KV"),
    ("task.max_digits=100000", "task.max_digits=100000: must be >= 1 and <= 18 (the task counts its problems in "
                               "64-bit integers: 10**18 fits, 10**19 does not)"),
    ("model.tiny.num_heads=3", f"model.tiny.num_heads=3: must divide model.tiny.hidden_size=128 {HEADS}"),
    ("model.tiny.hidden_size=130", f"model.tiny.num_heads=4: must divide model.tiny.hidden_size=130 {HEADS}"),
    ("model.tiny.num_kv_heads=3", "model.tiny.num_kv_heads=3: must divide model.tiny.num_heads=4 (each key/value head "
                                  "serves an equal group of query heads)"),
    ("train.collapse.entropy_min=1e308", "train.collapse.entropy_min=1e+308: must be >= 0 and <= 20 (a token's "
                                         "entropy is at most ln(vocabulary size)"),
    ("model.tiny.sft_max_steps=0", "model.tiny.sft_max_steps=0: must be >= 1 (the cold start fine-tunes for at least "
                                   "one step before it is checked)"),
    ("model.lora.target_modules=[]", "model.lora.target_modules=[]: must be a list of at least 1 item"),
])
def test_a_setting_the_code_cannot_use_is_one_line(override, message):
    with pytest.raises(GspoError) as e:
        compose_config([override])
    assert str(e.value).startswith(message)


def test_the_embedded_models_size_is_checked_against_memory_before_it_is_built(monkeypatch):
    import os

    monkeypatch.setattr(os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 2**20}[name])  # 4 GiB
    wide = ["model.tiny.hidden_size=8192", "model.tiny.intermediate_size=32768"]
    with pytest.raises(GspoError) as e:
        compose_config(wide)
    assert str(e.value).startswith("model.tiny (hidden_size=8192, num_layers=4, intermediate_size=32768, "
                                   "num_experts=0) makes a model of about 4.03 billion parameters")
    assert str(e.value).endswith("more than this machine's 4 GiB; use smaller model.tiny settings")
    compose_config(["model.tiny.hidden_size=8192", "model.tiny.intermediate_size=32768", "model=hf",
                    "model.name=Qwen/Qwen3-0.6B"])  # the embedded model's settings bind only the embedded model


def test_the_parameter_estimate_is_the_built_models():
    """tiny_parameters (what the memory rule reads) within 5% above a built model's count, dense and MoE."""
    from gspo.evals.arith import ALPHABET
    from gspo.trainer.model.models import build_tiny_qwen3

    for preset in (["model.tiny.hidden_size=64"], ["model=tiny-moe", "model.tiny.hidden_size=64"]):
        t = compose_config(preset).model.tiny
        built = build_tiny_qwen3(len(ALPHABET) + 2, hidden_size=t.hidden_size, num_layers=t.num_layers,
                                 intermediate_size=t.intermediate_size, num_heads=t.num_heads,
                                 num_kv_heads=t.num_kv_heads, seed=0, num_experts=t.num_experts,
                                 experts_per_token=t.experts_per_token, moe_intermediate_size=t.moe_intermediate_size)
        n = sum(p.numel() for p in built.parameters())
        assert n <= tiny_parameters(t) <= 1.05 * n, (preset, n, tiny_parameters(t))


def test_the_bounds_leave_the_shipped_presets_and_the_tests_values_alone():
    compose_config(["train.lr=1e9"])  # tests/trainer/step/test_guards.py: the non-finite guard's overflow
    compose_config(["train.collapse.entropy_min=20"])  # the tests' forced collapse
    compose_config(["task.max_digits=18"])  # conf/sweep/stability.yaml
    assert RULES["train.adam_betas"] == (0, 1, False, True)

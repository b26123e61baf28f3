"""LoRA (`model.lora.r=8`) on the embedded default: only the adapters change, the checkpoint holds the
adapter, the KL reference is the base with adapters off, and `gspo eval` evaluates the result."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import LEARNING_SEED, TINY

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.trainer.model.lora import adapters_disabled
from gspo.trainer.policy import load_policy


@pytest.fixture(scope="module")
def lora_run(gspo, tmp_path_factory):
    return gspo.train(tmp_path_factory.mktemp("lora"), "lora", f"seed={LEARNING_SEED}", "train.steps=2",
                      "model.lora.r=8", "algo.kl_beta=0.05")


def test_only_the_adapters_change_and_the_checkpoint_holds_just_them(lora_run):
    ckpt = sorted((lora_run / "checkpoints").glob("step_*"))[-1]
    assert (ckpt / "adapter_config.json").exists() and not (ckpt / "model.safetensors").exists()
    cfg = compose_config([*TINY, "model.lora.r=8"])
    base = dict(load_policy(cfg)[0].base_model.model.named_parameters())  # fresh adapters: B = 0
    trained = dict(load_policy(cfg, path=str(ckpt))[0].base_model.model.named_parameters())
    assert trained.keys() == base.keys()
    changed = {n for n in base if not torch.equal(base[n], trained[n])}
    assert changed and all("lora_" in n for n in changed)
    assert any("lora_B" in n for n in changed)  # B started at 0: the adapter now changes the output
    row = json.loads((lora_run / "metrics.jsonl").read_text().splitlines()[1])
    assert row["policy/kl_ref"] < 1e-5  # step 1 scores the initial policy: the reference (adapters off) equals it


def test_the_reference_is_the_base_with_adapters_off(lora_run):
    ckpt = sorted((lora_run / "checkpoints").glob("step_*"))[-1]
    cfg = compose_config([*TINY, "model.lora.r=8"])
    model = load_policy(cfg, path=str(ckpt))[0]
    plain = load_policy(compose_config(TINY))[0]
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad(), adapters_disabled(model):
        off = model(input_ids=ids).logits
    with torch.no_grad():
        on, base = model(input_ids=ids).logits, plain(input_ids=ids).logits
    assert torch.equal(off, base) and not torch.allclose(on, base)
    merged = load_policy(cfg, path=str(ckpt), merge=True)[0]
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, on, atol=1e-5)


def test_gspo_eval_evaluates_a_lora_run(gspo, lora_run):
    result = gspo.invoke("eval", f"eval.run={lora_run}", "eval.benches=[arith]", "eval.limit=4", "eval.greedy=true")
    assert result.exit_code == 0, (result.exception, result.output)
    rows = [json.loads(line) for line in (lora_run / "evals.jsonl").read_text().splitlines()]
    assert any(r["benchmark"] == "arith" and r["step"] == 2 and r["n_problems"] == 4 for r in rows)


def test_target_modules_the_model_lacks_is_one_clear_error(cold_start):
    cfg = compose_config([*TINY, "model.lora.r=8", "model.lora.target_modules=[q_proj,c_attn]"])
    with pytest.raises(GspoError, match=r"^model.lora.target_modules: the model has no linear module named c_attn "
                                        r"\(it has: down_proj, gate_proj, k_proj"):
        load_policy(cfg)


def test_adding_adapters_warns_nothing():
    """peft's use of transformers' deprecated `is_gradient_checkpointing` is not the user's to fix."""
    import warnings

    from gspo.evals.arith import ALPHABET
    from gspo.trainer.model.lora import add_lora
    from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3

    model = build_tiny_qwen3(len(build_char_tokenizer(ALPHABET)), hidden_size=32, num_layers=1, intermediate_size=64,
                             num_heads=2, num_kv_heads=1, seed=0)
    lora = type("Lora", (), {"r": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["q_proj"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        assert hasattr(add_lora(model, lora), "peft_config")

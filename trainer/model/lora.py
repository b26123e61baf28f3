"""LoRA adapters through peft (`model.lora.r > 0`): only the adapters train; the base stays frozen.

    W x  ->  W x + (alpha / r) B A x      A: [r, in], B: [out, r] (B starts at 0: the run starts at the base)

The KL reference is the base model itself with the adapters switched off (`adapters_disabled`), not a
second copy, and it is the initial policy also after a resume. A checkpoint holds the adapter only
(peft's adapter_model.safetensors + adapter_config.json); loading one puts it back on the run's base
model, and `merge=True` folds it into the base weights (for `gspo eval`: plain modules, faster).
"""

from __future__ import annotations

import contextlib
import warnings

import torch

from gspo.conf.errors import GspoError


def add_lora(model: torch.nn.Module, lora) -> torch.nn.Module:
    """`model` wrapped with fresh adapters on `lora.target_modules` (the last part of a module's name)."""
    from peft import LoraConfig, get_peft_model

    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    missing = [t for t in lora.target_modules if t not in names]
    if missing:
        raise GspoError(f"model.lora.target_modules: the model has no linear module named {', '.join(missing)} "
                        f"(it has: {', '.join(sorted(names))})")
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
    with _peft_quiet():
        return get_peft_model(model, config)


def load_adapter(model: torch.nn.Module, folder: str, *, merge: bool = False) -> torch.nn.Module:
    """The adapter saved in `folder` on `model` (its base): trainable, or merged into the base weights."""
    from peft import PeftModel

    with _peft_quiet():
        peft_model = PeftModel.from_pretrained(model, folder, is_trainable=not merge)
    return peft_model.merge_and_unload() if merge else peft_model


@contextlib.contextmanager
def _peft_quiet():
    """peft asks transformers' deprecated `is_gradient_checkpointing` (a FutureWarning the user cannot act
    on): that one warning is ignored, by category, module and text, around peft's calls only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning,
                                module="transformers.modeling_utils")
        yield


def adapters_disabled(model: torch.nn.Module):
    """Inside: `model` computes as its base (adapters off) when it carries adapters; else nothing changes."""
    disable = getattr(model, "disable_adapter", None)
    return disable() if disable is not None and hasattr(model, "peft_config") else contextlib.nullcontext()

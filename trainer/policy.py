"""Load the policy a run trains: the embedded cold-started tiny model, a checkpoint, or a Hugging Face model."""

from __future__ import annotations

import functools
from collections.abc import Callable

from omegaconf import OmegaConf

from gspo.conf.errors import GspoError
from gspo.trainer.coldstart import ColdStartSpec, cold_start_path, existing_start, start_record
from gspo.trainer.model.lora import add_lora, load_adapter
from gspo.trainer.model.models import DTYPES, load_pretrained
from gspo.trainer.model.precision import check_precision, resolve_precision
from gspo.trainer.tasks.registry import REFUSES, WARNS, task_kind


def load_policy(cfg, log: Callable[[str], None] = print, *, path: str | None = None, merge: bool = False):
    """(model, tokenizer) for `cfg.model`; `path` (a checkpoint folder) overrides where weights come from.
    With LoRA (`model.lora.r > 0`) a checkpoint holds only the adapter: the base is loaded from where the
    run started and the adapter put on it (folded into the weights with `merge`)."""
    m = cfg.model
    lora = OmegaConf.select(cfg, "model.lora.r", default=0) > 0  # a run's config.yaml from before LoRA has none
    weights = None if lora else path
    if weights is None and m.name == "tiny":
        on_tiny = task_kind(cfg.task.kind).on_tiny
        if on_tiny == REFUSES:
            raise GspoError(f"model=tiny speaks only the embedded arith task: use task=arith, or a real model "
                            f"(task.kind={cfg.task.kind})")
        if on_tiny == WARNS:
            log(f"model=tiny knows only arithmetic: on task.kind={cfg.task.kind} it cannot do the task (an end-to-end "
                "check of the task, not training)")
        progress = OmegaConf.select(cfg, "logger.progress", default=False)
        weights = str(cold_start_path(tiny_spec(cfg), m.tiny.cache_dir, log, progress=progress))
    model, tokenizer = load_pretrained(weights or m.name, dtype=m.dtype, trust_remote_code=m.trust_remote_code,
                                       attn_implementation=m.attn_implementation,
                                       gradient_checkpointing=m.gradient_checkpointing)
    if lora:
        model = load_adapter(model, path, merge=merge) if path else add_lora(model, m.lora)
    chat = OmegaConf.select(cfg, "rollout.chat_template_kwargs", default=None)  # a run from before the key: none
    return model.eval(), with_chat_kwargs(tokenizer, OmegaConf.to_container(chat) if chat else {})


def with_chat_kwargs(tokenizer, kwargs: dict):
    """The tokenizer with `kwargs` (rollout.chat_template_kwargs, e.g. Qwen3's enable_thinking) in every chat
    template it renders: training prompts, held-out and benchmark evals alike go through its apply_chat_template."""
    if kwargs:
        tokenizer.apply_chat_template = functools.partial(tokenizer.apply_chat_template, **kwargs)
    return tokenizer


def start_of(cfg, model) -> dict:
    """Which weights a fresh run of `cfg` started from (run.json `start`; the report pools only runs of one start):
    the embedded model's shipped or machine-built cold start by key and weights hash, else the model's name and,
    for a hub model, the revision it resolved to."""
    if cfg.model.name == "tiny":
        return start_record(cold_start_path(tiny_spec(cfg), cfg.model.tiny.cache_dir, log=lambda _m: None))
    return {"source": "model", "name": cfg.model.name, "revision": getattr(model.config, "_commit_hash", None)}


def known_start(cfg) -> dict | None:
    """The `start` a run of `cfg` began from, as far as its config tells without loading or building anything (a
    rebuilt run.json's): the embedded model's shipped or cached cold start; None for a hub model, whose revision
    only the first attempt's load knew."""
    if cfg.model.name != "tiny":
        return None
    folder = existing_start(tiny_spec(cfg), cfg.model.tiny.cache_dir)
    return start_record(folder) if folder is not None else None


def tiny_spec(cfg) -> ColdStartSpec:
    """The cold start `cfg` asks for: its model.tiny settings and its arithmetic task."""
    return ColdStartSpec(OmegaConf.to_object(cfg.model.tiny), min_digits=cfg.task.min_digits,
                         max_digits=cfg.task.max_digits, ops=cfg.task.ops, max_new_tokens=cfg.rollout.max_new_tokens)


def checked_precision(cfg, device) -> str:
    """`train.precision` resolved against the storage dtype `model.dtype` and checked on `device`."""
    storage = DTYPES[cfg.model.dtype]
    precision = resolve_precision(cfg.train.precision, storage)
    check_precision(precision, storage, device)
    return precision

"""Optimizer, learning-rate schedule and checkpoints (model, tokenizer, optimizer, step)."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import torch

from gspo.trainer.model.precision import Precision
from gspo.trainer.parallel import fsdp
from gspo.trainer.run.rundir import RunDir
from gspo.vocab.choices import LrSchedule


def make_optimizer(params, train):
    """AdamW over `params` (fp32 master weights, trainer/model/precision.py) and a per-optimizer-step schedule:
    linear warmup, then constant, linear or cosine decay."""
    optimizer = torch.optim.AdamW(params, lr=train.lr, betas=tuple(train.adam_betas),
                                  weight_decay=train.weight_decay)
    total = max(1, train.steps * train.minibatches * train.epochs)

    def factor(i: int) -> float:
        if i < train.warmup_steps:
            return (i + 1) / train.warmup_steps
        progress = min(1.0, (i - train.warmup_steps) / max(1, total - train.warmup_steps))
        if train.lr_schedule == LrSchedule.LINEAR:
            return 1.0 - progress
        if train.lr_schedule == LrSchedule.COSINE:
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def save_checkpoint(run: RunDir, step: int, model, tokenizer, optimizer, scheduler, precision: Precision, *,
                    keep: int = 0, extra=None) -> Path:
    """A checkpoint of step `step`; `extra(folder)` writes more into it (rollout.lag's pending batches)."""
    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "precision": precision.state_dict()}, folder / "optimizer.pt")
        (folder / "trainer_state.json").write_text(json.dumps({"step": step}))
        if extra is not None:
            extra(folder)

    return run.save_checkpoint(step, write, keep=keep)


def save_sharded_checkpoint(run, step: int, model, tokenizer, optimizer, scheduler, precision: Precision, world, *,
                            keep: int = 0, full: bool = False) -> None:
    """[FSDP] Every rank writes its shards of the model and optimizer (trainer/parallel/fsdp.py) into a staging folder
    of the run; rank 0 then makes it a checkpoint like any other (manifest, atomic rename, pruning) with the
    config, tokenizer, schedule and step beside the shards. With `full`, the whole weights are gathered to
    rank 0 and saved too (model.safetensors), so the checkpoint is also a Hugging Face folder."""
    stage = run.path / "checkpoints" / f".shards-step_{step:06d}"
    if world.main:
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
    torch.distributed.barrier()
    fsdp.save_shards(stage, model, optimizer)
    weights = fsdp.full_weights(model) if full else None
    if world.main:
        def write(folder: Path) -> None:
            os.replace(stage, folder / fsdp.SHARDS)
            if weights is not None:
                model.save_pretrained(folder, state_dict=weights)
            else:
                model.config.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            torch.save({"scheduler": scheduler.state_dict(), "precision": precision.state_dict()}, folder / "optimizer.pt")
            (folder / "trainer_state.json").write_text(json.dumps({"step": step, "fsdp_world_size": world.size}))

        run.save_checkpoint(step, write, keep=keep)
    torch.distributed.barrier()


def load_checkpoint(folder: Path, optimizer, scheduler, precision: Precision, model=None) -> int:
    """Restore optimizer, schedule, master weights and loss scale from `folder` (the model was loaded from
    it; a sharded checkpoint's model shards are loaded here, into the sharded `model`); returns its step."""
    state = torch.load(folder / "optimizer.pt", weights_only=True)
    if fsdp.is_sharded_checkpoint(folder):
        fsdp.load_shards(folder / fsdp.SHARDS, model, optimizer)
    else:
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    precision.load_state_dict(state.get("precision", {}))  # checkpoints from before master weights have none
    return int(json.loads((folder / "trainer_state.json").read_text())["step"])

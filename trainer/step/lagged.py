"""Rollouts k updates behind (`rollout.lag=k`): the batch of step t is drawn by the policy of step t - k, the
weights the trainer held after t - k - 1 updates, while the trainer updates on an older batch.

A fixed lag, so a run is reproducible and resumable whatever overlaps with what: the weights that draw batch t are
always version max(0, t - 1 - k) (the number of updates they have had), copied into the sampler's own model at
the start of step t - k, before that step's update moves the trainer's. The first k + 1 batches are drawn by the
start model (version 0): steps 1..k + 1 are behind by t - 1 < k updates at first (metric lag/updates_behind).

The overlap: at the start of step t the trainer's current weights (version t - 1) go to the sampler model and batch
t + k is drawn and graded in a worker thread while step t updates on batch t (drawn earlier); torch releases the GIL
inside its ops, so the two share the CPU's cores. One batch is in flight at a time, so one sampler model suffices:
step t waits for batch t + k - 1 before it hands the sampler new weights.

A checkpoint of step t holds the pending batches t + 1..t + k (PENDING, the in-flight one waited for): their
weights are gone from the run by then, and a resume reads them back rather than redrawing them, so a run killed
with a batch in flight and resumed continues as the uninterrupted run does, to the last digit.

The sampler's log-probs of each batch are the behaviour policy's, pi_s (rollout.engine_logp): the corrections,
OPSM's mask and DPPO's anchor read them; pi_old is a trainer scoring forward of step t's weights
(engines/logp_origin.py: never the sampler's under a lag).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

from gspo.algos.common import MAX_LOG_RATIO, token_log_ratio, valid_tokens
from gspo.conf.errors import GspoError
from gspo.trainer.engines.registry import engine_kind
from gspo.trainer.engines.rollout import Rollout
from gspo.trainer.step.sampling import Sampled, sample_batch
from gspo.trainer.tasks.task_types import Item, Task
from gspo.vocab.choices import Replay
from gspo.vocab.metrics import LAG_BEHIND, LAG_GAP_MAX, LAG_TOKEN_STD

PENDING = "pending_batches.pt"  # in a checkpoint folder: the batches drawn but not yet trained on


def behaviour_version(step: int, lag: int) -> int:
    """The updates the weights that draw step `step`'s batch have had: max(0, step - 1 - lag)."""
    return max(0, step - 1 - lag)


def check_lag(cfg, world) -> None:
    """rollout.lag's rules, before the run folder opens: one process, the hf engine (it samples a copy of the
    policy), no compiled body or sharded policy (the copy would be neither), no R3 replay."""
    lag = cfg.rollout.lag
    if not lag:
        return
    why = ("several processes" if world.size > 1 else "train.fsdp" if cfg.train.fsdp else
           f"rollout.engine={cfg.rollout.engine} (the hf engine samples a lagged copy of the policy)"
           if not engine_kind(cfg.rollout.engine).capabilities(cfg.rollout).lagged_copy else "train.compile" if cfg.train.compile else
           "algo.routing_replay=rollout" if cfg.algo.routing_replay == Replay.ROLLOUT else None)
    if why:
        raise GspoError(f"rollout.lag={lag} runs in one process with rollout=hf, uncompiled, unsharded, and without R3 "
                        f"replay for now; got {why}: use rollout.lag=0, or drop that setting")


def lag_metrics(behind: int, old_logp: torch.Tensor, rollout: Rollout) -> dict[str, torch.Tensor]:
    """A lagged step's own metrics: the updates its batch is behind, the largest token gap |log pi_old - log pi_s| and
    the spread (std over tokens) of the token weights pi_old / pi_s; `old_logp` [N, T] the trainer's."""
    mask = rollout.completion_mask
    log_ratio = token_log_ratio(old_logp, rollout.engine_logp, mask)  # [N, T], 0 on padding
    valid = valid_tokens(mask)
    ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))[valid]  # [tokens]
    return {LAG_BEHIND: torch.tensor(float(behind)), LAG_GAP_MAX: log_ratio.abs().max(),
            LAG_TOKEN_STD: ratio.std(correction=0) if ratio.numel() else torch.tensor(0.0)}


class LaggedBatches:
    """The batches of a run with rollout.lag = k >= 1: drawn k updates behind, one in flight at a time.

    `make_engine(model)` builds a rollout engine on the sampler's own model (a copy of ctx.model)."""

    def __init__(self, ctx, task: Task, make_engine, lag: int):
        self.ctx, self.task, self.lag = ctx, task, lag
        self.model = copy.deepcopy(ctx.model).eval().requires_grad_(False)
        self.engine = make_engine(self.model)
        self.pending: dict[int, tuple[Sampled, int]] = {}  # step -> (its batch, the behaviour weights' version)
        self.flight: tuple[int, Future] | None = None
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gspo-rollout")

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def take(self, step: int) -> tuple[Sampled, int, float]:
        """(batch of `step`, its behaviour version, seconds waited for it). Hands the trainer's current weights
        (version step - 1) to the sampler and launches batch step + k before returning."""
        t0 = time.perf_counter()
        if not self.pending and self.flight is None:  # a fresh run: batches 1..k from the start model, in turn
            self._load_weights()
            for s in range(step, step + self.lag):
                self.pending[s] = (self._draw(s), behaviour_version(s, self.lag))
        self._land()
        if step not in self.pending:
            raise GspoError(f"rollout.lag={self.lag}: no batch for step {step} (pending: {sorted(self.pending)})")
        self._load_weights()
        ahead = step + self.lag
        self.flight = (ahead, self.pool.submit(self._draw, ahead))
        batch, version = self.pending.pop(step)
        return batch, version, time.perf_counter() - t0

    def _land(self) -> None:
        """Wait for the batch in flight and file it as pending."""
        if self.flight is not None:
            s, future = self.flight
            self.flight = None
            self.pending[s] = (future.result(), behaviour_version(s, self.lag))

    def _draw(self, step: int) -> Sampled:
        ctx = self.ctx
        return sample_batch(step, ctx, self.engine, self.task, ctx.precision.device, ctx.world)

    @torch.no_grad()
    def _load_weights(self) -> None:
        """The trainer's current weights (and buffers) into the sampler's model."""
        for mine, theirs in zip(self.model.state_dict().values(), self.ctx.model.state_dict().values(), strict=True):
            mine.copy_(theirs)

    def save(self, folder: Path) -> None:
        """The pending batches (the in-flight one landed first) into checkpoint `folder`."""
        self._land()
        torch.save({"lag": self.lag, "batches": {s: {"version": v, **_plain(b)} for s, (b, v) in self.pending.items()}},
                   folder / PENDING)

    def load(self, folder: Path, start: int) -> None:
        """The pending batches a checkpoint of step `start` holds (steps start + 1..start + k)."""
        path = folder / PENDING
        if not path.is_file():
            raise GspoError(f"resume: {folder.name} holds no pending batches (saved with rollout.lag=0?); resume with the "
                            f"lag the run was saved with, or start a new run with rollout.lag={self.lag}")
        saved = torch.load(path, weights_only=True)
        wanted = set(range(start + 1, start + 1 + self.lag))
        if saved["lag"] != self.lag or set(saved["batches"]) != wanted:
            raise GspoError(f"resume: {folder.name} was saved with rollout.lag={saved['lag']}; resume with that lag")
        device = self.ctx.precision.device
        self.pending = {s: (_sampled(b, device), b["version"]) for s, b in saved["batches"].items()}


def _plain(b: Sampled) -> dict:
    """A batch as tensors, strings and numbers (torch.load's weights_only reads it back)."""
    return {"items": [dataclasses.asdict(it) for it in b.items], "prompts": b.prompts,
            "rollout": {f.name: getattr(b.rollout, f.name) for f in dataclasses.fields(Rollout)},
            "task_rewards": b.task_rewards, "rewards": b.rewards, "metrics": b.metrics, "times": b.times}


def _sampled(d: dict, device: torch.device) -> Sampled:
    return Sampled([Item(**it) for it in d["items"]], d["prompts"], Rollout(**d["rollout"]).to(device),
                   d["task_rewards"].to(device), d["rewards"].to(device), d["metrics"], d["times"])

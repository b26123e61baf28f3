"""The one context a training step reads: the config's typed nodes and the run's live objects.

Built once per run by loop._train (`StepContext.of`) and handed whole to the sampler, the scoring forward
and the update, each of which reads the fields it needs; nothing in a step changes it. `sampling` is the
config's `rollout` node everywhere in the trainer (temperature, top_p, max_new_tokens, the engine):
how tokens are drawn, not the drawn tokens (those are a `Rollout`). The config nodes are typed with the
schema's dataclasses (conf/schema.py): at run time they are OmegaConf nodes structured by those classes,
so a field the schema lacks fails when it is read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from gspo.conf.schema import AlgoConfig, Config, RolloutConfig, TrainConfig
from gspo.trainer.engines.base import Engine
from gspo.trainer.model.precision import Precision
from gspo.trainer.parallel.distributed import World
from gspo.trainer.parallel.moe import RoutingRecorder
from gspo.trainer.step.lagged import LaggedBatches


@dataclass(frozen=True)
class StepContext:
    """What every step of a run reads. Config nodes: `algo`, `train`, `sampling` (cfg.rollout), `seed`,
    `chat` (model.chat_template), `samples_per_step` (logger.samples_per_step). Live objects: the trained
    `model`, its `precision` (master weights, autocast, backward, step), `optimizer`, `scheduler`, the frozen
    `ref_model` (None: no KL term), the rollout `engine`, the MoE `routing` recorder, the processes (`world`), the
    lagged batches (`lagged`, rollout.lag >= 1; None: each step samples its own)."""

    algo: AlgoConfig
    train: TrainConfig
    sampling: RolloutConfig
    seed: int = 0
    chat: bool = False
    samples_per_step: int = 0
    model: torch.nn.Module | None = None
    precision: Precision | None = None
    optimizer: torch.optim.Optimizer | None = None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    ref_model: torch.nn.Module | None = None
    engine: Engine | None = None
    routing: RoutingRecorder | None = None
    world: World = World()
    lagged: LaggedBatches | None = None  # rollout.lag >= 1: the step's batches come from here (trainer/step/lagged.py LaggedBatches)

    @classmethod
    def of(cls, cfg: Config, **live: Any) -> StepContext:
        """The config's parts a step reads, with the run's live objects (`live`: model=, precision=, ...)."""
        return cls(cfg.algo, cfg.train, cfg.rollout, cfg.seed, cfg.model.chat_template, cfg.logger.samples_per_step,
                   **live)

    def but(self, **changes: Any) -> StepContext:
        """A copy with `changes` (a reference model scored in place of the policy, say)."""
        return replace(self, **changes)

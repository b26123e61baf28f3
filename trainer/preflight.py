"""Every check a run makes before it writes anything, in one pass: each component is asked for its own
rules (the algorithm and its options, the processes' layout, Routing Replay, FSDP, the engine's
capabilities, the precision on this device), so a new component adds its check here and nowhere else.
Compose-time checks (conf/compose.validate_config) run earlier, on the config alone; these need the task,
the processes or the device."""

from __future__ import annotations

import torch

from gspo.conf.schema import Config
from gspo.trainer.engines.registry import check_engine, resolve_engine
from gspo.trainer.parallel import distributed, fsdp, moe
from gspo.trainer.parallel.distributed import World
from gspo.trainer.policy import checked_precision
from gspo.trainer.step.advantages import check_algorithm
from gspo.trainer.tasks.task_types import Task


def check_run(cfg: Config, task: Task, world: World, device: torch.device) -> str:
    """Raise the first GspoError of any component; returns the resolved `train.precision` (fp32, bf16, fp16).
    `rollout.engine=auto` is resolved here, in `cfg` itself, so the run's saved config names the engine it ran."""
    cfg.rollout.engine = resolve_engine(cfg, world)
    check_algorithm(cfg.algo, task)
    distributed.check_layout(cfg.train, world, cfg.rollout)
    moe.check_replay(cfg.algo, world)
    fsdp.check(cfg, world)
    check_engine(cfg, world)
    return checked_precision(cfg, device)

"""Every check a run makes before it writes anything, in one pass: each component is asked for its own
rules (the algorithm and its options, the processes' layout, FSDP, the engine's capabilities, the precision
on this device), so a new component adds its check here and nowhere else. Routing Replay's rules, which span
the model, the processes and the engine, are stated here (`check_routing_replay`).
Compose-time checks (conf/compose.validate_config) run earlier, on the config alone; these need the task,
the processes, the model's own config or the device."""

from __future__ import annotations

import torch

from gspo.conf.errors import GspoError
from gspo.conf.schema import Config
from gspo.trainer.engines.registry import capabilities_of, check_engine, resolve_engine
from gspo.trainer.parallel import distributed, fsdp
from gspo.trainer.parallel.distributed import World
from gspo.trainer.parallel.moe import declares_experts
from gspo.trainer.policy import checked_precision
from gspo.trainer.step.advantages import check_algorithm
from gspo.trainer.step.lagged import check_lag
from gspo.trainer.tasks.task_types import Task
from gspo.vocab.choices import Replay


def check_run(cfg: Config, task: Task, world: World, device: torch.device) -> str:
    """Raise the first GspoError of any component; returns the resolved `train.precision` (fp32, bf16, fp16).
    `rollout.engine=auto` is resolved here, in `cfg` itself, so the run's saved config names the engine it ran."""
    cfg.rollout.engine = resolve_engine(cfg, world, needs=replay_needs(cfg.algo))
    check_algorithm(cfg.algo, task)
    distributed.check_layout(cfg.train, world, cfg.rollout)
    check_routing_replay(cfg, world)
    fsdp.check(cfg, world)
    check_engine(cfg, world)
    check_lag(cfg, world)
    return checked_precision(cfg, device)


def replay_needs(algo) -> tuple[str, ...]:
    """The engine capabilities Routing Replay needs: R3 replays the experts the sampler recorded while decoding."""
    return ("records_routing",) if algo.routing_replay == Replay.ROLLOUT else ()


def check_routing_replay(cfg: Config, world: World) -> None:
    """Routing Replay's rules, all here, before the run folder opens: a Mixture-of-Experts policy (read from the
    model's config, not its weights); R3 (rollout) in one process, from an engine that records the experts."""
    replay, r = cfg.algo.routing_replay, cfg.rollout
    if replay == Replay.NONE:
        return
    if not declares_experts(cfg.model):
        which = "the embedded model is dense: use model=tiny-moe (or an MoE through model=hf)" \
            if cfg.model.name == "tiny" else f"{cfg.model.name} declares no experts in its config"
        raise GspoError(f"algo.routing_replay={replay} needs a Mixture-of-Experts model and {which}")
    if replay == Replay.ROLLOUT and world.size > 1:
        raise GspoError("algo.routing_replay=rollout (R3) runs in one process only for now; use one process, or "
                        "algo.routing_replay=trainer (R2) with several")
    missing = [need for need in replay_needs(cfg.algo) if not getattr(capabilities_of(r), need)]
    if missing:
        raise GspoError("algo.routing_replay=rollout replays the experts the engine records while it decodes, and "
                        f"rollout={r.engine} with rollout.sampler={r.sampler} records none: use rollout=hf "
                        "rollout.sampler=lean")

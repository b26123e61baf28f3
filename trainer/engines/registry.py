"""The engines the trainer can build, registered by name (`rollout.engine`), and the pre-run rules each
asks of an engine's capabilities (engines/base.py): never of its name. An engine is registered by its module,
imported when a run first asks it something (its build, capabilities or requirements): the modules load torch
and transformers, which a command that only names the engine (gspo explain's card) does without."""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable

from gspo.algos import available, get
from gspo.conf.errors import GspoError
from gspo.trainer.engines.base import Capabilities, EngineKind
from gspo.trainer.engines.logp_origin import ENGINE, old_logp_origin
from gspo.trainer.parallel.world import World

ENGINES: dict[str, EngineKind] = {}
AUTO = "auto"  # rollout.engine=auto (conf/rollout/auto.yaml): resolved by resolve_engine before the run starts


def register_engine(kind: EngineKind) -> EngineKind:
    ENGINES[kind.name] = kind
    return kind


def engine_kind(name: str) -> EngineKind:
    if name not in ENGINES:
        raise GspoError(f"rollout.engine={name!r}: use one of {', '.join(sorted(ENGINES))}")
    return ENGINES[name]


def capabilities_of(rollout) -> Capabilities:
    """What the engine `rollout` (cfg.rollout) names does under its settings."""
    return engine_kind(rollout.engine).capabilities(rollout)


def _deferred(module: str, name: str) -> Callable:
    """`module`'s function `name`, its module imported at the first call (then cached by Python's import system)."""
    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)
    call.__qualname__ = f"{module}.{name}"
    return call


def register_engine_module(name: str, module: str, **kind) -> EngineKind:
    """Register the engine `name` whose build, capabilities and require are those of `module` (imported on first use)."""
    return register_engine(EngineKind(name, build=_deferred(module, "build"), capabilities=_deferred(module, "capabilities"),
                                      **kind))


# auto_rank: vLLM first where it can serve the config (its own kernels, paged KV cache: the faster sampler on a GPU),
# the hf engine, which runs everywhere, otherwise
register_engine_module("hf", "gspo.trainer.engines.hf_engine", auto_rank=1,
               describe=lambda r: f"hf engine ({r.sampler} sampler), dtype {r.dtype}")
register_engine_module("vllm", "gspo.trainer.engines.vllm_engine", auto_rank=0,
               require=_deferred("gspo.trainer.engines.vllm_engine", "require"),
               describe=lambda r: f"vllm engine, dtype {r.vllm_dtype}")


def resolve_engine(cfg, world: World = World(), needs: tuple[str, ...] = ()) -> str:
    """The engine `cfg.rollout.engine` names; for `auto`, the first engine by `auto_rank` that passes every
    pre-run rule of check_engine under this config (its library installed, its platform able, LoRA / FSDP
    served) and has the capabilities in `needs` (Routing Replay's, trainer/preflight.py replay_needs), so the
    choice is made on capabilities and never on a name."""
    if cfg.rollout.engine != AUTO:
        return cfg.rollout.engine
    refused = []
    for kind in sorted((k for k in ENGINES.values() if k.auto_rank is not None), key=lambda k: k.auto_rank):
        trial = copy.deepcopy(cfg)
        trial.rollout.engine = kind.name
        try:
            check_engine(trial, world)
        except GspoError as e:
            refused.append(f"{kind.name}: {e}")
            continue
        lacking = [need for need in needs if not getattr(kind.capabilities(trial.rollout), need)]
        if lacking:
            refused.append(f"{kind.name}: lacks {', '.join(lacking)}")
            continue
        return kind.name
    raise GspoError(f"rollout=auto: no registered engine can serve this config ({'; '.join(refused)})")


def make_engine(cfg, model, tokenizer):
    """The engine `cfg.rollout.engine` names, returning its log-probs when the loss takes the engine's own or the
    algorithm reads the sampler's (OPSM's mask, DPPO's anchor: `reads_sampler`)."""
    reads = cfg.algo.name in available() and get(cfg.algo.name).reads_sampler  # an eval may name an unloaded plugin
    want = old_logp_origin(cfg.algo) == ENGINE or reads
    return engine_kind(cfg.rollout.engine).build(cfg, model, tokenizer, want_logprobs=want)


def check_engine(cfg, world: World = World()) -> None:
    """Fail before a run starts, in one line, when the configured engine cannot do what the config asks of it
    (its capabilities), or its library is missing or its platform cannot honour its options."""
    r = cfg.rollout
    kind = engine_kind(r.engine)
    can: Capabilities = kind.capabilities(r)
    if cfg.model.lora.r > 0 and not can.lora:
        raise GspoError(f"model.lora with rollout={r.engine} is not supported yet (the engine would need the merged "
                        f"weights after every update): use rollout={_able('lora', r)}")
    if cfg.train.fsdp and not can.sharded_policy:
        raise GspoError(f"train.fsdp=true with rollout.engine={r.engine}: the engine needs the whole weights every "
                        f"step; use rollout={_able('sharded_policy', r)} with train.fsdp")
    if world.size > 1 and can.tensor_parallel and r.tensor_parallel_size > 1:
        raise GspoError(f"rollout.tensor_parallel_size={r.tensor_parallel_size} with {world.size} processes: "
                        "under torchrun each rank runs its own colocated engine; use tensor_parallel_size=1")
    kind.require(r)


def _able(capability: str, rollout) -> str:
    """The registered engines that have `capability` under `rollout`'s other settings, as a rollout= choice."""
    return " or rollout=".join(n for n, k in ENGINES.items() if getattr(k.capabilities(rollout), capability))

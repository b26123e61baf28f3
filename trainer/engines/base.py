"""What every rollout engine is (`Engine`), what it can do (`Capabilities`), and what registers one
(`EngineKind`, in engines/registry.py, as algorithms, tasks and benchmarks have theirs).

The trainer asks an engine's capabilities, never its name: a new engine (SGLang, a remote server) is one
module with a class that has `generate`, `tokenizer`, `sync_weights`, one `register_engine_module(...)`
call (engines/registry.py) and one yaml in conf/rollout/ with its `engine:` name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # engines/rollout.py imports torch; the registry reads this module without it
    from gspo.trainer.engines.rollout import Rollout


@dataclass(frozen=True)
class Capabilities:
    """What an engine does under given rollout settings; each pre-run rule and step decision reads these."""

    logprobs: bool = False  # returns the log-prob of each sampled token when built with want_logprobs
    exact_logprobs: bool = False  # ... computed as the trainer's own forward computes them (same model, same
    #                               precision): the loss may take them as the old log-probs (old_logp_source=auto)
    records_routing: bool = False  # records the MoE experts each decoding step chose (algo.routing_replay=rollout)
    lora: bool = False  # samples the policy with its LoRA adapters on
    sharded_policy: bool = False  # samples a policy FSDP shards across the ranks (train.fsdp)
    tensor_parallel: bool = False  # spreads its own copy of the weights over rollout.tensor_parallel_size GPUs
    lagged_copy: bool = False  # samples a copy of the policy handed over by version, k updates old (rollout.lag)


class Engine(Protocol):
    """The interface of a rollout engine: the trainer calls nothing else."""

    tokenizer: Any

    def generate(self, prompts: list[str], *, seed: int, greedy: bool = False,
                 max_new_tokens: int | None = None) -> Rollout:
        """Complete each prompt once; prompt i samples with seed + i."""
        ...

    def sync_weights(self, model) -> None:
        """Take the trained model's current weights, so the next rollout samples the current policy."""
        ...


def _nothing(_rollout) -> None:
    return None


@dataclass(frozen=True)
class EngineKind:
    """One registered engine: `build(cfg, model, tokenizer, want_logprobs=)` -> Engine; `capabilities(cfg.rollout)`
    what it does under those settings; `require(cfg.rollout)` raises a GspoError before the run when its library
    is missing or the platform cannot honour its options."""

    name: str
    build: Callable[..., Engine]
    capabilities: Callable[[Any], Capabilities]
    require: Callable[[Any], None] = _nothing
    describe: Callable[[Any], str] | None = None  # cfg.rollout -> "<name> engine, dtype ..." (the loss card)
    auto_rank: int | None = None  # rollout.engine=auto tries engines by this rank, lowest first; None: never picked

    def description(self, rollout) -> str:
        """How this engine samples under `rollout`, in words: its own `describe`, else its name."""
        return self.describe(rollout) if self.describe is not None else f"{self.name} engine"

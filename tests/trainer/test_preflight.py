"""The pre-run checks are one pass (trainer/preflight.check_run) that asks each component for its own rules:
each component's refusal comes out of it, and a config every component accepts passes."""

from __future__ import annotations

import pytest
import torch

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.trainer.parallel.distributed import World
from gspo.trainer.preflight import check_routing_replay, check_run
from gspo.trainer.tasks.registry import build_task
from tests.conftest import TINY

CPU = torch.device("cpu")


@pytest.mark.parametrize("overrides, world, message", [
    (("algo.correction.kind=tis",), 1, r"^algo.correction.kind=tis corrects"),  # the algorithm (step/advantages)
    (("train.prompts_per_step=3",), 2, r"^train.prompts_per_step=3 groups do not divide"),  # the layout (parallel)
    (("model=tiny-moe", "algo.routing_replay=rollout"), 2, r"^algo.routing_replay=rollout \(R3\) runs in one process"),
    (("algo.routing_replay=trainer",), 1, r"^algo.routing_replay=trainer needs a Mixture-of-Experts model and the "
                                          r"embedded model is dense: use model=tiny-moe"),  # Routing Replay (preflight)
    (("model=tiny-moe", "algo.routing_replay=rollout", "rollout=hf", "rollout.sampler=generate"), 1,
     r"^algo.routing_replay=rollout replays .* rollout=hf with rollout.sampler=generate records none"),
    (("train.fsdp=true",), 1, r"^train.fsdp=true shards the model across processes"),  # FSDP (parallel/fsdp)
    (("rollout=vllm", "model.lora.r=8"), 1, r"^model.lora with rollout=vllm"),  # the engine's capabilities
])
def test_each_components_refusal_comes_out_of_the_one_pass(overrides, world, message):
    cfg = compose_config([*TINY, *overrides])
    with pytest.raises(GspoError, match=message):
        check_run(cfg, build_task(cfg.task), World(0, world), CPU)


def test_a_config_every_component_accepts_passes_and_gives_the_precision():
    cfg = compose_config(TINY)
    assert check_run(cfg, build_task(cfg.task), World(0, 1), CPU) == "fp32"


def test_routing_replay_is_checked_before_the_model_or_the_run_folder(monkeypatch):
    """Whether the policy has experts is read from the model's config (no weights load): a hub model whose config
    declares none is refused in the one pass, before the run folder opens; one that declares experts passes it."""
    from types import SimpleNamespace

    from gspo.trainer.parallel import moe

    configs = {"org/dense": SimpleNamespace(num_hidden_layers=2), "org/mixtral-like": SimpleNamespace(num_local_experts=8)}
    monkeypatch.setattr(moe.AutoConfig, "from_pretrained", lambda name, **_: configs[name])
    cfg = compose_config([*TINY, "algo.routing_replay=trainer"])
    cfg.model.name = "org/dense"
    with pytest.raises(GspoError, match=r"^algo.routing_replay=trainer needs a Mixture-of-Experts model and org/dense "
                                        r"declares no experts in its config$"):
        check_routing_replay(cfg, World(0, 1))
    cfg.model.name = "org/mixtral-like"
    check_routing_replay(cfg, World(0, 1))


def test_auto_picks_an_engine_that_records_the_experts_for_rollout_replay(monkeypatch):
    """rollout=auto with R3 skips an engine that serves the config but records no experts (replay_needs)."""
    from gspo.trainer.engines import registry
    from gspo.trainer.engines.base import Capabilities, EngineKind
    from gspo.trainer.preflight import replay_needs

    blind = EngineKind("blind", build=None, capabilities=lambda r: Capabilities(logprobs=True), auto_rank=-1)
    monkeypatch.setitem(registry.ENGINES, "blind", blind)
    cfg = compose_config(["rollout=auto", "model=tiny-moe", "algo.routing_replay=rollout"])
    assert registry.resolve_engine(cfg) == "blind"  # without the need, the first by auto_rank
    assert registry.resolve_engine(cfg, needs=replay_needs(cfg.algo)) != "blind"

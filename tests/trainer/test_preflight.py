"""The pre-run checks are one pass (trainer/preflight.check_run) that asks each component for its own rules:
each component's refusal comes out of it, and a config every component accepts passes."""

from __future__ import annotations

import pytest
import torch

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.trainer.parallel.distributed import World
from gspo.trainer.preflight import check_run
from gspo.trainer.tasks.registry import build_task
from tests.conftest import TINY

CPU = torch.device("cpu")


@pytest.mark.parametrize("overrides, world, message", [
    (("algo.correction.kind=tis",), 1, r"^algo.correction.kind=tis corrects"),  # the algorithm (step/advantages)
    (("train.prompts_per_step=3",), 2, r"^train.prompts_per_step=3 groups do not divide"),  # the layout (parallel)
    (("model=tiny-moe", "algo.routing_replay=rollout"), 2, r"^algo.routing_replay=rollout \(R3\) runs in one process"),
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

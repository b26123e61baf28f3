"""Engines are registered and asked for their capabilities, never their names: each pre-run rule follows a
capability, and a new engine is one class, one register call and one yaml (a throwaway engine trains)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.trainer.engines import hf_engine
from gspo.trainer.engines.base import Capabilities, EngineKind
from gspo.trainer.engines.registry import (
    AUTO,
    ENGINES,
    capabilities_of,
    check_engine,
    engine_kind,
    register_engine,
)
from gspo.trainer.parallel.distributed import World
from tests.conftest import LEARNING_SEED, TINY

ROOT = Path(__file__).resolve().parents[3]


def test_every_rollout_preset_names_a_registered_engine():
    from gspo.conf.compose import declared

    assert sorted(set(declared()["rollout"]) - {AUTO}) == sorted(ENGINES) == ["hf", "vllm"]
    assert AUTO in declared()["rollout"]  # rollout=auto: no engine of its own, resolved to one of them (resolve_engine)
    with pytest.raises(GspoError, match=r"^rollout.engine='sglang': use one of hf, vllm$"):
        engine_kind("sglang")


@pytest.mark.parametrize("overrides, can", [
    ((), Capabilities(logprobs=True, exact_logprobs=True, records_routing=True, lora=True, sharded_policy=True,
                      lagged_copy=True)),
    (("rollout.sampler=generate",), Capabilities(logprobs=True, lora=True, sharded_policy=True, lagged_copy=True)),
    (("rollout.dtype=bfloat16",), Capabilities(logprobs=True, records_routing=True, lora=True, sharded_policy=True,
                                               lagged_copy=True)),
    (("rollout=vllm",), Capabilities(logprobs=True, tensor_parallel=True)),
])
def test_capabilities_follow_the_rollout_settings(overrides, can):
    assert capabilities_of(compose_config([*TINY, *overrides]).rollout) == can


@pytest.mark.parametrize("overrides, world, message", [
    (("rollout=vllm", "model.lora.r=8"), 1, r"^model.lora with rollout=vllm is not supported yet .*: use rollout=hf$"),
    (("rollout=vllm", "train.fsdp=true"), 2, r"^train.fsdp=true with rollout.engine=vllm: .*use rollout=hf with"),
    (("rollout=vllm", "rollout.tensor_parallel_size=2"), 2, r"^rollout.tensor_parallel_size=2 with 2 processes: .*colocated"),
])
def test_each_pre_run_rule_asks_a_capability(overrides, world, message):
    cfg = compose_config([*TINY, *overrides])
    with pytest.raises(GspoError, match=message):
        check_engine(cfg, World(0, world))
    # the same settings on an engine that has the capability pass (hf: lora, shards; a tensor-parallel size it does
    # not use). Routing Replay's need of the engine (records_routing) is a preflight rule: tests/trainer/test_preflight.py
    fine = [o for o in overrides if o not in ("rollout=vllm", "rollout.sampler=generate")]
    check_engine(compose_config([*TINY, *fine]), World(0, world))


def test_no_module_branches_on_an_engine_name():
    """Outside the registrations, no comparison in the package reads `.engine` against a string."""
    found = []
    for top in ("algos", "conf", "evals", "trainer", "report", "cli"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Compare):
                    sides = [node.left, *node.comparators]
                    if (any(isinstance(s, ast.Attribute) and s.attr == "engine" for s in sides)
                            and any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides)):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


class CountingEngine(hf_engine.HFEngine):
    """The throwaway engine: the hf engine's sampling, counted, claiming no capability beyond log-probs."""

    calls: list[int] = []

    def generate(self, prompts, **kwargs):
        CountingEngine.calls.append(len(prompts))
        return super().generate(prompts, **kwargs)


def _build_counting(cfg, model, tokenizer, *, want_logprobs: bool):
    r = cfg.rollout
    return CountingEngine(model, tokenizer, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                          batch_size=r.batch_size, want_logprobs=want_logprobs)


def test_a_new_engine_is_one_class_one_register_call_and_one_yaml(gspo, tmp_path):
    conf = tmp_path / "conf"
    (conf / "rollout").mkdir(parents=True)
    (conf / "rollout" / "counting.yaml").write_text("engine: counting\n")
    register_engine(EngineKind("counting", build=_build_counting, capabilities=lambda r: Capabilities(logprobs=True)))
    CountingEngine.calls.clear()
    try:
        search = f"hydra.searchpath=[file://{conf}]"
        run = gspo.train(tmp_path, "counting", f"seed={LEARNING_SEED}", "train.steps=1", "train.eval_every=0",
                         "logger.progress=false", search, "rollout=counting")
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert rows and CountingEngine.calls and sum(CountingEngine.calls) >= 8  # it sampled the step's groups
        # what it cannot do is refused by its capabilities, in one line, before a run
        with pytest.raises(GspoError, match=r"^model.lora with rollout=counting .*: use rollout=hf$"):
            check_engine(compose_config([*TINY, search, "rollout=counting", "model.lora.r=8"]))
    finally:
        del ENGINES["counting"]


def test_each_registered_engine_implements_the_interface():
    """Every built-in engine class has the Engine methods with the interface's parameters (vLLM's class is
    checked without vLLM: its module imports without it)."""
    import inspect

    from gspo.trainer.engines.base import Engine
    from gspo.trainer.engines.vllm_engine import _VLLMEngine

    for cls in (hf_engine.HFEngine, _VLLMEngine):
        for method in ("generate", "sync_weights"):
            want = list(inspect.signature(getattr(Engine, method)).parameters)
            assert list(inspect.signature(getattr(cls, method)).parameters) == want, (cls.__name__, method)

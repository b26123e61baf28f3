"""rollout=auto: the first engine by auto_rank whose pre-run rules pass under the config, chosen by capability."""

from __future__ import annotations

import dataclasses

import pytest

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.trainer.engines import registry
from gspo.trainer.engines.registry import ENGINES, resolve_engine


def _vllm_able(monkeypatch, able: bool) -> None:
    def require(_rollout):
        if not able:
            raise GspoError("rollout=vllm needs vLLM, which is not installed")

    monkeypatch.setitem(ENGINES, "vllm", dataclasses.replace(ENGINES["vllm"], require=require))


@pytest.mark.parametrize("able, picked", [(True, "vllm"), (False, "hf")])
def test_auto_picks_vllm_where_it_can_serve_the_run_and_hf_otherwise(monkeypatch, able, picked):
    _vllm_able(monkeypatch, able)
    assert resolve_engine(compose_config(["rollout=auto"])) == picked
    assert resolve_engine(compose_config(["rollout=hf"])) == "hf"  # a named engine is kept as named


def test_auto_skips_an_engine_that_cannot_serve_the_config(monkeypatch):
    """LoRA: vLLM has no LoRA capability here, so auto takes hf even where vLLM is installed."""
    _vllm_able(monkeypatch, True)
    assert resolve_engine(compose_config(["rollout=auto", "model.lora.r=4"])) == "hf"


def test_auto_with_no_engine_able_is_one_line_naming_each_refusal(monkeypatch):
    _vllm_able(monkeypatch, False)
    monkeypatch.setitem(ENGINES, "hf", dataclasses.replace(ENGINES["hf"], auto_rank=None))
    with pytest.raises(GspoError, match=r"rollout=auto: no registered engine can serve this config \(vllm: rollout="):
        registry.resolve_engine(compose_config(["rollout=auto"]))

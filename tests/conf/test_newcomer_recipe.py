"""The GPU recipe's last unsourced choices (issue 60): Qwen3's thinking mode at a 2,048-token budget is a setting
(rollout.chat_template_kwargs) the Qwen3 presets turn off, with its source, and AdamW's betas are verl's and TRL's."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from gspo.conf import compose_config
from gspo.trainer.policy import with_chat_kwargs


@pytest.mark.parametrize("model", ["qwen3-0.6b", "qwen3-1.7b"])
def test_the_qwen3_presets_turn_thinking_off_and_take_verl_s_betas(model):
    cfg = compose_config([f"model={model}", "task=math"])
    assert OmegaConf.to_container(cfg.rollout.chat_template_kwargs) == {"enable_thinking": False}
    assert list(cfg.train.adam_betas) == [0.9, 0.999]
    thinking_on = compose_config([f"model={model}", "task=math", "rollout.chat_template_kwargs.enable_thinking=true"])
    assert thinking_on.rollout.chat_template_kwargs.enable_thinking is True
    assert OmegaConf.to_container(compose_config([]).rollout.chat_template_kwargs) == {}  # the toy: none


def test_the_kwargs_reach_every_chat_template_the_tokenizer_renders():
    class Tokenizer:
        def apply_chat_template(self, messages, **kwargs):
            return kwargs

    tok = with_chat_kwargs(Tokenizer(), {"enable_thinking": False})
    assert tok.apply_chat_template([], add_generation_prompt=True) == {"enable_thinking": False,
                                                                      "add_generation_prompt": True}
    plain = with_chat_kwargs(Tokenizer(), {})
    assert plain.apply_chat_template([]) == {}

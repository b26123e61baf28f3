"""The colocated vLLM engine's call order, against a fake LLM (no vLLM needed): it sleeps after every
rollout and wakes before a weight sync or the next rollout, and its CPU rollout moves to the trainer's device."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from gspo.evals.arith import ALPHABET
from gspo.trainer.engines.vllm_engine import SleepMode, _VLLMEngine
from gspo.trainer.model.models import build_char_tokenizer


class FakeLLM:
    """Answers every prompt with the tokens of "7" and an eos; logs what the engine asks of it."""

    def __init__(self, log: list, eos: int, seven: int):
        self.log, self.eos, self.seven = log, eos, seven

    def generate(self, batch, params, use_tqdm=False):
        self.log.append("generate")
        return [SimpleNamespace(prompt_token_ids=b["prompt_token_ids"],
                                outputs=[SimpleNamespace(token_ids=[self.seven, self.eos], logprobs=None)]) for b in batch]

    def sleep(self, level):
        self.log.append(f"sleep{level}")

    def wake_up(self):
        self.log.append("wake")

    def reset_prefix_cache(self):
        self.log.append("reset")


class FakeModel:
    def __init__(self, log):
        self.log = log

    def load_weights(self, weights):
        self.log.append("load")


def _engine(log: list, *, sleep: bool) -> _VLLMEngine:
    tokenizer = build_char_tokenizer(ALPHABET)
    engine = _VLLMEngine.__new__(_VLLMEngine)  # the attributes __init__ sets, without starting vLLM
    engine.tokenizer, engine.eos_ids = tokenizer, [tokenizer.eos_token_id]
    engine.temperature, engine.top_p, engine.max_new_tokens, engine.batch_size = 1.0, 1.0, 8, 64
    engine.want_logprobs, engine._sampling_params = False, dict
    engine.llm = FakeLLM(log, tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("7"))
    engine._local, engine.sleep_mode = FakeModel(log), SleepMode(engine.llm, sleep)
    engine.sync_mode, engine.sync_seconds = "load_weights", 0.0
    return engine


def test_sleeps_after_each_rollout_and_wakes_before_sync_and_generate():
    log: list = []
    engine = _engine(log, sleep=True)
    rollout = engine.generate(["1+2=", "3*3="], seed=0)  # a training rollout
    engine.sync_weights(torch.nn.Linear(1, 1))  # after the update
    engine.generate(["1+2="], seed=1, greedy=True)  # an eval right after the sync: weights are current
    engine.generate(["1+2="], seed=2)  # the next step's rollout
    assert log == ["generate", "sleep1", "wake", "load", "reset", "generate", "sleep1", "wake", "generate", "sleep1"]
    assert rollout.texts == ["7", "7"] and rollout.completion_mask.tolist() == [[1.0, 1.0]] * 2
    moved = rollout.to(torch.device("meta"))  # what the loop does with it
    assert moved.input_ids.device.type == moved.completion_mask.device.type == "meta"


def test_without_sleep_mode_it_never_sleeps():
    log: list = []
    engine = _engine(log, sleep=False)
    engine.generate(["1+2="], seed=0)
    engine.sync_weights(torch.nn.Linear(1, 1))
    assert log == ["generate", "load", "reset"]

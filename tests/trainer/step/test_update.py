"""`trainer.update`: the minibatch update runs the configured algorithm with the configured options.

A tiny fp32 model and a hand-made off-policy batch (old log-probs shifted from the model's own), so
every metric and every parameter change of `update` can be compared, to float32 precision, with
`gspo.algos` called directly on the whole batch. The algorithms give different numbers on this batch, so an update that
ran the wrong one (or dropped an option, a micro-batch share, a KL term) cannot match.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from gspo.algos import policy_loss
from gspo.trainer.engines.rollout import Rollout
from gspo.trainer.model.logprobs import completion_logprobs
from gspo.trainer.model.models import build_tiny_qwen3
from gspo.trainer.model.precision import Precision
from gspo.trainer.parallel.distributed import World
from gspo.trainer.state import make_optimizer
from gspo.trainer.step.context import StepContext
from gspo.trainer.step.reduction import to_host
from gspo.trainer.step.update import Batch, micro_batches, run_updates

N, P, T, V = 8, 3, 5, 13
TOL = {"rel": 1e-5, "abs": 1e-6}  # float32 model and metrics
PARAM_TOL = {"rtol": 0, "atol": 1e-6}
SAMPLING = SimpleNamespace(temperature=1.0, top_p=1.0, max_new_tokens=T)
LENGTHS = [5, 1, 3, 5, 2, 4, 5, 3]  # completion tokens, eos included
CLIP = {"clip_low": 0.05, "clip_high": 0.07}  # narrow: some tokens and sequences of the batch are clipped


def _model():
    model = build_tiny_qwen3(V, hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2, num_kv_heads=1,
                             seed=0)
    return model.eval()


@pytest.fixture(scope="module")
def batch() -> Batch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, V, (N, P + T), generator=g)
    lengths = torch.tensor(LENGTHS)
    mask = (torch.arange(T) < lengths[:, None]).float()  # [N, T]
    attention = torch.cat([torch.ones(N, P, dtype=torch.long), mask.long()], 1)
    rollout = Rollout(ids, attention, mask, [""] * N, lengths == T)
    with torch.no_grad():
        logp, _ = completion_logprobs(_model(), ids, attention, T)
    old_logp = (logp + 0.08 * torch.randn(N, T, generator=g)) * mask  # off-policy
    ref_logp = (logp + 0.3 * torch.randn(N, T, generator=g)) * mask
    adv = torch.tensor([1.2, -0.7, 0.4, -1.5, 0.9, 0.3, -0.2, -0.4])
    return Batch(rollout, adv, old_logp, ref_logp, LENGTHS)


def _algo(name="grpo", aggregation="seq_mean_token_mean", **kw):
    options = {"aggregation": aggregation} if name == "grpo" else {}
    return SimpleNamespace(**{"name": name, "options": options, "kl_beta": 0.0, "kl_unbiased": False, "entropy_coef": 0.0, **CLIP, **kw})


def _train(**kw):
    base = {"epochs": 1, "minibatches": 1, "micro_batch_size": None, "max_grad_norm": 1e9, "logprob_chunk": 1024,
            "lr": 0.0, "steps": 1, "warmup_steps": 0, "lr_schedule": "constant", "adam_betas": [0.9, 0.99],
            "weight_decay": 0.0}
    return SimpleNamespace(**{**base, **kw})


def _run(batch: Batch, algo, train, *, lr: float = 0.0, with_ref: bool = False, widths: list[int] | None = None):
    """run_updates with plain SGD(lr) on a fresh model; returns (metrics, model, forward batch sizes); each
    forward's width (columns) is appended to `widths` when given."""
    model = _model()
    sizes: list[int] = []

    def seen(_m, _a, kw):
        sizes.append(kw["input_ids"].shape[0])
        if widths is not None:
            widths.append(kw["input_ids"].shape[1])

    model.get_decoder().register_forward_pre_hook(seen, with_kwargs=True)
    precision = Precision(model, "fp32", torch.device("cpu"))
    opt = torch.optim.SGD(precision.master, lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _i: 1.0)
    b = batch if with_ref else dataclasses.replace(batch, ref_logp=None)
    ctx = StepContext(algo, train, SAMPLING, model=model, precision=precision, optimizer=opt, scheduler=sched)
    metrics = run_updates(ctx, b, seed=0)
    return to_host(metrics), model, sizes


def _expected(batch: Batch, algo, *, with_ref: bool = False):
    """The whole batch through gspo.algos directly: (loss, metrics, gradient per parameter)."""
    model = _model()
    r = batch.rollout
    logp, _ = completion_logprobs(model, r.input_ids, r.attention_mask, T)
    loss, metrics = policy_loss(
        algo.name, logp=logp, old_logp=batch.old_logp, advantages=batch.advantages, mask=r.completion_mask,
        clip_low=algo.clip_low, clip_high=algo.clip_high, **algo.options, max_len=T,
        ref_logp=batch.ref_logp if with_ref else None, kl_beta=algo.kl_beta, seq_denominator=float(N),
        token_denominator=float(r.completion_mask.sum()))
    loss.backward()
    return loss, {k: float(v) for k, v in metrics.items()}, {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_metrics_equal(got: dict, want: dict) -> None:
    for key, value in want.items():
        assert got[key] == pytest.approx(value, **TOL), key


CASES = [("grpo", "seq_mean_token_mean"), ("grpo", "token_mean"), ("gspo", "seq_mean_token_mean"),
         ("gspo_token", "seq_mean_token_mean")]


def _per_token_advantages(batch: Batch) -> Batch:
    """gspo_token's own input: A_it varying along each sequence ([N, T]); gspo would reject it."""
    g = torch.Generator().manual_seed(1)
    adv = batch.advantages[:, None] * (1 + 0.5 * torch.randn(N, T, generator=g))
    return Batch(batch.rollout, adv, batch.old_logp, batch.ref_logp, LENGTHS)


@pytest.mark.parametrize(("name", "aggregation"), CASES)
def test_update_runs_the_configured_algorithm_and_aggregation(batch, name, aggregation):
    algo = _algo(name, aggregation=aggregation)
    if name == "gspo_token":
        batch = _per_token_advantages(batch)
    metrics, _, _ = _run(batch, algo, _train())
    _, want, _ = _expected(batch, algo)
    _assert_metrics_equal(metrics, want)


def test_the_cases_differ_so_a_wrong_algorithm_or_aggregation_would_show(batch):
    losses = {case: _expected(_per_token_advantages(batch) if case[0] == "gspo_token" else batch,
                              _algo(case[0], aggregation=case[1]))[1]["loss/policy"] for case in CASES}
    values = sorted(losses.values())
    assert all(b - a > 1e-4 for a, b in zip(values, values[1:], strict=False)), losses


def test_gspo_token_equals_gspo_in_the_update(batch):
    # DESIGN: equal in value and gradient when A_it = A_i; the update must not add a per-token length weight
    grads = {}
    for name in ("gspo", "gspo_token"):
        _, model, _ = _run(batch, _algo(name), _train(), lr=1.0)
        grads[name] = [p.detach().clone() for p in model.parameters()]
    for a, b in zip(grads["gspo"], grads["gspo_token"], strict=True):
        torch.testing.assert_close(a, b, **PARAM_TOL)


@pytest.mark.parametrize("micro", [None, 3, 1])
def test_micro_batches_give_the_whole_batch_step_and_metrics(batch, micro):
    """Gradient accumulation: the same step and the same metrics for any micro-batch size, and no forward
    in the update sees more rows than a micro-batch."""
    algo = _algo("grpo")
    lr = 0.5
    metrics, model, sizes = _run(batch, algo, _train(micro_batch_size=micro), lr=lr)
    _, want, grads = _expected(batch, algo)
    _assert_metrics_equal(metrics, want)
    assert max(sizes) == (micro or N) and sum(sizes) == N
    start = dict(_model().named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), start[name].detach() - lr * grads[name], **PARAM_TOL)


def _left_padded(batch: Batch) -> tuple[Batch, list[int]]:
    """The batch with prompts of different lengths: row i's first PADS[i] prompt tokens are left padding."""
    pads = [2, 0, 1, 2, 0, 1, 2, 1]
    r = batch.rollout
    attention = r.attention_mask.clone()
    for i, pad in enumerate(pads):
        attention[i, :pad] = 0
    ids = r.input_ids.masked_fill(attention == 0, 0)
    rollout = Rollout(ids, attention, r.completion_mask, r.texts, r.truncated)
    with torch.no_grad():
        logp, _ = completion_logprobs(_model(), ids, attention, T)
    g = torch.Generator().manual_seed(2)
    old = (logp + 0.08 * torch.randn(N, T, generator=g)) * r.completion_mask
    return Batch(rollout, batch.advantages, old, None, LENGTHS, None, pads), pads


def test_micro_batches_sort_by_length_and_trim_padding_without_changing_the_step(batch):
    """Length-sorted micro-batches (issue 26): rows of like size share a micro-batch, each forward drops the
    all-padding columns at both ends, and the step and the metrics are the whole batch's (only the order
    of sums differs)."""
    padded, pads = _left_padded(batch)
    sizes = padded.sizes()
    assert sizes == [P - pad + n for pad, n in zip(pads, LENGTHS, strict=True)]
    idx = [3, 1, 6, 0, 5, 2, 7, 4]
    parts = micro_batches(idx, 3, World(), sizes)
    assert [sizes[i] for part in parts for i in part] == sorted(sizes)  # sorted, stable
    assert micro_batches(idx, None, World(), sizes) == [idx]  # one micro-batch: the order is left alone
    algo, lr = _algo("grpo"), 0.5
    widths: list[int] = []
    metrics, model, _ = _run(padded, algo, _train(micro_batch_size=3), lr=lr, widths=widths)
    order = sorted(torch.randperm(N, generator=torch.Generator().manual_seed(0)).tolist(), key=lambda i: sizes[i])
    want_widths = [P - min(pads[i] for i in part) + max(LENGTHS[i] for i in part)
                   for part in (order[s : s + 3] for s in range(0, N, 3))]
    assert widths == want_widths and sum(want_widths) < 3 * (P + T)  # fewer columns than one padded block
    _, want, grads = _expected(padded, algo)
    _assert_metrics_equal(metrics, want)
    start = dict(_model().named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), start[name].detach() - lr * grads[name], **PARAM_TOL)


def test_kl_term_reaches_the_loss_and_policy_kl_ref(batch):
    algo = _algo("gspo", kl_beta=0.1)
    lr = 0.5
    metrics, model, _ = _run(batch, algo, _train(micro_batch_size=3), lr=lr, with_ref=True)
    _, want, grads = _expected(batch, algo, with_ref=True)
    assert want["policy/kl_ref"] > 0.01  # the reference differs from the policy on this batch
    _assert_metrics_equal(metrics, want)
    start = dict(_model().named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), start[name].detach() - lr * grads[name], **PARAM_TOL)
    # the KL term is in the gradient: beta = 0.1 moves the parameters differently from beta = 0
    _, model0, _ = _run(batch, _algo("gspo"), _train(micro_batch_size=3), lr=lr, with_ref=True)
    assert any((a - b).abs().max() > 1e-6 for a, b in zip(model.parameters(), model0.parameters(), strict=True))


def test_entropy_bonus_reaches_the_parameters(batch):
    # the expected step from another code path: the model's full logits through torch.distributions (log-probs and
    # entropies of the completion positions), GRPO's loss less c x 1/N sum_i 1/|y_i| sum_t H_it, one SGD step
    algo, lr, c = _algo("grpo", entropy_coef=0.5), 0.5, 0.5
    _, model, _ = _run(batch, algo, _train(micro_batch_size=3), lr=lr)
    ref = _model()
    r = batch.rollout
    logits = ref(input_ids=r.input_ids, attention_mask=r.attention_mask).logits[:, P - 1 : P + T - 1].float()
    dist = torch.distributions.Categorical(logits=logits)
    logp, entropy = dist.log_prob(r.input_ids[:, P:]), dist.entropy()  # [N, T]
    mask = r.completion_mask
    loss, _ = policy_loss("grpo", logp=logp, old_logp=batch.old_logp, advantages=batch.advantages, mask=mask,
                          aggregation="seq_mean_token_mean", **CLIP)
    loss = loss - c * ((entropy * mask).sum(-1) / mask.sum(-1)).mean()
    loss.backward()
    start = dict(_model().named_parameters())
    for name, p in model.named_parameters():
        grad = dict(ref.named_parameters())[name].grad
        torch.testing.assert_close(p.detach(), start[name].detach() - lr * grad, **PARAM_TOL)
    # and the bonus moved them: c = 0 gives another step
    _, model0, _ = _run(batch, _algo("grpo"), _train(micro_batch_size=3), lr=lr)
    assert any((a - b).abs().max() > 1e-4 for a, b in zip(model.parameters(), model0.parameters(), strict=True))


def test_epochs_and_minibatches_are_optimizer_steps(batch):
    """E epochs x M minibatches: E*M optimizer steps, each over its own shuffled shard; the metrics are
    the mean over those updates (lr=0, so each shard is measured against the same model)."""
    algo = _algo("grpo")
    model = _model()
    precision = Precision(model, "fp32", torch.device("cpu"))
    opt = torch.optim.SGD(precision.master, lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _i: 1.0)
    b = Batch(batch.rollout, batch.advantages, batch.old_logp, None, LENGTHS)
    ctx = StepContext(algo, _train(epochs=3, minibatches=2), SAMPLING, model=model, precision=precision, optimizer=opt,
                      scheduler=sched)
    metrics = to_host(run_updates(ctx, b, seed=7))
    assert sched.last_epoch == 6
    gen = torch.Generator().manual_seed(7)
    orders = [torch.randperm(N, generator=gen).tolist() for _ in range(3)]
    shards = [torch.tensor(order[s : s + N // 2]) for order in orders for s in (0, N // 2)]
    r = batch.rollout
    logp, _ = completion_logprobs(_model(), r.input_ids, r.attention_mask, T)
    losses = []
    for idx in shards:
        m = r.completion_mask[idx]
        loss, _ = policy_loss("grpo", logp=logp[idx], old_logp=batch.old_logp[idx], advantages=batch.advantages[idx],
                              mask=m, aggregation="seq_mean_token_mean", seq_denominator=float(len(idx)),
                              token_denominator=float(m.sum()), **CLIP)
        losses.append(float(loss.detach()))
    assert metrics["loss/policy"] == pytest.approx(sum(losses) / 6, **TOL)
    assert len({round(x, 12) for x in losses}) > 1  # shards differ, so a wrong shard count would show


def test_lr_schedules_with_warmup_by_hand():
    """total = steps * M * E optimizer steps; linear warmup over warmup_steps, then decay to 0."""
    want = {
        "constant": [1 / 2, 1, 1, 1, 1, 1],
        "linear": [1 / 2, 1, 1, 0.75, 0.5, 0.25],
        "cosine": [1 / 2, 1, 1, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4))],
    }
    for schedule, factors in want.items():
        train = _train(lr=0.1, steps=3, minibatches=2, warmup_steps=2, lr_schedule=schedule)
        opt, sched = make_optimizer(_model().parameters(), train)
        seen = []
        for _ in range(6):
            seen.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        assert seen == pytest.approx([0.1 * f for f in factors], rel=1e-12), schedule


def test_update_reports_the_scheduled_lr(batch):
    model = _model()
    precision = Precision(model, "fp32", torch.device("cpu"))
    train = _train(lr=0.1, steps=1, minibatches=2, lr_schedule="linear")  # 2 optimizer steps: factors 1, 0.5
    opt, sched = make_optimizer(precision.master, train)
    b = Batch(batch.rollout, batch.advantages, batch.old_logp, None, LENGTHS)
    ctx = StepContext(_algo("grpo"), train, SAMPLING, model=model, precision=precision, optimizer=opt, scheduler=sched)
    metrics = to_host(run_updates(ctx, b, seed=0))
    assert metrics["optim/lr"] == pytest.approx(0.1 * (1 + 0.5) / 2, rel=1e-6)

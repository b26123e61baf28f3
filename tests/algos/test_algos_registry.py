"""The public API: registry, option checking, input validation and the metric names."""

import ast
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

from gspo.algos import ALGOS, REDUCTIONS, available, get, option_names, policy_loss, register
from gspo.vocab.algorithms import TITLES

F64 = torch.float64
OPTIONS = {"grpo": ("aggregation",), "gspo": (), "gspo_token": (), "dapo": ("aggregation",), "dr_grpo": ("aggregation",),
           "cispo": ("aggregation", "anchor"), "sapo": ("tau_pos", "tau_neg", "aggregation"), "gmpo": (),
           "dppo_tv": ("tis_cap", "aggregation", "anchor", "sides", "kl_tau"),
           "dppo_kl": ("tis_cap", "aggregation", "anchor", "sides", "kl_tau"), "opsm": ("delta", "aggregation"),
           "maxrl": ("aggregation",), "gdpo": ("aggregation",), "dro": ("beta", "aggregation"),
           "icepop": ("band_low", "band_high", "aggregation")}  # algo.options
OWN_METRICS = {"opsm": {"clip/opsm_masked_frac"}}  # beyond the standard ones
METRICS = {
    "clip/token_frac", "clip/seq_frac", "clip/low_frac", "clip/high_frac", "clip/ratio_out_of_band_frac",
    "ratio/token_mean", "ratio/token_min", "ratio/token_max", "ratio/seq_mean", "ratio/seq_min",
    "ratio/seq_max", "policy/kl_old", "loss/policy",
}


def inputs(n=2, t=3):
    mask = torch.ones((n, t), dtype=F64)
    return {"logp": torch.zeros((n, t), dtype=F64), "old_logp": torch.zeros((n, t), dtype=F64),
            "advantages": torch.ones(n, dtype=F64), "mask": mask, "clip_low": 0.2, "clip_high": 0.27}


def test_registered_names():
    # the algorithms pinned here are registered with their options; a new one edits no list here (its module
    # registers itself on import of gspo.algos, and its preset's name must match: the vocabulary test below)
    assert set(OPTIONS) <= set(available()) and set(ALGOS) == set(available())
    for name in OPTIONS:
        assert option_names(name) == OPTIONS[name]
    assert get("gspo_token").title == "GSPO-token" and get("grpo").title == "GRPO"
    assert set(TITLES) == set(ALGOS)  # every algorithm gspo ships has its display name in vocab/algorithms.py
    assert get("gspo_token").same_as == "gspo" and get("gspo").on_policy_as == "grpo"


def test_each_algorithm_declares_how_every_metric_reduces():
    for name in available():
        _, metrics = policy_loss(name, **inputs(), ref_logp=torch.zeros((2, 3), dtype=F64))
        declared = get(name).metrics
        assert set(metrics) <= set(declared) and set(declared.values()) <= set(REDUCTIONS)
    assert get("gspo").metrics["clip/seq_frac"] == "seq_mean" and get("grpo").metrics["loss/policy"] == "sum"


def test_the_registries_are_the_vocabulary():
    # conf checks a config against gspo.vocab without importing torch; what algos registers and computes must be
    # exactly those names: an estimator registered without its vocabulary entry (or the reverse), a vocabulary
    # aggregation or correction with no branch that computes it, or an algorithm preset without its loss fails here
    from gspo.algos import ESTIMATORS
    from gspo.algos.common import aggregate
    from gspo.algos.corrections import correction_weights
    from gspo.conf.compose import declared
    from gspo.vocab.choices import Advantage, Aggregation, Correction, Level, Ratio

    assert tuple(ESTIMATORS) == Advantage.values
    values, mask = torch.ones((2, 3), dtype=F64), torch.ones((2, 3), dtype=F64)
    for name in Aggregation.values:
        aggregate(values, mask, aggregation=name, max_len=None, seq_denominator=None, token_denominator=None)
    logp = torch.zeros((2, 3), dtype=F64)
    for kind in Correction.values:
        for level in Level.RESOLVED:
            if (kind != Correction.GEO_RS or level == Level.GEOMETRIC) and (
                    kind not in Correction.SEQUENCE_ONLY or level == Level.SEQUENCE):
                correction_weights(old_logp=logp, engine_logp=logp, mask=mask, kind=kind, level=level, cap=2.0,
                                   low=0.5, high=2.0)
    with pytest.raises(ValueError, match="unknown correction 'is'"):
        correction_weights(old_logp=logp, engine_logp=logp, mask=mask, kind="is", level=Level.TOKEN, cap=2.0, low=0.5,
                           high=2.0)
    assert {get(name).ratio for name in available()} == set(Ratio.values)
    assert set(declared()["algo"]) == set(available())


def test_unknown_algorithm_lists_the_known_ones():
    with pytest.raises(ValueError, match="'ppo'.*cispo, dapo, dppo_kl, dppo_tv, dr_grpo, dro, gdpo, gmpo, grpo, gspo, "
                                         "gspo_token, icepop, luspo, maxrl, opsm, sapo, vespo"):
        policy_loss("ppo", **inputs())


def test_unknown_option_is_named_not_ignored():
    with pytest.raises(TypeError, match="'agregation'.*known: aggregation"):
        policy_loss("grpo", **inputs(), agregation="token_mean")


def test_unknown_aggregation_raises():
    with pytest.raises(ValueError, match="token_sum"):
        policy_loss("grpo", **inputs(), aggregation="token_sum")


@pytest.mark.parametrize("name", ["gspo", "gspo_token", "gmpo"])
def test_gspo_has_no_aggregation_to_ignore(name):
    # GSPO weights each sequence once: an aggregation would be silently ignored, so it is no option
    with pytest.raises(TypeError, match="'aggregation'.*known: none"):
        policy_loss(name, **inputs(), aggregation="token_mean")


def test_register_rejects_duplicates_and_incomplete_functions():
    with pytest.raises(ValueError, match="already registered"):
        register("grpo", metrics={})(ALGOS["grpo"].loss)
    with pytest.raises(TypeError, match="mask"):
        register("incomplete", metrics={})(lambda *, logp, old_logp, advantages, clip_low, clip_high: None)
    with pytest.raises(TypeError, match="neither context nor options"):
        register("undeclared", metrics={})(lambda *, logp, old_logp, advantages, mask, clip_low, clip_high, s=1: None)
    with pytest.raises(ValueError, match="reductions"):
        register("bad", metrics={"m": "median"})(lambda *, logp, old_logp, advantages, mask, clip_low, clip_high: None)
    assert not {"incomplete", "undeclared", "bad"} & set(ALGOS)


def test_a_registered_function_is_reachable_with_its_own_options():
    @dataclass(frozen=True)
    class ConstantOptions:
        scale: float = 1.0

    def constant(*, logp, old_logp, advantages, mask, clip_low, clip_high, scale=1.0):
        return logp.sum() * scale, {}

    register("test_constant", options=ConstantOptions, metrics={})(constant)
    try:
        logp = torch.tensor([[0.5, -1.0, 0.25], [2.0, 0.0, -0.5]], dtype=F64)  # sums to 1.25
        loss, _ = policy_loss("test_constant", **{**inputs(), "logp": logp}, scale=2.0)
        assert loss.item() == 2.5  # the option reached the function: 1.25 * 2.0, not its default 1.0
        assert policy_loss("test_constant", **{**inputs(), "logp": logp})[0].item() == 1.25
        with pytest.raises(TypeError, match="kl_beta"):
            policy_loss("test_constant", **inputs(), kl_beta=0.1)
    finally:
        del ALGOS["test_constant"]


@pytest.mark.parametrize("name", available())
def test_metric_names_are_the_interface(name):
    _, metrics = policy_loss(name, **inputs())
    assert set(metrics) == METRICS | OWN_METRICS.get(name, set())
    _, metrics = policy_loss(name, **inputs(), ref_logp=torch.zeros((2, 3), dtype=F64))
    assert set(metrics) == METRICS | OWN_METRICS.get(name, set()) | {"policy/kl_ref"}
    assert all(v.dim() == 0 and not v.requires_grad for v in metrics.values())


@pytest.mark.parametrize("name", available())
@pytest.mark.parametrize("change, match", [
    ({"old_logp": torch.zeros((2, 4), dtype=F64)}, "old_logp"),
    ({"mask": torch.ones((3, 3), dtype=F64)}, "mask"),
    ({"advantages": torch.ones(3, dtype=F64)}, "advantages"),
    ({"logp": torch.zeros(6, dtype=F64)}, "logp"),
    ({"clip_low": 1.01}, "clip_low"),  # 1.0 too, except for CISPO (tests/algos/test_algos_family.py)
    ({"clip_high": -0.1}, "clip_high"),
    ({"kl_beta": 0.1}, "ref_logp"),
    ({"kl_beta": -0.1, "ref_logp": torch.zeros((2, 3), dtype=F64)}, "kl_beta"),
])
def test_bad_inputs_raise(name, change, match):
    with pytest.raises(ValueError, match=match):
        policy_loss(name, **{**inputs(), **change})


@pytest.mark.parametrize("name", available())
def test_per_token_advantages_only_for_token_level_objectives(name):
    # A_it = A_i on every token gives the [N] loss and gradient exactly (off-policy, clipped tokens included);
    # GSPO and GMPO weight whole sequences and refuse [N, T] rather than ignore its variation.
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand((3, 4), generator=gen, dtype=F64)
    logp = (old + 0.3 * torch.randn((3, 4), generator=gen, dtype=F64)).requires_grad_(True)
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=F64)
    adv = torch.tensor([1.0, -0.5, 2.0], dtype=F64)
    bounds = {"clip_low": 0.2, "clip_high": 0.27, "max_len": 4}
    per_token = adv[:, None].expand(3, 4).clone()
    if not get(name).token_advantages:
        with pytest.raises(ValueError, match="advantages"):
            policy_loss(name, logp=logp, old_logp=old, advantages=per_token, mask=mask, **bounds)
        assert name in ("gspo", "gmpo", "opsm", "luspo", "vespo")  # OPSM: its mask reads the sequence's one advantage;
        # LUSPO (GSPO's term) and VESPO (a weight per sequence, its (k, lambda) by the sequence's advantage's sign)
        return
    results = []
    for a in (adv, per_token):
        loss, _ = policy_loss(name, logp=logp, old_logp=old, advantages=a, mask=mask, **bounds)
        results.append((loss.detach(), *torch.autograd.grad(loss, logp)))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-12, rtol=0)
    torch.testing.assert_close(results[1][1], results[0][1], atol=1e-12, rtol=0)


def test_dr_grpo_micro_batches_need_an_explicit_max_len():
    # The padded width T differs between micro-batches, so it cannot be the shared normaliser.
    with pytest.raises(ValueError, match="max_len"):
        policy_loss("grpo", **inputs(), aggregation="seq_mean_token_sum_norm", seq_denominator=4)
    policy_loss("grpo", **inputs(), aggregation="seq_mean_token_sum_norm", seq_denominator=4, max_len=3)


def test_algos_imports_nothing_of_gspo_but_the_vocabulary():
    # Layering (DESIGN.md): algos/ -> vocab only. A fresh interpreter shows what it pulls in.
    code = "import sys, gspo.algos; print(sorted(m for m in sys.modules if m.startswith('gspo.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert all(name.startswith(("gspo.algos", "gspo.vocab")) for name in ast.literal_eval(out))

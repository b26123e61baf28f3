"""Issue 62's last members and options as a user meets them (`gspo explain`, the presets, the pre-run checks):
prime-rl's default loss (dppo_ipo), IcePop at the sampler (its card says IcePop's band only for [0.5, 5]), DRO, the
seq_mean_token_sum aggregation and the entropy bonus; every citation in the preset, the card and the module."""

from __future__ import annotations

from pathlib import Path

import pytest

from gspo.conf import compose_config
from gspo.conf.compose import validate_config
from gspo.conf.errors import GspoError
from gspo.trainer.step.advantages import check_algorithm
from gspo.trainer.step.explain import estimator_card
from gspo.trainer.tasks.registry import build_task

ROOT = Path(__file__).resolve().parents[2]


def card(*overrides: str) -> str:
    return estimator_card(compose_config(list(overrides)))


def test_prime_rls_default_loss_preset_card_and_citations():
    cfg = compose_config(["algo=dppo_ipo"])
    assert (cfg.algo.name, cfg.algo.clip_low, cfg.algo.clip_high, cfg.algo.adv_scale) == ("dppo_tv", 0.2, 0.2, "none")
    text = card("algo=dppo_ipo")
    assert "sides      ipo: sign = the mask above" in text and "the loss adds 0.001 sum_t (log pi_it - log q_it)^2" in text
    assert "anchor     q = sampler" in text and "aggregate  token_mean" in text
    # DPPO's own presets keep DPPO's mask and no such term
    assert "sides      sign:" in card("algo=dppo_kl") and "the loss adds 0 sum_t" in card("algo=dppo_tv")
    for where in ("conf/algo/dppo_ipo.yaml", "algos/dppo.py"):
        body = (ROOT / where).read_text()
        assert "prime-rl" in body and "src/prime_rl/" in body and "kl_tau" in body, where


@pytest.mark.parametrize(("band", "named"), [([], True), (["algo.options.band_high=2"], False),
                                              (["algo.options.band_low=0.8"], False)])
def test_icepop_card_names_icepops_band_only_for_it(band, named):
    text = card("algo=icepop", *band)
    assert "r_it = exp(logp_it - sampler_logp_it)" in text and "J_it = M_it min(r_it A_it, clip(r_it, 0.8, 1.27)" in text
    assert ("(IcePop's band)" in text) is named
    assert "IcePop" in (ROOT / "conf/algo/icepop.yaml").read_text() and "2510.18855" in text + (
        ROOT / "algos/icepop.py").read_text()


def test_icepop_refuses_a_correction_on_top():
    cfg = compose_config(["algo=icepop", "algo.old_logp_source=engine", "algo.correction.kind=mis"])
    with pytest.raises(GspoError, match="weigh it twice"):
        check_algorithm(cfg.algo, build_task(cfg.task))


def test_dro_card_and_aggregation_card():
    assert "J_it = A_it log pi_it - 0.1/2 l_it^2" in card("algo=dro") and "verl's dro" in card("algo=dro")
    text = card("algo=grpo", "algo.options.aggregation=seq_mean_token_sum")
    assert "aggregate  seq_mean_token_sum: J = 1/N sum_i J_i, J_i = sum_t J_it" in text and "verl's" in text


def test_entropy_bonus_on_the_card_and_its_range():
    assert "entropy    the loss less 0.01 H, H_it = -sum_v pi_v log pi_v" in card("algo=grpo", "algo.entropy_coef=0.01")
    assert "entropy    " not in card("algo=grpo")
    with pytest.raises(GspoError, match="algo.entropy_coef=-0.1: must be >= 0"):
        validate_config(compose_config(["algo=grpo", "algo.entropy_coef=-0.1"]))

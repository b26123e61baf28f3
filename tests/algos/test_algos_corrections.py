"""Mismatch corrections (TIS / MIS / mask / Geo-RS at token, sequence and geometric level) by hand:
gspo.algos.corrections.

Two sequences, lengths 3 and 2 padded to T = 4; d = old_logp - engine_logp per token:
  seq 0: d = [0.9, -0.1, -0.5]   -> rho = [e^0.9 = 2.4596, e^-0.1 = 0.9048, e^-0.5 = 0.6065]
  seq 1: d = [0.2, -0.9]         -> rho = [e^0.2 = 1.2214, e^-0.9 = 0.4066]
  sequence level (product):    rho_0 = e^0.3 = 1.3499,          rho_1 = e^-0.7 = 0.4966
  geometric level (mean):      rho_0 = e^(0.3/3) = e^0.1 = 1.1052, rho_1 = e^(-0.7/2) = e^-0.35 = 0.7047
"""

from math import exp

import pytest
import torch

from gspo.algos import correction_weights

F64 = torch.float64
D = [[0.9, -0.1, -0.5], [0.2, -0.9]]


def batch():
    mask = torch.zeros((2, 4), dtype=F64)
    engine = torch.full((2, 4), 5.0, dtype=F64)  # padding: garbage
    old = torch.full((2, 4), -60.0, dtype=F64)
    for i, row in enumerate(D):
        for t, d in enumerate(row):
            engine[i, t] = -1.0 - 0.3 * t
            old[i, t] = engine[i, t] + d
            mask[i, t] = 1.0
    return old, engine, mask


def weights(kind, level, **bounds):
    old, engine, mask = batch()
    return correction_weights(old_logp=old, engine_logp=engine, mask=mask, kind=kind, level=level,
                              **{"cap": 2.0, "low": 0.5, "high": 2.0, **bounds})


def test_token_tis_truncates_at_the_cap():
    w, m = weights("tis", "token")
    want = torch.tensor([[2.0, exp(-0.1), exp(-0.5), 1.0], [exp(0.2), exp(-0.9), 1.0, 1.0]], dtype=F64)
    torch.testing.assert_close(w, want, atol=1e-15, rtol=0)  # padding: weight 1 (its terms are masked anyway)
    rhos = [exp(0.9), exp(-0.1), exp(-0.5), exp(0.2), exp(-0.9)]
    assert m["correction/weight_mean"].item() == pytest.approx(sum(rhos) / 5, abs=1e-12)
    assert m["correction/weight_max"].item() == pytest.approx(exp(0.9), abs=1e-12)
    assert m["correction/truncated_frac"].item() == pytest.approx(1 / 5, abs=1e-12)


def test_token_mis_keeps_the_ratio_inside_the_band_as_icepop():
    w, m = weights("mis", "token")
    # [0.5, 2]: e^0.9 above, e^-0.9 = 0.41 below: masked (0); the others keep rho as their weight
    want = torch.tensor([[0.0, exp(-0.1), exp(-0.5), 0.0], [exp(0.2), 0.0, 0.0, 0.0]], dtype=F64)
    _, _, mask = batch()
    torch.testing.assert_close(w * mask, want, atol=1e-15, rtol=0)
    assert m["correction/masked_frac"].item() == pytest.approx(2 / 5, abs=1e-12)
    assert m["correction/applied_mean"].item() == pytest.approx((exp(-0.1) + exp(-0.5) + exp(0.2)) / 5, abs=1e-12)


def test_token_mask_is_the_bare_zero_one_mask():
    w, m = weights("mask", "token")
    want = torch.tensor([[0.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0]], dtype=F64)
    torch.testing.assert_close(w, want, atol=0, rtol=0)
    assert m["correction/masked_frac"].item() == pytest.approx(2 / 5, abs=1e-12)
    assert m["correction/applied_mean"].item() == pytest.approx(3 / 5, abs=1e-12)


def test_sequence_level_is_the_product_of_the_token_ratios():
    w, m = weights("tis", "sequence", cap=1.2)
    # rho_0 = e^0.3 = 1.35 > 1.2 -> 1.2; rho_1 = e^-0.7
    torch.testing.assert_close(w, torch.tensor([1.2, exp(-0.7)], dtype=F64), atol=1e-15, rtol=0)
    assert m["correction/weight_mean"].item() == pytest.approx((3 * exp(0.3) + 2 * exp(-0.7)) / 5, abs=1e-12)
    assert m["correction/truncated_frac"].item() == pytest.approx(3 / 5, abs=1e-12)
    w, m = weights("mis", "sequence", low=0.5, high=2.0)  # rho_1 = 0.497 < 0.5: masked; rho_0 kept as its weight
    torch.testing.assert_close(w, torch.tensor([exp(0.3), 0.0], dtype=F64), atol=1e-15, rtol=0)
    assert m["correction/masked_frac"].item() == pytest.approx(2 / 5, abs=1e-12)


def test_geometric_level_is_the_geometric_mean():
    w, m = weights("tis", "geometric", cap=1.1)
    # rho_0 = e^0.1 = 1.105 > 1.1 -> 1.1; rho_1 = e^-0.35
    torch.testing.assert_close(w, torch.tensor([1.1, exp(-0.35)], dtype=F64), atol=1e-15, rtol=0)
    # per token: seq 0's weight on its 3 tokens, seq 1's on its 2
    assert m["correction/weight_mean"].item() == pytest.approx((3 * exp(0.1) + 2 * exp(-0.35)) / 5, abs=1e-12)
    assert m["correction/truncated_frac"].item() == pytest.approx(3 / 5, abs=1e-12)
    w, m = weights("mis", "geometric", low=0.75)
    torch.testing.assert_close(w, torch.tensor([exp(0.1), 0.0], dtype=F64), atol=1e-15, rtol=0)
    assert m["correction/masked_frac"].item() == pytest.approx(2 / 5, abs=1e-12)


def test_geo_rs_keeps_a_sequence_only_inside_the_geometric_band():
    w, m = weights("geo_rs", "geometric", low=0.7, high=1.2)  # e^0.1 = 1.105 and e^-0.35 = 0.705 both inside
    torch.testing.assert_close(w, torch.ones(2, dtype=F64), atol=0, rtol=0)
    w, m = weights("geo_rs", "geometric", low=0.999, high=1.001)  # verl's decoupled_geo_rs band: both out
    torch.testing.assert_close(w, torch.zeros(2, dtype=F64), atol=0, rtol=0)
    assert m["correction/masked_frac"].item() == 1.0 and m["correction/applied_mean"].item() == 0.0
    with pytest.raises(ValueError, match="geometric"):
        weights("geo_rs", "sequence")


def test_none_is_weight_one_and_bad_settings_raise():
    w, m = weights("none", "sequence")
    assert torch.equal(w, torch.ones(2, dtype=F64)) and m == {}
    with pytest.raises(ValueError, match="unknown correction"):
        weights("tiss", "token")
    with pytest.raises(ValueError, match="band"):
        weights("mis", "token", low=1.5)

"""gspo.algos.diagnostics: every number hand-computed with math on a fixed batch."""

from __future__ import annotations

import math

import pytest
import torch

from gspo.algos import mismatch_metrics, ratio_diagnostics

# Three sequences: lengths 2, 3 and 1 (a padded [3, 3] batch); padding holds junk that must not count.
LOG_RATIO = torch.tensor([[0.1, -0.3, 9.0], [0.2, 0.2, 0.5], [-0.4, 7.0, 7.0]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)


def _pvar(xs):
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)


def _corr(xs, ys):
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return num / math.sqrt(sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys))


def test_token_and_sequence_noise_by_hand():
    out = ratio_diagnostics(log_ratio=LOG_RATIO * MASK, mask=MASK)
    tokens = [0.1, -0.3, 0.2, 0.2, 0.5, -0.4]
    seq = [(0.1 - 0.3) / 2, (0.2 + 0.2 + 0.5) / 3, -0.4]  # -0.1, 0.3, -0.4
    assert out["diag/token_logratio_var"].item() == pytest.approx(_pvar(tokens), abs=1e-12)
    assert out["diag/seq_logratio_var"].item() == pytest.approx(_pvar(seq), abs=1e-12)
    lengths, totals = [2, 3, 1], [0.2, 0.9, 0.4]  # |sum_t l_it|
    assert out["diag/len_corr_token_noise"].item() == pytest.approx(_corr(lengths, totals), abs=1e-12)
    assert out["diag/len_corr_seq_noise"].item() == pytest.approx(_corr(lengths, [0.1, 0.3, 0.4]), abs=1e-12)
    # every length is in the first bucket [1, 17): its entries equal the overall ones
    assert out["diag/token_logratio_var/len_1_17"].item() == pytest.approx(_pvar(tokens), abs=1e-12)
    assert out["diag/seq_logratio_var/len_1_17"].item() == pytest.approx(_pvar(seq), abs=1e-12)


def test_length_buckets_split_sequences():
    # two sequences of 2 tokens, two of 20: each bucket holds only its own sequences' tokens
    mask = torch.zeros(4, 20, dtype=torch.float64)
    mask[:2, :2] = 1.0
    mask[2:, :] = 1.0
    log_ratio = torch.zeros(4, 20, dtype=torch.float64)
    log_ratio[0, :2] = torch.tensor([0.1, 0.3], dtype=torch.float64)
    log_ratio[1, :2] = torch.tensor([-0.1, -0.3], dtype=torch.float64)
    log_ratio[2] = 0.05
    log_ratio[3] = torch.tensor([0.05, -0.05] * 10, dtype=torch.float64)
    out = ratio_diagnostics(log_ratio=log_ratio, mask=mask)
    assert out["diag/token_logratio_var/len_1_17"].item() == pytest.approx(_pvar([0.1, 0.3, -0.1, -0.3]), abs=1e-12)
    assert out["diag/seq_logratio_var/len_1_17"].item() == pytest.approx(_pvar([0.2, -0.2]), abs=1e-12)
    assert out["diag/token_logratio_var/len_17_33"].item() == pytest.approx(_pvar([0.05] * 30 + [-0.05] * 10), abs=1e-12)
    assert out["diag/seq_logratio_var/len_17_33"].item() == pytest.approx(_pvar([0.05, 0.0]), abs=1e-12)
    assert math.isnan(out["diag/token_logratio_var/len_33_65"])  # an empty bucket is NaN, not a made-up 0


def test_a_single_sequence_gives_no_made_up_variance():
    out = ratio_diagnostics(log_ratio=torch.tensor([[0.1, 0.2]]), mask=torch.ones(1, 2))
    assert math.isnan(out["diag/seq_logratio_var"]) and math.isnan(out["diag/len_corr_token_noise"])
    assert out["diag/token_logratio_var"].item() == pytest.approx(0.0025, abs=1e-9)


def test_mismatch_sequence_ratio_and_clip_shares_by_hand():
    engine = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]], dtype=torch.float64)
    trainer = torch.tensor([[-1.1, -1.9, 3.0], [-0.5, -0.5, -0.4]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    out = mismatch_metrics(logp=trainer, engine_logp=engine, mask=mask, clip_low=0.2, clip_high=0.27)
    # token log-ratios trainer - engine: row 0: -0.1, +0.1; row 1: 0, 0, +0.1
    s = [math.exp((-0.1 + 0.1) / 2), math.exp(0.1 / 3)]
    assert out["mismatch/logp_abs_diff"].item() == pytest.approx(0.3 / 5, abs=1e-12)
    assert out["mismatch/seq_ratio_mean"].item() == pytest.approx(sum(s) / 2, abs=1e-12)
    assert out["mismatch/seq_ratio_std"].item() == pytest.approx(math.sqrt(_pvar(s)), abs=1e-12)
    # with GRPO's band [0.8, 1.27] nothing is out; with GSPO's [1 - 3e-4, 1 + 4e-4] most is
    assert out["mismatch/token_out_of_band_frac"].item() == 0.0
    tight = mismatch_metrics(logp=trainer, engine_logp=engine, mask=mask, clip_low=3e-4, clip_high=4e-4)
    assert tight["mismatch/token_out_of_band_frac"].item() == pytest.approx(3 / 5)  # the three +-0.1 tokens
    assert tight["mismatch/seq_out_of_band_frac"].item() == pytest.approx(1 / 2)  # s_0 = 1 exactly, s_1 out


def test_runs_on_the_meta_device_with_no_host_sync():
    out = ratio_diagnostics(log_ratio=torch.zeros(4, 6, device="meta"), mask=torch.ones(4, 6, device="meta"))
    assert all(v.device.type == "meta" for v in out.values())
    out = mismatch_metrics(logp=torch.zeros(4, 6, device="meta"), engine_logp=torch.zeros(4, 6, device="meta"),
                           mask=torch.ones(4, 6, device="meta"), clip_low=0.2, clip_high=0.27)
    assert all(v.device.type == "meta" for v in out.values())

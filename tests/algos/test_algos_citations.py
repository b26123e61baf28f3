"""The citations of CISPO's cap and DPPO's anchor read together (issue 62): the preset (conf/algo), the card
(`gspo explain`), docs/parity-trl.md and README.md say the same numbers and the same sources.

Before issue 62 the CISPO preset capped at 6 (clip_high 5.0, "as SkyRL's example", which moved to a cap of 5 in its
PR #1928) and five places cited verl's `bypass_mode=True` for DPPO's sampler anchor (in verl that mode is PPO-clip).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gspo.conf import compose_config
from gspo.trainer.step.explain import estimator_card

ROOT = Path(__file__).resolve().parents[2]
TRL_RECOMMENDED_CAP = 5.0  # TRL 1.16.0 GRPOConfig: epsilon_high for cispo, "the recommended value is 5.0" (ScaleRL)


def _read(path: str) -> str:
    return (ROOT / path).read_text()


def test_cispo_cap_is_five_in_the_preset_the_card_and_the_docs():
    cfg = compose_config(["algo=cispo"])
    cap = 1.0 + cfg.algo.clip_high
    assert cap == TRL_RECOMMENDED_CAP  # ScaleRL's, SkyRL's since PR #1928, TRL's
    card = estimator_card(cfg)
    assert "the cap is 1 + clip_high = 5\n" in card and "TRL's epsilon_high=5 equals this clip_high=4" in card
    assert "SkyRL's since PR #1928" in card and "verl's example 1.2" in card
    yaml = _read("conf/algo/cispo.yaml")
    assert "clip_high: 4.0" in yaml and "PR #1928 (2026-07-18" in yaml and "as SkyRL's CISPO example" not in yaml
    parity = _read("docs/parity-trl.md")
    assert "| CISPO | `algo=cispo` (the preset, clip_high 4) | `loss_type=\"cispo\", epsilon_high=5` |" in parity
    assert "gspo's preset `clip_high: 5.0`" not in parity and "no current source caps at 6" in parity
    assert "a weight cap of 5" in _read("README.md") and "a weight cap of 6" not in _read("README.md")


@pytest.mark.parametrize("algo", ["dppo_tv", "dppo_kl"])
def test_dppo_anchor_cites_the_authors_code_not_verls_bypass_mode(algo):
    card = estimator_card(compose_config([f"algo={algo}"]))
    places = {"card": card, "yaml": _read(f"conf/algo/{algo}.yaml"), "module": _read("algos/dppo.py"),
              "parity": _read("docs/parity-trl.md"), "readme": _read("README.md")}
    for where, text in places.items():
        assert "Stable-RL" in text, where
        # bypass_mode may be named only to say it is not the anchor's source (PPO-clip in verl)
        for line_no, line in enumerate(text.splitlines()):
            if "bypass_mode" in line or "bypass mode" in line:
                around = " ".join(text.splitlines()[max(0, line_no - 1): line_no + 2])
                assert "PPO-clip" in around, (where, line)
    for where in ("card", "yaml", "parity"):
        assert "verl's" in places[where] and "recompute" in places[where], where  # anchor=trainer named as verl's


def test_cispo_anchor_option_is_in_the_preset_and_the_card():
    cfg = compose_config(["algo=cispo", "algo.options.anchor=sampler"])
    assert "q = sampler: trainer = pi_old (the paper's), sampler = the sampler's own log-probs" in estimator_card(cfg)
    assert compose_config(["algo=cispo"]).algo.options.anchor == "trainer"

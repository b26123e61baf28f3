"""The page says, per arm and before any verdict, when a mask, filter or correction never acted (report/inactive.py):
an OPSM arm whose mask dropped nothing trained as GRPO (here its runs are GRPO's, copied, to the last digit); a
TIS arm that truncated nothing still weighted by rho unless rho was 1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from report_runs import fake_run

from gspo.report.arms import group_arms
from gspo.report.inactive import never_acted
from gspo.report.runs import load_run
from gspo.report.write import write_report


def _variant(src: Path, name: str, algo: dict, extra: dict) -> Path:
    """A copy of run `src` as another arm: its config's algo node updated, `extra` metrics on every step >= 1."""
    dst = src.parent / f"{name}-{src.name}"
    shutil.copytree(src, dst)
    config = yaml.safe_load((dst / "config.yaml").read_text())
    config["algo"].update(algo)
    config["run_id"] = dst.name
    (dst / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [json.loads(line) for line in (dst / "metrics.jsonl").read_text().splitlines()]
    rows = [r | (extra(r["step"]) if r["step"] else {}) for r in rows]
    (dst / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def test_an_opsm_arm_whose_mask_never_acted_is_said_to_be_grpo_before_the_verdict(tmp_path):
    grpo = [fake_run(tmp_path, "grpo", s) for s in range(3)]
    opsm = [_variant(r, "opsm", {"name": "opsm"}, lambda step: {"clip/opsm_masked_frac": 0.0}) for r in grpo]
    report = write_report([*grpo, *opsm], tmp_path / "report", wandb="disabled")
    note = ("OPSM: OPSM's mask dropped no sequence at any step (clip/opsm_masked_frac = 0 at all 36 logged steps of "
            "its 3 run(s)), so it trained as GRPO with the same settings: its runs equal GRPO's to the last digit "
            "(reward/mean at every step); a difference to it is seed noise, not this mechanism's effect.")
    assert note in report.verdict
    # before any verdict on the arm: the note comes ahead of the first line that compares OPSM with GRPO
    first_verdict = next(i for i, line in enumerate(report.verdict) if line != note and "OPSM" in line)
    assert report.verdict.index(note) < first_verdict
    assert note in (tmp_path / "report" / "report.md").read_text()


def test_a_mask_that_acted_once_or_a_weight_that_moved_is_no_baseline(tmp_path):
    grpo = [fake_run(tmp_path, "grpo", s) for s in range(2)]
    acted = [_variant(r, "opsm", {"name": "opsm"}, lambda step: {"clip/opsm_masked_frac": 0.125 * (step == 5)})
             for r in grpo]
    tis = [_variant(r, "tis", {"correction": {"kind": "tis"}},
                    lambda step: {"correction/truncated_frac": 0.0, "correction/applied_mean": 1.0 + 1e-3 * step})
           for r in grpo]
    arms = group_arms([load_run(p) for p in [*grpo, *acted, *tis]])
    lines = never_acted(arms)
    assert not any("OPSM's mask" in line for line in lines)  # it dropped sequences at step 5
    (tis_line,) = lines
    assert "TIS truncated no weight at any step (correction/truncated_frac = 0 at all 24 logged steps" in tis_line
    assert "its weights were rho itself (correction/applied_mean not 1)" in tis_line and "trained as" not in tis_line

"""`gspo compare preset=NAME`: every conf/sweep file is a preset; an unknown one is one line, exit 2,
written nowhere; a preset's swept keys name its runs' tags; a short real `compare preset=...` runs."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from conftest import TINY

from gspo.conf.errors import GspoError
from gspo.study.presets import pick_preset, presets, sweep_params


def test_every_sweep_file_is_a_preset_and_compare_is_the_default():
    assert {"compare", "family", "family2026", "lr", "moe", "mismatch", "stability", "qwen3-0.6b", "qwen3-1.7b",
            "qwen3-0.6b-family"} <= set(presets())
    assert tuple(sweep_params("qwen3-0.6b")) == ("seed", "algo")
    assert tuple(sweep_params("lr")) == ("seed", "train.lr", "algo")
    assert "gspo_token" not in presets()["compare"].split("params:")[1]
    assert pick_preset(["seed=0"]) == ("compare", ["seed=0"])
    assert pick_preset(["preset=moe", "seed=0"]) == ("moe", ["seed=0"])
    assert tuple(sweep_params("moe")) == ("seed", "algo")
    assert tuple(sweep_params("mismatch")) == ("algo", "algo.correction.kind", "seed")
    assert tuple(sweep_params("family")) == ("seed", "algo")
    assert tuple(sweep_params("family2026")) == ("seed", "algo")


@pytest.mark.parametrize("given, hint", [("mo", "did you mean moe?"), ("stabilty", "did you mean stability?"),
                                         ("zzz", "")])
def test_an_unknown_preset_names_the_presets(given, hint):
    with pytest.raises(GspoError) as e:
        pick_preset([f"preset={given}"])
    assert (f"preset='{given}': use one of compare, family, family2026, family2026b, lr, mismatch, moe, qwen3-0.6b, "
            "qwen3-0.6b-family, qwen3-1.7b, stability, staleness") in str(e.value)
    assert hint in str(e.value)
    with pytest.raises(GspoError, match="name one"):
        pick_preset(["preset=moe", "preset=stability"])


def test_unknown_preset_from_the_command_line_is_one_line_and_writes_nothing(gspo, tmp_path):
    result = gspo.subprocess("compare", "preset=moee", cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: preset='moee': use one of compare, family, family2026, family2026b, lr, mismatch, moe, qwen3-0.6b, "
        "qwen3-0.6b-family, qwen3-1.7b, stability, staleness (did you mean moe?)"]
    assert list(tmp_path.iterdir()) == []


def test_compare_runs_a_claim_preset_and_reports_it(gspo, tmp_path):
    """preset=mismatch on TINY, one seed, one step: eight runs (2 algorithms x no correction, TIS, MIS, Geo-RS on engine
    log-probs from a bf16 sampler), tagged with the preset's swept keys, and a report of them."""
    result = gspo.subprocess("compare", "preset=mismatch", *TINY, "seed=0", "train.steps=1", "train.eval_every=0",
                             "logger.progress=false", f"output_dir={tmp_path / 'runs'}", "hydra.sweep.dir=sw",
                             cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    cfgs = [yaml.safe_load((p / "config.yaml").read_text()) for p in sorted((tmp_path / "runs").iterdir())]
    arms = {(c["algo"]["name"], c["algo"]["correction"]["kind"], c["algo"]["old_logp_source"], c["rollout"]["dtype"])
            for c in cfgs}
    assert arms == {(a, k, "engine", "bfloat16") for a in ("grpo", "gspo") for k in ("none", "tis", "mis", "geo_rs")}
    assert all(any(t.startswith("algo.correction.kind=") for t in c["logger"]["tags"]) for c in cfgs)
    report = (tmp_path / "sw" / "report" / "report.md").read_text()
    assert "gspo compare preset=mismatch" in report
    from gspo.study.launch import GIB_PER_JOB, memory_gib

    if (os.cpu_count() or 1) >= 2 and memory_gib() >= 2 * GIB_PER_JOB:  # side by side (study/launch.py jobs_at_once)
        assert "jobs at once" in result.stderr
        pids = {json.loads(p.read_text())["pid"] for p in (tmp_path / "sw" / "runs").glob("*.json")}
        assert len(pids) >= 2, pids

"""The embedded models' cold starts ship with the package (issue 42): the defaults load the shipped weights on
every machine and never build; a spec that differs builds into the cache and says so; a run records which start
it used and the report pools only runs of one start; `gspo coldstart` rebuilds a start and says how far it lands.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import TINY

from gspo.conf import GspoError, compose_config
from gspo.trainer import coldstart
from gspo.trainer.coldstart import SHIPPED, cache_problem, cold_start_path, start_record
from gspo.trainer.policy import tiny_spec


@pytest.mark.parametrize("overrides", [[], ["model=tiny-moe"]], ids=["dense", "moe"])
def test_the_default_starts_are_shipped_sealed_and_match_their_spec(overrides):
    spec = tiny_spec(compose_config(overrides))
    folder = SHIPPED / spec.key()
    assert folder.is_dir(), f"no shipped start for the default spec {spec.key()}: rebuild it with gspo coldstart --out {SHIPPED}"
    assert cache_problem(folder) is None
    info = json.loads((folder / "coldstart.json").read_text())
    # a default changed without a new shipped start would key elsewhere; the spec written beside the weights is it
    assert info["spec"] == spec.fields()
    assert info["dev_sampled_accuracy"] >= spec.tiny.sft_target_accuracy
    assert {"cpu", "torch", "threads"} <= set(info["built_on"])


def test_a_default_run_loads_the_shipped_start_and_never_builds(tmp_path):
    said = []
    spec = tiny_spec(compose_config([]))
    assert cold_start_path(spec, str(tmp_path / "cache"), said.append) == SHIPPED / spec.key()
    assert said == [] and not (tmp_path / "cache").exists()  # no cache made, nothing built, nothing said
    record = start_record(SHIPPED / spec.key())
    weights = hashlib.sha256((SHIPPED / spec.key() / "model.safetensors").read_bytes()).hexdigest()
    assert record["source"] == "shipped" and record["key"] == spec.key() and record["weights_sha256"] == weights


def test_a_damaged_shipped_start_is_one_line_and_not_rebuilt(tmp_path, monkeypatch):
    spec = tiny_spec(compose_config([]))
    shipped = tmp_path / "starts"
    shutil.copytree(SHIPPED / spec.key(), shipped / spec.key())
    with open(shipped / spec.key() / "model.safetensors", "r+b") as f:
        f.seek(4096)
        f.write(b"\0" * 64)
    monkeypatch.setattr(coldstart, "SHIPPED", shipped)
    with pytest.raises(GspoError, match=r"shipped with gspo .* is damaged \(model.safetensors does not match its "
                                        r"checksum\): reinstall gspo"):
        cold_start_path(spec, str(tmp_path / "cache"), log=lambda _m: None)
    assert not (tmp_path / "cache").exists()


def test_a_spec_no_start_is_shipped_for_builds_into_the_cache_and_says_it_depends_on_the_machine(tmp_path):
    said = []
    spec = tiny_spec(compose_config(TINY))
    folder = cold_start_path(spec, str(tmp_path), said.append)
    assert folder.parent == tmp_path / "coldstart"
    first = said[0]
    assert first.startswith("cold start: none shipped or cached for these settings (model.tiny.hidden_size=32, "
                            "shipped 128, ") and first.endswith("a start built here depends on this machine's CPU "
                                                               "(the shipped ones do not)")
    assert start_record(folder)["source"] == "built"


def test_a_run_records_its_start_and_the_report_pools_only_runs_of_one_start(finished_run, tmp_path, gspo):
    from gspo.report.comparable import check_comparable
    from gspo.report.runs import load_run

    start = json.loads((finished_run / "run.json").read_text())["start"]
    assert start["source"] == "built" and len(start["weights_sha256"]) == 64  # TINY is not a shipped spec
    other = tmp_path / "other"
    shutil.copytree(finished_run, other)
    info = json.loads((other / "run.json").read_text())
    info["start"]["weights_sha256"] = "0" * 64  # the same settings, a cold start built on another machine
    (other / "run.json").write_text(json.dumps(info))
    check_comparable([load_run(finished_run), load_run(finished_run)])
    with pytest.raises(GspoError, match=r"runs differ in model.start, which is the model and its cold start"):
        check_comparable([load_run(finished_run), load_run(other)])
    result = gspo.invoke("report", str(finished_run), str(other), "--out", str(tmp_path / "page"))
    assert result.exit_code == 2 and "model.start" in result.stderr


def test_gspo_coldstart_rebuilds_a_shipped_start_and_says_how_far_it_lands(cold_start, tmp_path, monkeypatch, gspo):
    """TINY's start stands in for a shipped one: a rebuild on the machine that built it is the same bytes, and
    reaches the spec's target accuracy."""
    shipped = tmp_path / "starts"
    shutil.copytree(cold_start, shipped / cold_start.name)
    monkeypatch.setattr(coldstart, "SHIPPED", shipped)
    result = gspo.invoke("coldstart", *TINY, "--out", str(tmp_path / "rebuild"))
    assert result.exit_code == 0, result.output
    far = json.loads((tmp_path / "rebuild" / cold_start.name / "compared.json").read_text())
    assert far["same_bytes"] and far["max_abs_weight_diff"] == 0.0
    assert far["steps"][0] == far["steps"][1]
    assert far["sampled_accuracy_same_seed"][0] == far["sampled_accuracy_same_seed"][1]
    assert "weights: the same bytes" in result.stdout


@pytest.mark.slow
def test_a_rebuild_of_the_shipped_dense_start_reaches_its_target_accuracy(tmp_path, gspo):
    """The real spec (about a minute on a 2-core VM): on another CPU the weights may differ; the recipe must
    still reach its target, and the comparison is said either way."""
    result = gspo.invoke("coldstart", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    spec = tiny_spec(compose_config([]))
    far = json.loads((tmp_path / spec.key() / "compared.json").read_text())
    assert far["dev_sampled_accuracy"][1] >= spec.tiny.sft_target_accuracy
    assert far["steps"][1] < spec.tiny.sft_max_steps
    assert result.stdout.count("fine-tune steps, dev sampled accuracy") == 2 and "weights: " in result.stdout


def test_gspo_coldstart_refuses_a_hub_model_in_one_line(gspo):
    result = gspo.invoke("coldstart", "model=qwen3-0.6b")  # main() makes a GspoError one line and exit 2
    assert isinstance(result.exception, GspoError) and "builds the embedded model's start" in str(result.exception)


def test_every_shipped_file_is_package_data():
    """An installed wheel carries what pyproject.toml's package-data globs match: every file of every shipped
    start must match one, or a user's install would build its own start after all."""
    import fnmatch

    import tomllib

    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gspo.trainer.model"]
    files = [str(f.relative_to(SHIPPED.parent)) for f in SHIPPED.rglob("*") if f.is_file()]
    assert any(f.endswith("model.safetensors") for f in files)
    assert [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)] == []

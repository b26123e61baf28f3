"""`gspo fetch` and the offline asset check: offline, a run's missing hub assets are ALL named in one line, with
the command that fetches them, before anything loads; what is cached is found without loading it."""

from __future__ import annotations

import subprocess
import time

import pytest

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.trainer import assets as assets_mod
from gspo.trainer.assets import (
    DATASET,
    MODEL,
    HubAsset,
    check_offline,
    fetch,
    fetch_command,
    hub_assets,
    missing,
)

DEEPSCALER = "agentica-org/DeepScaleR-Preview-Dataset"


@pytest.fixture
def empty_hf(gspo, tmp_path):
    """The tests' offline environment with an empty Hugging Face cache of its own."""
    return dict(gspo.env, HF_HOME=str(tmp_path / "hf"), HF_HUB_CACHE=str(tmp_path / "hf" / "hub"))


def test_offline_train_names_every_missing_asset_in_one_line_at_once(tmp_path, empty_hf):
    """Before: three attempts of 13-18 s, one asset each (dataset, then benchmark, then model). Now one, and it
    writes nothing."""
    start = time.time()
    result = subprocess.run(["gspo", "train", "model=qwen3-0.6b", "task=math", "eval.benches=[aime24]"], cwd=tmp_path,
                            env=empty_hf, capture_output=True, text=True, timeout=120, check=False)
    took = time.time() - start
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: offline (HF_HUB_OFFLINE=1) and not in the Hugging Face cache: task.dataset {DEEPSCALER}, "
        "eval.benches aime24 HuggingFaceH4/aime_2024, model.name Qwen/Qwen3-0.6B; fetch them first, with the "
        "network: gspo fetch model=qwen3-0.6b task=math 'eval.benches=[aime24]'"]
    assert took < 60  # the one line comes before torch or any asset loads (1.8 s on the dev VM at load 6.6)
    assert not (tmp_path / "results").exists()


def test_offline_compare_of_a_real_preset_names_the_assets_of_all_its_jobs(tmp_path, empty_hf):
    result = subprocess.run(["gspo", "compare", "preset=qwen3-1.7b", "seed=0"], cwd=tmp_path, env=empty_hf,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.endswith("; fetch them first, with the network: gspo fetch preset=qwen3-1.7b seed=0")
    for words in (f"task.dataset {DEEPSCALER}", "eval.benches aime24 HuggingFaceH4/aime_2024",
                  "eval.benches math500 HuggingFaceH4/MATH-500", "model.name Qwen/Qwen3-1.7B"):
        assert line.count(words) == 1, words  # once, though two algorithms' jobs read it


def test_fetch_offline_says_it_needs_the_network(tmp_path, empty_hf):
    result = subprocess.run(["gspo", "fetch", "preset=qwen3-0.6b"], cwd=tmp_path, env=empty_hf, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: gspo fetch downloads from the Hugging Face hub, and HF_HUB_OFFLINE is set (or the hub's host "
        "huggingface.co does not resolve): unset it, on a machine with the network; this config needs 4 not cached: "
        f"task.dataset {DEEPSCALER}, eval.benches aime24 HuggingFaceH4/aime_2024, eval.benches math500 "
        "HuggingFaceH4/MATH-500, model.name Qwen/Qwen3-0.6B"]


def test_the_embedded_default_needs_nothing_and_local_files_are_not_hub_assets(tmp_path):
    assert hub_assets(compose_config([])) == []
    data = tmp_path / "m.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n')
    cfg = compose_config(["model=hf", f"model.name={tmp_path}", "task=math", f"task.dataset={data}",
                          "eval.benches=[aime24,arith]", f"+eval.paths.aime24={data}"])
    assert hub_assets(cfg) == []
    cfg = compose_config(["model=qwen3-0.6b", "task=math", "eval.benches=[arith,math500]"])
    assert [(a.kind, a.repo_id, a.role) for a in hub_assets(cfg)] == [
        (DATASET, DEEPSCALER, "task.dataset"), (DATASET, "HuggingFaceH4/MATH-500", "eval.benches math500"),
        (MODEL, "Qwen/Qwen3-0.6B", "model.name")]


def _fake_cache(monkeypatch, root):
    """A Hugging Face cache holding Qwen3-0.6B (config and weights, as snapshot_download leaves them), the
    DeepScaleR dataset in the hub cache and AIME 2024 in `datasets`' Arrow cache."""
    from huggingface_hub import constants

    hub = root / "hub"
    model = hub / "models--Qwen--Qwen3-0.6B"
    (model / "refs").mkdir(parents=True)
    (model / "refs" / "main").write_text("abc123")
    (model / "snapshots" / "abc123").mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (model / "snapshots" / "abc123" / name).write_text("{}")
    (hub / "datasets--agentica-org--DeepScaleR-Preview-Dataset" / "snapshots" / "def456").mkdir(parents=True)
    (root / "datasets" / "HuggingFaceH4___aime_2024" / "default").mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HOME", str(root))
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_what_the_caches_hold_is_found_and_only_the_rest_is_named(monkeypatch, tmp_path):
    _fake_cache(monkeypatch, tmp_path)
    cfg = compose_config(["model=qwen3-0.6b", "task=math", "eval.benches=[aime24,math500]"])
    assert [a.repo_id for a in missing(hub_assets(cfg))] == ["HuggingFaceH4/MATH-500"]
    with pytest.raises(GspoError) as e:
        check_offline(cfg, "gspo fetch X")
    assert str(e.value) == ("offline (HF_HUB_OFFLINE=1) and not in the Hugging Face cache: eval.benches math500 "
                            "HuggingFaceH4/MATH-500; fetch it first, with the network: gspo fetch X")
    check_offline(compose_config(["model=qwen3-0.6b", "task=math", "eval.benches=[aime24]"]), "unused")
    (tmp_path / "hub" / "models--Qwen--Qwen3-0.6B" / "snapshots" / "abc123" / "model.safetensors").unlink()
    assert [a.repo_id for a in missing(hub_assets(cfg))] == ["HuggingFaceH4/MATH-500", "Qwen/Qwen3-0.6B"]  # no weights


def test_online_the_check_is_silent_and_fetch_loads_each_asset_as_the_run_does(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    check_offline(compose_config(["model=qwen3-0.6b", "task=math"]), "unused")  # nothing looked up online
    loaded, lines = [], []
    work = [HubAsset(DATASET, "a/b", "task.dataset", lambda: loaded.append("a/b")),
            HubAsset(MODEL, "c/d", "model.name", lambda: loaded.append("c/d"))]
    fetch(work, lines.append)
    assert loaded == ["a/b", "c/d"]
    assert [ln.rsplit(" (", 1)[0] for ln in lines] == [
        "fetch 1/2: task.dataset a/b ...", "fetch 1/2: task.dataset a/b cached", "fetch 2/2: model.name c/d ...",
        "fetch 2/2: model.name c/d cached"]
    cfg = compose_config(["model=qwen3-0.6b", "task=math", "eval.benches=[aime24]"])
    assert [a.load.__name__ for a in hub_assets(cfg)] == ["<lambda>"] * 3
    assert fetch_command(cfg) == (f"gspo fetch task=math task.dataset={DEEPSCALER} eval.benches=[aime24] model=hf "
                                  "model.name=Qwen/Qwen3-0.6B")
    assert assets_mod.MODEL_FILES[:2] == ["*.json", "*.safetensors"]

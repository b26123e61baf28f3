"""`gspo eval` on a local model path with several benchmarks at once, LiveCodeBench and CodeForces
included, graded for real: the engine's generate is replaced by one that answers the first problem of
each benchmark correctly (AIME's answer, a working program for the LiveCodeBench and CodeForces
problems, run in the sandbox on their tests) and the second one wrongly, so each benchmark must score
exactly 1/2. A wrong route (problems, grader, benchmark order, limit) gives another number."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from gspo.trainer import evaluate

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
FILES = {"aime24": "aime24.jsonl", "livecodebench": "lcb_sample.jsonl", "codeforces": "cf_sample.jsonl"}
needs_data = pytest.mark.skipif(not all((DATA / f).exists() for f in FILES.values()), reason="../shared/data missing")

SUDOKU = """```python
A = [list(map(int, input().split())) for _ in range(9)]
full = list(range(1, 10))
rows = all(sorted(r) == full for r in A)
cols = all(sorted(A[i][j] for i in range(9)) == full for j in range(9))
boxes = all(sorted(A[3 * a + i][3 * b + j] for i in range(3) for j in range(3)) == full
            for a in range(3) for b in range(3))
print("Yes" if rows and cols and boxes else "No")
```"""
MIN_MAX = """```python
for _ in range(int(input())):
    x, y = map(int, input().split())
    print(min(x, y), max(x, y))
```"""
ANSWERS = {"Every morning Aya goes for a $9$-kilometer-long walk": "The answer is \\boxed{204}.",
           "There is a 9\\times 9 grid A": SUDOKU,
           "You are given two integers $x$ and $y$.": MIN_MAX}


def _first_ids() -> dict[str, list[str]]:
    out = {}
    for bench, name in FILES.items():
        rows = [json.loads(line) for line in (DATA / name).read_text().splitlines()[:2]]
        out[bench] = rows
    return out


@needs_data
def test_eval_local_model_on_three_benchmarks_graded_for_real(gspo, finished_run, tmp_path, monkeypatch):
    rows = _first_ids()
    assert "Aya" in rows["aime24"][0]["problem"] and "9\\times 9 grid" in rows["livecodebench"][0]["question_content"]
    assert rows["codeforces"][0]["id"] == "1971A"
    asked: list[str] = []

    def generate(self, prompts, **kw):
        asked.extend(prompts)
        return SimpleNamespace(texts=[next((a for key, a in ANSWERS.items() if key in p), "no idea") for p in prompts])

    monkeypatch.setattr(evaluate.HFEngine, "generate", generate)
    model = finished_run / "checkpoints" / "step_000002"
    out = tmp_path / "evals"
    args = [f"+eval.paths.{b}={DATA / f}" for b, f in FILES.items()]
    result = gspo.invoke("eval", "model=hf", f"model.name={model}", "model.dtype=float32", "model.chat_template=false",
                         "eval.benches=[aime24,livecodebench,codeforces]", *args, "eval.limit=2",
                         f"eval.output={out}", "eval.greedy=true", "logger=local")
    assert result.exit_code == 0, (result.exception, result.output)
    evals = [json.loads(line) for line in (out / "evals.jsonl").read_text().splitlines()]
    scores = {(r["benchmark"], r["metric"]): r["value"] for r in evals}
    for bench in FILES:
        assert scores[(bench, "pass@1")] == 0.5, (bench, scores)
        assert {r["n_problems"] for r in evals if r["benchmark"] == bench} == {2}
    assert {r["model"] for r in evals} == {str(model)} and {r["step"] for r in evals} == {None}
    assert {r["temperature"] for r in evals} == {0.0}
    assert len(asked) == 6 and sum(any(k in p for k in ANSWERS) for p in asked) == 3
    samples = [json.loads(line) for line in (out / "eval_samples.jsonl").read_text().splitlines()]
    verdicts = {s["id"]: s["verdict"] for s in samples}
    assert verdicts["2024-I-1"] == "correct" and verdicts["1971A"] in ("correct", "accepted")
    assert [s["verdict"] in ("correct", "accepted") for s in samples] == [True, False] * 3

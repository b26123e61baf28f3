"""The benchmark registry, shared record reading, scoring with skipped problems, offline hub errors."""

import json

import pytest

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks import (
    BENCHMARK_NAMES,
    Problem,
    Verdict,
    load_benchmark,
    register_benchmark,
    score_verdicts,
)
from gspo.evals.records import read_records


def test_builtin_names():
    assert {"aime24", "aime25", "livecodebench", "codeforces"} <= set(BENCHMARK_NAMES)


def test_unknown_name_lists_known_ones():
    with pytest.raises(GspoError, match=r"unknown benchmark 'aime23'; known: .*aime24.*livecodebench"):
        load_benchmark("aime23")


def test_register_and_load_a_custom_benchmark():
    class Tiny:
        name = "tiny"

        def __init__(self, problems):
            self.problems = problems

        def grade(self, problem, responses, *, workers=1):
            return [Verdict(r == problem.gold, float(r == problem.gold), "correct") for r in responses]

        def score(self, verdicts, k):
            return score_verdicts(verdicts, k)

    def factory(*, path=None, limit=None, size=3):
        return Tiny([Problem(str(i), f"say {i}", str(i), {}) for i in range(size)][:limit])

    from gspo.evals.benchmarks import registry

    register_benchmark("tiny-test", factory)
    try:
        assert "tiny-test" in BENCHMARK_NAMES
        assert len(load_benchmark("tiny-test", size=5, limit=2).problems) == 2
        with pytest.raises(GspoError, match="unknown option for benchmark 'tiny-test': colour; known: size"):
            load_benchmark("tiny-test", colour="red")
    finally:  # the throwaway leaves the registry as it found it (other tests list every benchmark)
        registry.unregister_benchmark("tiny-test")


@pytest.mark.parametrize("name", ["aime24", "aime25", "livecodebench", "codeforces"])
def test_unknown_option_of_a_builtin_is_one_line(name):
    with pytest.raises(GspoError, match=f"unknown option for benchmark '{name}': colour; known: .*hub_id"):
        load_benchmark(name, colour="red")


def test_limit_must_be_positive():
    with pytest.raises(GspoError, match="limit"):
        load_benchmark("aime24", limit=0)


def test_score_excludes_and_counts_skipped_problems():
    ok, bad, skip = (
        Verdict(True, 1.0, "accepted"),
        Verdict(False, 0.0, "wrong_answer"),
        Verdict(False, 0.0, "skipped"),
    )
    metrics = score_verdicts([[ok, bad], [bad, bad], [skip, skip]], k=2)
    # problems 1 and 2 only: avg (1/2 + 0)/2, pass@2 (1 + 0)/2
    assert metrics == pytest.approx(
        {"avg@2": 0.25, "pass@1": 0.25, "pass@2": 0.5, "n_problems": 2.0, "n_skipped": 1.0}
    )


def test_read_records_jsonl_and_json(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n\n{"x": 2}\n')
    assert read_records(tmp_path / "a.jsonl") == [(1, {"x": 1}), (3, {"x": 2})]
    (tmp_path / "b.json").write_text(json.dumps([{"x": 1}, {"x": 2}]))
    assert read_records(tmp_path / "b.json") == [(1, {"x": 1}), (2, {"x": 2})]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"x": 1}\n{"x": \n', r"row 2 is not valid JSON"),
        ('{"x": 1}\n[1, 2]\n', r"row 2 is not a JSON object"),
    ],
)
def test_read_records_malformed_rows_name_the_row(tmp_path, text, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(GspoError, match=message):
        read_records(path)


def test_missing_file_is_one_line_error(tmp_path):
    with pytest.raises(GspoError, match="file not found"):
        load_benchmark("aime24", path=str(tmp_path / "nope.jsonl"))


@pytest.mark.parametrize(
    ("name", "hub_id"), [("aime24", "HuggingFaceH4/aime_2024"), ("aime25", "math-ai/aime25")]
)
def test_hub_id_offline_is_a_gspo_error(monkeypatch, tmp_path, name, hub_id):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache: nothing to fall back on
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")
    with pytest.raises(GspoError, match=f"cannot load '{hub_id}' from the Hugging Face hub") as err:
        load_benchmark(name)
    assert "\n" not in str(err.value)

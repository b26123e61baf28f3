"""LiveCodeBench on the real sample: the loader (modes, test decoding incl. compressed, tags, dates) and
grading end to end (own solutions pass, broken ones fail)."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

from gspo.conf.errors import GspoError
from gspo.evals.benchmarks import load_benchmark
from gspo.evals.benchmarks.livecodebench import SYSTEM_MESSAGE, VERSION_FILES, decode_tests, lcb_problem

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def _sample_path() -> Path:
    path = DATA / "lcb_sample.jsonl"
    if not path.is_file():
        pytest.skip(f"reference data {path} absent")
    return path


def _rows() -> list[dict]:
    return [json.loads(line) for line in _sample_path().read_text().splitlines() if line.strip()]


def _compress(tests: list[dict]) -> str:
    # the official layout: base64(zlib(pickle(JSON string)))
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def test_sample_has_18_stdin_and_12_functional():
    bench = load_benchmark("livecodebench", path=str(_sample_path()))
    assert len(bench.problems) == 30
    functional = [p for p in bench.problems if p.meta["fn_name"]]
    stdin = [p for p in bench.problems if not p.meta["fn_name"]]
    assert len(stdin) == 18 and {p.meta["platform"] for p in stdin} == {"atcoder"}
    assert len(functional) == 12 and {p.meta["platform"] for p in functional} == {"leetcode"}
    for p in bench.problems:
        assert p.gold and all("input" in t and "output" in t for t in p.gold)
        assert p.meta["system"] == SYSTEM_MESSAGE
        assert p.prompt.startswith("### Question:\n") and p.prompt.endswith(
            "### Answer: (use the provided format with backticks)\n\n"
        )
    f = functional[0]
    assert f"```python\n{f.meta['starter_code']}\n```" in f.prompt
    assert "Read the inputs from stdin" in stdin[0].prompt and "# YOUR CODE HERE" in stdin[0].prompt


def test_json_string_fields_as_on_the_hub():
    rec = next(r for r in _rows() if r["platform"] == "leetcode")
    hub = {
        **rec,
        "public_test_cases": json.dumps(rec["public_test_cases"]),
        "metadata": json.dumps(rec["metadata"]),
    }
    hub["private_test_cases"] = json.dumps([{"input": "[5]\n1", "output": "1", "testtype": "functional"}])
    p = lcb_problem(hub, 1, "hub")
    assert p.meta["fn_name"] == rec["metadata"]["func_name"]
    assert p.gold == rec["public_test_cases"] + [{"input": "[5]\n1", "output": "1", "testtype": "functional"}]
    assert p.meta["n_public_tests"] == len(rec["public_test_cases"])


def test_compressed_private_tests_are_decoded():
    private = [{"input": "3\n", "output": "6\n", "testtype": "stdin"}] * 3
    assert decode_tests(_compress(private), "here", "private_test_cases") == private
    rec = {**_rows()[0], "private_test_cases": _compress(private)}
    p = lcb_problem(rec, 1, "src")
    assert p.gold[-3:] == private and len(p.gold) == p.meta["n_public_tests"] + 3


def test_compressed_field_that_pickles_an_object_is_refused():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    evil = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(GspoError, match="row 7: private_test_cases is neither JSON nor base64"):
        decode_tests(evil, "src: row 7", "private_test_cases")


def test_date_window_is_inclusive_on_the_day():
    path = str(_sample_path())
    bench = load_benchmark("livecodebench", path=path, start_date="2024-08-01", end_date="2025-03-15")
    dates = sorted(p.meta["contest_date"] for p in bench.problems)
    expected = sorted(
        r["contest_date"][:10] for r in _rows() if "2024-08-01" <= r["contest_date"][:10] <= "2025-03-15"
    )
    assert dates == expected and len(dates) == 9 and dates[-1] == "2025-03-15"
    leet = load_benchmark("livecodebench", path=path, start_date="2024-08-01", platform="leetcode")
    assert {p.meta["platform"] for p in leet.problems} == {"leetcode"} and len(leet.problems) == 2


def test_bad_date_and_empty_window():
    with pytest.raises(GspoError, match="start_date must be YYYY-MM-DD"):
        load_benchmark("livecodebench", path=str(_sample_path()), start_date="March 2024")
    with pytest.raises(GspoError, match="no problems match"):
        load_benchmark("livecodebench", path=str(_sample_path()), start_date="2030-01-01")


def test_version_tags_select_release_files(tmp_path):
    rows = _rows()
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:20]))
    (tmp_path / "test2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[20:]))
    assert VERSION_FILES["release_v2"] == ["test.jsonl", "test2.jsonl"]
    assert VERSION_FILES["v2"] == ["test2.jsonl"]
    assert len(load_benchmark("livecodebench", path=str(tmp_path), version_tag="release_v1").problems) == 20
    assert len(load_benchmark("livecodebench", path=str(tmp_path), version_tag="release_v2").problems) == 30
    assert len(load_benchmark("livecodebench", path=str(tmp_path), version_tag="v2").problems) == 10
    with pytest.raises(GspoError, match="test3.jsonl missing for version_tag release_v3"):
        load_benchmark("livecodebench", path=str(tmp_path), version_tag="release_v3")
    with pytest.raises(GspoError, match="unknown LiveCodeBench version_tag 'release_v9'"):
        load_benchmark("livecodebench", path=str(tmp_path), version_tag="release_v9")
    with pytest.raises(GspoError, match="is one file"):
        load_benchmark("livecodebench", path=str(tmp_path / "test.jsonl"), version_tag="release_v1")
    (tmp_path / "test2.jsonl").write_text(
        json.dumps(rows[20]) + "\n" + json.dumps({"question_content": "q"}) + "\n"
    )
    with pytest.raises(GspoError, match=r"test2\.jsonl: row 2 has no public_test_cases"):
        load_benchmark("livecodebench", path=str(tmp_path), version_tag="release_v2")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"question_content": ""}, "row 2 has no question_content"),
        ({"public_test_cases": '[{"input": "1"}]'}, "row 2: public_test_cases test 1 lacks input or output"),
        ({"private_test_cases": "not json, not compressed"}, "row 2: private_test_cases is neither JSON"),
        ({"metadata": {}}, "row 2 is a functional problem but metadata has no func_name"),
        ({"contest_date": "yesterday"}, "row 2: contest_date 'yesterday' is not an ISO date"),
    ],
)
def test_malformed_row_named_by_number(tmp_path, change, message):
    good = next(r for r in _rows() if r["platform"] == "leetcode")
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, **change}) + "\n")
    with pytest.raises(GspoError, match=message):
        load_benchmark("livecodebench", path=str(path))


def test_hub_offline_is_a_gspo_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")
    with pytest.raises(
        GspoError, match="cannot load 'livecodebench/code_generation_lite' from the Hugging Face"
    ):
        load_benchmark("livecodebench", version_tag="release_v5")


@pytest.fixture(scope="module")
def bench():
    path = DATA / "lcb_sample.jsonl"
    if not path.is_file():
        pytest.skip(f"reference data {path} absent")
    return load_benchmark("livecodebench", path=str(path), timeout_s=2.0, memory_mb=512)


def _problem(bench, qid):
    return next(p for p in bench.problems if p.id == qid)


def _fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\nIt runs in O(log n)."


def test_stdin_problem(bench):
    ctz = _problem(bench, "abc336_b")  # trailing zeros of N in binary
    responses = [
        _fenced("n = int(input())\nprint((n & -n).bit_length() - 1)"),
        _fenced("n = int(input())\nprint(bin(n).count('0'))"),  # counts the "0b" prefix's 0 too
        _fenced("n = int(input())\nprint(1 // (n - n))"),
        "I would count the trailing zeros.",  # no code block
    ]
    verdicts = bench.grade(ctz, responses, workers=2)
    assert [v.verdict for v in verdicts] == ["accepted", "wrong_answer", "runtime_error", "wrong_answer"]
    assert [v.reward for v in verdicts] == [1.0, 0.0, 0.0, 0.0]
    assert verdicts[0].detail["passed"] and verdicts[0].detail["n_tests"] == len(ctz.gold)
    assert verdicts[3].detail["message"] == "no code to run" and verdicts[3].detail["tests"] == []


def test_functional_problem(bench):
    words = _problem(bench, "3194")  # findWordsContaining(words, x)
    assert words.meta["fn_name"] == "findWordsContaining"
    good = (
        "class Solution:\n"
        "    def findWordsContaining(self, words: List[str], x: str) -> List[int]:\n"
        "        return [i for i, w in enumerate(words) if x in w]"
    )
    off_by_one = good.replace("[i for", "[i + 1 for")
    verdicts = bench.grade(words, [_fenced(good), _fenced(off_by_one)])
    assert [v.verdict for v in verdicts] == ["accepted", "wrong_answer"]
    metrics = bench.score([verdicts], k=2)
    assert metrics == pytest.approx(
        {"avg@2": 0.5, "pass@1": 0.5, "pass@2": 1.0, "n_problems": 1, "n_skipped": 0}
    )

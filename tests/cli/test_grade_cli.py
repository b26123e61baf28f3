"""`gspo grade arith|math|code` end to end through Typer's CliRunner on small files in tmp_path."""

import json

import pytest
from typer.testing import CliRunner

from gspo.cli.grade import grade_app
from tests.conftest import LEARNING_SEED

runner = CliRunner()


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_math_writes_graded_file_and_summary(tmp_path):
    src = _write(
        tmp_path / "gen.jsonl",
        [
            {"id": "a", "response": "so \\boxed{204}", "gold": "204"},
            {"id": "b", "response": "The answer is 0.5.", "answer": "\\frac{1}{2}"},
            {"id": "c", "response": "no idea", "gold": "113"},
            {"id": "d", "response": "\\boxed{72}", "gold": 73},
        ],
    )
    result = runner.invoke(grade_app, ["math", str(src)])
    assert result.exit_code == 0, result.output
    assert "graded 4 rows" in result.output
    assert "math: accuracy 0.5000 (2/4)" in result.output
    assert "verdicts: correct=2 wrong_answer=2" in result.output
    graded = [json.loads(line) for line in (tmp_path / "gen.graded.jsonl").read_text().splitlines()]
    assert [(g["id"], g["correct"], g["reward"], g["verdict"]) for g in graded] == [
        ("a", True, 1.0, "correct"),
        ("b", True, 1.0, "correct"),
        ("c", False, 0.0, "wrong_answer"),
        ("d", False, 0.0, "wrong_answer"),
    ]
    assert graded[0]["response"] == "so \\boxed{204}"  # input fields are kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen.graded.jsonl", "gen.jsonl"]  # no temp left


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"response": "x", "gold": "1"}, {"response": "y"}], "row 2 has no gold (or answer)"),
        ([{"response": "x", "gold": "1"}, {"gold": "1"}], "row 2 has no response"),
        ([{"response": "x", "gold": "1"}, '{"response": '], "row 2 is not valid JSON"),
    ],
)
def test_math_malformed_row_is_one_line_with_row_number(tmp_path, rows, message):
    src = _write(tmp_path / "bad.jsonl", rows)
    result = runner.invoke(grade_app, ["math", str(src)])
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "bad.graded.jsonl").exists()


@pytest.mark.parametrize("command", ["math", "code"])
def test_missing_file(tmp_path, command):
    result = runner.invoke(grade_app, [command, str(tmp_path / "nope.jsonl")])
    assert result.exit_code == 2
    assert result.stderr == f"error: file not found: {tmp_path / 'nope.jsonl'}\n"


def test_empty_file(tmp_path):
    src = _write(tmp_path / "empty.jsonl", [])
    result = runner.invoke(grade_app, ["math", str(src)])
    assert result.exit_code == 2 and "no rows to grade" in result.stderr


def _compressed(tests):
    import base64
    import pickle
    import zlib

    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def test_code_stdin_and_functional_rows(tmp_path):
    double = [{"input": "3\n", "output": "6\n", "testtype": "stdin"}]
    add = [{"input": "1\n2", "output": "3", "testtype": "functional"}]
    src = _write(
        tmp_path / "code.jsonl",
        [
            {"id": "plain-code", "code": "print(int(input()) * 2)", "tests": double},
            {"id": "wrong", "code": "print(int(input()) * 3)", "tests": json.dumps(double)},
            {
                "id": "lcb-layout",
                "response": "```python\nclass Solution:\n    def add(self, a, b):\n        return a + b\n```",
                "public_test_cases": json.dumps(add),
                "private_test_cases": _compressed(
                    [{"input": "5\n-5", "output": "0", "testtype": "functional"}]
                ),
                "metadata": json.dumps({"func_name": "add"}),
            },
            {"id": "no-code", "response": "I am not sure.", "tests": double},
            {"id": "fn", "code": "def add(a, b):\n    return a - b", "tests": add, "fn_name": "add"},
        ],
    )
    result = runner.invoke(
        grade_app, ["code", str(src), "--timeout", "2", "--memory-mb", "512", "--workers", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "code: pass rate 0.4000 (2/5)" in result.output
    assert "verdicts: wrong_answer=3 accepted=2" in result.output
    graded = [json.loads(line) for line in (tmp_path / "code.graded.jsonl").read_text().splitlines()]
    assert [(g["id"], g["verdict"], g["correct"]) for g in graded] == [
        ("plain-code", "accepted", True),
        ("wrong", "wrong_answer", False),
        ("lcb-layout", "accepted", True),
        ("no-code", "wrong_answer", False),
        ("fn", "wrong_answer", False),
    ]
    assert graded[2]["detail"]["n_tests"] == 2  # public + decoded private


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"tests": [{"input": "", "output": ""}]}, "row 2 has neither code nor response"),
        ({"code": "print(1)"}, "row 2 has no tests"),
        ({"code": "print(1)", "tests": [{"input": "1"}]}, "row 2: tests test 1 lacks input or output"),
        ({"code": "print(1)", "public_test_cases": "[oops"}, "row 2: public_test_cases is neither JSON"),
    ],
)
def test_code_malformed_row_is_one_line_with_row_number(tmp_path, row, message):
    src = _write(tmp_path / "bad.jsonl", [{"code": "print(1)", "tests": [{"input": "", "output": "1"}]}, row])
    result = runner.invoke(grade_app, ["code", str(src)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_every_benchmark_registers_a_grader_gspo_grade_has():
    """The grader of a benchmark's rows is the one it registered with (one place), and one `gspo grade` runs."""
    from gspo.evals.benchmarks import BENCHMARK_NAMES
    from gspo.evals.benchmarks.registry import benchmark_grader
    from gspo.evals.regrade import GRADERS

    graders = {name: benchmark_grader(name) for name in BENCHMARK_NAMES}
    assert graders["aime24"] == "math" and graders["codeforces"] is None  # CodeForces: its checker is not in the row
    assert {g for g in graders.values() if g is not None} <= set(GRADERS)


def test_rows_are_graded_by_their_own_benchmark_not_the_command(tmp_path):
    """eval_samples.jsonl of arithmetic and AIME rows under `gspo grade math`: math-verify cannot read the
    arithmetic task's `#42` answers (it used to say 0/2 here); each row goes to its own grader and each
    benchmark gets its own figure."""
    src = _write(tmp_path / "eval_samples.jsonl", [
        {"benchmark": "arith", "response": "2+4+0=06|4+3+0=07|#76", "gold": "76", "correct": True},
        {"benchmark": "arith", "response": "1*7+0=07|#7", "gold": "8", "correct": False},
        {"benchmark": "arith", "response": "#13", "gold": "13", "correct": True},
        {"benchmark": "aime24", "response": "so \\boxed{204}", "gold": "204", "correct": True},
    ])
    result = runner.invoke(grade_app, ["math", str(src)])
    assert result.exit_code == 0, result.output
    assert "arith: accuracy 0.6667 (2/3)" in result.output
    assert "aime24: accuracy 1.0000 (1/1)" in result.output
    assert "warning" not in result.output
    graded = [json.loads(line) for line in (tmp_path / "eval_samples.graded.jsonl").read_text().splitlines()]
    assert [(g["grader"], g["correct"]) for g in graded] == [
        ("arith", True), ("arith", False), ("arith", True), ("math", True)]


def test_mixed_file_warns_with_the_count_of_disagreements(tmp_path):
    """Stored verdicts that the regrade contradicts (rows 2 and 3) are counted on stderr, one line."""
    src = _write(tmp_path / "mixed.jsonl", [
        {"benchmark": "arith", "response": "#76", "gold": "76", "correct": True},
        {"benchmark": "arith", "response": "#76", "gold": "77", "correct": True},
        {"benchmark": "aime24", "response": "\\boxed{5}", "gold": "5", "correct": False},
        {"benchmark": "aime24", "response": "\\boxed{6}", "gold": "5", "correct": False},
        {"benchmark": "aime24", "response": "\\boxed{6}", "gold": "5"},  # no stored verdict: not compared
    ])
    result = runner.invoke(grade_app, ["math", str(src)])
    assert result.exit_code == 0, result.output
    assert result.stderr == "warning: 2 of 4 regraded rows disagree with their stored verdict (rows 2, 3)\n"


def test_old_samples_file_is_graded_by_its_runs_task(tmp_path):
    """A samples.jsonl written before rows named their grader: the run's config.yaml alongside says
    task.kind=arith; its reward is the stored verdict."""
    (tmp_path / "config.yaml").write_text("task:\n  kind: arith\n  name: arith\n")
    src = _write(tmp_path / "samples.jsonl", [
        {"step": 1, "prompt": "Compute 3+4.", "completion": "3+4+0=07|#7", "gold": "7", "reward": 1.0},
        {"step": 1, "prompt": "Compute 3+4.", "completion": "#8", "gold": "7", "reward": 0.0},
    ])
    result = runner.invoke(grade_app, ["math", str(src)])
    assert result.exit_code == 0, result.output
    assert "task arith: accuracy 0.5000 (1/2)" in result.output and "warning" not in result.output


def test_rows_that_cannot_be_regraded_from_the_file_are_counted_not_failed(tmp_path):
    """CodeForces rows (their checker and limits are not in the file) and a code task's training samples
    (gold: the problem id) are left ungraded with a warning naming why."""
    src = _write(tmp_path / "samples.jsonl", [
        {"benchmark": "codeforces", "response": "print(1)", "gold": [{"input": "", "output": "1"}]},
        {"completion": "print(1)", "gold": "cf-1A", "reward": 1.0, "grader": "code"},
        {"benchmark": "arith", "response": "#3", "gold": "3", "correct": True},
    ])
    result = runner.invoke(grade_app, ["math", str(src)])
    assert result.exit_code == 0, result.output
    assert "graded 1 rows" in result.output
    assert "warning: 1 rows not graded: codeforces rows" in result.stderr
    assert "warning: 1 rows not graded: code-task training samples" in result.stderr
    graded = [json.loads(line) for line in (tmp_path / "samples.graded.jsonl").read_text().splitlines()]
    assert [g["verdict"] for g in graded] == ["skipped", "skipped", "correct"]


@pytest.mark.slow
def test_regrade_of_a_runs_own_files_equals_its_verdicts(gspo, tmp_path):
    """A TINY run with the arith benchmark: `gspo grade math` (the README's command) on its samples.jsonl
    and eval_samples.jsonl gives back, row by row, the verdicts the run recorded, and warns of nothing."""
    run = gspo.train(tmp_path, "graded", f"seed={LEARNING_SEED}", "train.steps=2", "eval.benches=[arith]",
                     "logger.samples_per_step=8")
    right = 0
    for name in ("samples.jsonl", "eval_samples.jsonl"):
        stored = [json.loads(line) for line in (run / name).read_text().splitlines()]
        result = runner.invoke(grade_app, ["math", str(run / name)])
        assert result.exit_code == 0, result.output
        assert result.stderr == ""
        graded = [json.loads(line) for line in (run / name.replace(".jsonl", ".graded.jsonl")).read_text().splitlines()]
        recorded = [r.get("correct", r.get("reward") == 1.0) for r in stored]
        assert [g["correct"] for g in graded] == recorded
        assert {g["grader"] for g in graded} == {"arith"}
        assert f"({sum(recorded)}/{len(recorded)})" in result.output
        right += sum(recorded)
    assert right > 0  # a right answer among the wrong ones (samples.jsonl, step 1), so agreement can fail

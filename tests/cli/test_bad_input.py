"""Bad input to `gspo train`: one line on stderr starting with `error:`, a non-zero exit, no traceback, and
the results/ folder it runs next to left exactly as it was (no file changed, no half-made run dir).

Each command runs in its own copy of a project folder whose results/runs/ holds a finished run, through the
console script's entry point, one after another in one interpreter (conftest's Gspo.batch: its start and
torch's import paid once, not per command); the read-only folder and `gspo explain` cases below run the
installed console script itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from conftest import TINY

from gspo.algos.registry import available


def _math_rows(tmp: Path) -> Path:
    path = tmp / "no_answer.jsonl"
    rows = [{"problem": "1+1?", "answer": "2"}, {"problem": "2+2?", "solution": "4"}, {"problem": "3+3?", "answer": "6"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "latin1.jsonl").write_bytes('{"problem": "caf\u00e9 + 1?", "answer": "2"}\n'.encode("latin-1"))
    (tmp / "a_file").write_text("")
    return path


def _code_rows(tmp: Path) -> Path:
    """LiveCodeBench rows; the second has no test cases."""
    path = tmp / "no_tests.jsonl"
    tests = json.dumps([{"input": "1\n", "output": "1\n", "testtype": "stdin"}])
    rows = [{"question_id": f"q{i}", "question_content": "Echo.", "public_test_cases": "[]" if i == 2 else tests}
            for i in range(1, 4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    good = [rows[0], rows[2]]  # each with a test
    (tmp / "dup_id.jsonl").write_text("".join(json.dumps(r | {"question_id": "q1"}) + "\n" for r in good))
    (tmp / "starter_number.jsonl").write_text(json.dumps(rows[0] | {"starter_code": 123}) + "\n")
    return path


# (id, overrides, words the error line must contain, gets past config composition)
# every algorithm preset shipped, as Hydra lists them (a new algorithm edits no test)
ALGO_PRESETS = ", ".join(sorted(p.name.removesuffix(".yaml") for p in resources.files("gspo.conf").joinpath("algo").iterdir()
                                if p.name.endswith(".yaml")))
CASES = [
    ("unknown-option", ["algo=foo"], ["algo/foo", ALGO_PRESETS], False),
    ("algo-preset-typo", ["algo=cipso"], ["algo/cipso", ALGO_PRESETS, "did you mean cispo?"], False),
    ("no-lower-bound-outside-cispo", ["algo=grpo", "algo.clip_low=1.0"], ["algo.clip_low=1.0", "cispo"], True),
    ("unknown-group", ["optimizer=adam"], ["optimizer"], False),
    ("algo-name-typo", ["algo.name=gpso"], ["algo.name='gpso'", ", ".join(sorted(available())), "did you mean gspo?"], False),
    ("aggregation-typo", ["algo=grpo", "algo.options.aggregation=tokn_mean"],
     ["algo.options.aggregation='tokn_mean'", "seq_mean_token_sum_norm", "did you mean token_mean?"], False),
    ("engine-typo", ["rollout.engine=vlm"], ["rollout.engine='vlm'", "hf, vllm", "did you mean vllm?"], False),
    ("estimator-typo", ["algo.advantage=stepp"], ["algo.advantage='stepp'", "group, step", "did you mean step?"], False),
    ("precision-typo", ["train.precision=bf61"], ["train.precision='bf61'", "did you mean bf16?"], False),
    ("dtype-unknown", ["model.dtype=int8"], ["model.dtype='int8'", "float32, bfloat16, float16"], False),
    ("unknown-key", ["train.stepz=1"], ["train.stepz"], False),
    ("wrong-type", ["train.steps=abc"], ["train.steps", "abc"], False),
    ("group-of-one", ["train.group_size=1"], ["train.group_size=1", "at least 2"], False),
    ("minibatches-do-not-divide", ["train.minibatches=3"], ["train.minibatches=3", "does not divide", "8"], False),
    ("missing-model-path", ["model=hf", "model.name=/nonexistent/path"], ["/nonexistent/path"], True),
    ("missing-dataset", ["task=math", "task.dataset=/nonexistent.jsonl"], ["/nonexistent.jsonl", "not found"], True),
    ("row-without-answer", ["task=math", "task.dataset={rows}"], ["row 2", "'answer'"], True),
    ("existing-run-id", ["run_id=done"], ["already exists", "resume=true"], True),
    ("resume-missing-run", ["resume=true", "run_id=nope"], ["resume=true", "nope"], True),
    ("lr-nan", ["train.lr=nan"], ["train.lr=nan", "finite"], False),
    ("lr-inf", ["train.lr=inf"], ["train.lr=inf", "finite"], False),
    ("rollout-batch-zero", ["rollout.batch_size=0"], ["rollout.batch_size=0", ">= 1"], False),
    ("negative-kl", ["algo.kl_beta=-5"], ["algo.kl_beta=-5", ">= 0"], False),
    ("run-id-path", ["run_id=../x"], ["run_id='../x'", "plain name"], False),
    ("output-dir-under-a-file", ["output_dir={tmp}/a_file/runs"], ["a_file", "not a folder"], False),
    ("output-dir-cannot-be-made", ["output_dir=/proc/gspo-runs"], ["/proc/gspo-runs", "cannot create"], True),
    ("latin1-task-file", ["task=math", "task.dataset={tmp}/latin1.jsonl"], ["latin1.jsonl", "not UTF-8"], True),
    ("resume-changes-the-run", ["resume=results/runs/done", "train.steps=2", "train.lr=1"],  # its own steps: a resume never shrinks
     ["train.lr", "keeps its own config"], False),
    ("sampler-name", ["rollout.sampler=fast"], ["rollout.sampler='fast'", "lean, generate"], False),
    ("old-logp-source", ["algo.old_logp_source=cache"], ["algo.old_logp_source='cache'", "auto, recompute, engine"],
     False),
    ("precision-name", ["train.precision=fp8"], ["train.precision='fp8'", "auto, fp32, bf16, fp16"], False),
    ("fp32-on-bf16-weights", ["model.dtype=bfloat16", "train.precision=fp32"], ["train.precision=fp32", "bfloat16"],
     True),
    ("vllm-missing", ["rollout=vllm"], ["rollout=vllm", "not installed", "pip install"], True),
    ("code-without-tests", ["task=code", "task.dataset={code}", "task.eval_size=1"], ["problem q2 has no tests"], True),
    # issue 37: before, a traceback (str.format's KeyError / IndexError, and a number where starter_code is text),
    # and a repeated question_id silently dropped a problem in training while `gspo eval` kept both
    ("prompt-template-field", ["task=math", "task.dataset={rows}", "task.prompt_template='{{problem}}?'"],
     ["task.prompt_template='{problem}?' names {problem}", "write a literal brace as {{ or }}"], True),
    ("prompt-template-bare", ["task=math", "task.dataset={rows}", "task.prompt_template='Q: {{}}'"],
     ["task.prompt_template='Q: {}' has a bare {}"], True),
    ("code-duplicate-id", ["task=code", "task.dataset={tmp}/dup_id.jsonl", "task.eval_size=1"],
     ["problem id 'q1' appears twice"], True),
    ("lcb-starter-code-number", ["task=code", "task.dataset={tmp}/starter_number.jsonl", "task.eval_size=1"],
     ["row 1: starter_code is 123, not text"], True),
]


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root`: file bytes, or None for a directory."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _run_cases(gspo, finished_run: Path, base: Path, runtime: bool) -> dict[str, dict]:
    rows, code = _math_rows(base), _code_rows(base)
    jobs = {}
    for case_id, overrides, _, late in CASES:
        if late != runtime:
            continue
        project = base / case_id
        shutil.copytree(finished_run, project / "results" / "runs" / "done")
        args = ["train", "-q", *TINY, "train.steps=1", *(o.format(rows=rows, code=code, tmp=base) for o in overrides)]
        jobs[case_id] = (project, args, _snapshot(project))

    procs = gspo.batch([(args, project) for project, args, _ in jobs.values()])
    return {case_id: {"proc": proc, "before": before, "after": _snapshot(project)}
            for (case_id, (project, _, before)), proc in zip(jobs.items(), procs, strict=True)}


@pytest.fixture(scope="module")
def config_outcomes(gspo, finished_run, tmp_path_factory):
    return _run_cases(gspo, finished_run, tmp_path_factory.mktemp("bad_config"), runtime=False)


@pytest.fixture(scope="module")
def runtime_outcomes(gspo, finished_run, tmp_path_factory):
    return _run_cases(gspo, finished_run, tmp_path_factory.mktemp("bad_runtime"), runtime=True)


@pytest.mark.parametrize(
    ("case_id", "words", "runtime"),
    [pytest.param(c, w, late, id=c) for c, _, w, late in CASES],
)
def test_bad_input_is_one_error_line_and_leaves_results_alone(request, case_id, words, runtime):
    outcome = request.getfixturevalue("runtime_outcomes" if runtime else "config_outcomes")[case_id]
    proc = outcome["proc"]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "run finished" not in proc.stdout
    assert outcome["after"] == outcome["before"], "the command changed the project's results/ folder"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root to make a read-only mount")
def test_a_read_only_output_dir_is_one_error_line(gspo, tmp_path):
    """A really read-only folder (a read-only bind mount in a private mount namespace: root ignores
    permission bits) as output_dir: one line at compose time, nothing written."""
    folder = tmp_path / "ro"
    folder.mkdir()
    script = 'mount --bind -o ro "$0" "$0" && exec gspo train -q train.steps=1 output_dir="$0/runs"'
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(folder)],
                          env=gspo.env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"error: output_dir={folder}/runs: {folder} is not writable; " \
                                  f"set output_dir= to a writable folder"
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("command", [["train", "algo=foo"], ["explain", "algo=gpso"], ["eval", "eval.k=0"],
                                     ["compare", "preset=nosuch"], ["report", "--effect", "-1"]])
def test_a_config_error_is_said_before_torch_loads(gspo_env, command):
    """A typo is answered in about a second: the command line is checked before torch, transformers and pandas
    are imported (6-10 s on a small CPU), so the one line does not wait for them."""
    probe = ("import sys\nfrom gspo.cli.entry import main\nsys.argv = ['gspo', *sys.argv[1:]]\n"
             "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
             "print(code, sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", probe, *command], env=gspo_env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.stdout.split()[-2:] == ["2", "[]"], (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr

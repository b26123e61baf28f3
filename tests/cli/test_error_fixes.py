"""Errors that say the fix: each newcomer's mistake through the console script's entry point (`main`, what
the installed `gspo` calls; in-process, as a fresh interpreter per case costs ~5 s of imports) gives exit 2
and one `error:` line holding the fix; one case also through the installed script itself."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gspo.cli.main import main
from gspo.conf.keys import bare_lists

# (mistake, the arguments after `gspo`, words of the one error line)
MISTAKES = [
    ("misspelt key", ["train", "train.step=5"], ["train.step", "did you mean train.steps?"]),
    ("misspelt nested key", ["train", "rollout.temprature=0.7"], ["did you mean rollout.temperature?"]),
    ("misspelt new key", ["train", "+train.stepz=5"], ["train.stepz", "did you mean train.steps?"]),
    ("new key without +", ["train", "eval.paths.aime24=my.jsonl"], ["leading +", "+eval.paths.aime24=my.jsonl"]),
    ("comma list in a single run", ["train", "algo=grpo,gspo"],
     ["one run takes one value", "gspo sweep algo=grpo,gspo", "gspo train -m algo=grpo,gspo"]),
    ("comma list in gspo eval", ["eval", "eval.k=1,2"], ["gspo eval -m eval.k=1,2"]),
    ("flag and value", ["train", "--steps", "5"], ["--steps 5", "not flags", "train.steps=5"]),
    ("flag=value", ["train", "--lr=1e-4"], ["train.lr=1e-4"]),
    ("flag of two keys", ["train", "--max-new-tokens", "64"], ["rollout.max_new_tokens=64 or eval.max_new_tokens=64"]),
    ("range", ["train", "train.lr=-1"], ["train.lr=-1.0: must be > 0"]),
    ("range of another key", ["train", "train.epochs=0"], ["train.epochs=0: must be >= 1"]),
]


def _gspo(*args: str) -> subprocess.CompletedProcess:
    """The console script of this interpreter's environment (the one pytest runs in)."""
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", ""), "COLUMNS": "200"}
    return subprocess.run(["gspo", *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`gspo <args>` through the console script's `main`: (exit code, stdout, stderr)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # main() would otherwise probe the hub's host name
    monkeypatch.setattr(sys, "argv", ["gspo", *args])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    return e.value.code or 0, out.out, out.err


@pytest.mark.parametrize(("mistake", "args", "words"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_mistake_gets_one_line_with_the_fix(monkeypatch, capsys, mistake, args, words):
    code, out, err = _main(monkeypatch, capsys, *args)
    assert code == 2, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert all(w in err for w in words), err
    assert "Traceback" not in err + out


def test_range_error_names_only_the_wrong_key(monkeypatch, capsys):
    """It used to be "train.epochs must be >= 1, train.lr > 0 and train.max_grad_norm > 0"."""
    _, _, err = _main(monkeypatch, capsys, "train", "train.lr=-1")
    assert err == "error: train.lr=-1.0: must be > 0 and <= 3.40282e+38 (AdamW takes it as a float32)\n"


def test_installed_script_says_the_fix():
    proc = _gspo("train", "--steps", "5")
    assert proc.returncode == 2
    assert proc.stderr == "error: --steps 5: gspo train takes Hydra overrides, not flags: train.steps=5\n"


def test_bare_name_is_a_one_item_list(monkeypatch, capsys):
    code, out, err = _main(monkeypatch, capsys, "train", "eval.benches=aime24", "--cfg")
    assert code == 0, err
    assert "  benches: [aime24]" in out


def test_bare_lists_leaves_lists_sweeps_and_other_keys_alone():
    assert bare_lists(["eval.benches=aime24", "+logger.tags=x", "eval.benches=[a,b]", "eval.benches=a,b",
                       "train.steps=5", "algo=grpo", "eval.benches=${oc.env:B}"]) == [
        "eval.benches=[aime24]", "+logger.tags=[x]", "eval.benches=[a,b]", "eval.benches=a,b", "train.steps=5",
        "algo=grpo", "eval.benches=${oc.env:B}"]

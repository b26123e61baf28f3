"""Round four (issue 59): the environment and the launcher in one line before any folder is written, nothing left
behind that refuses the corrected command, and Ctrl-C at any moment one line and exit 130. Seen before: a
malformed HF_ENDPOINT broke every command with a traceback; logger.wandb=online without a key failed inside W&B;
hydra.launcher.n_jobs=0 was 86 lines and left a sweep.json that refused the corrected retry; a typo'd launcher
12 lines of Hydra and the same leftover; hydra.launcher.n_jobs=1 was overridden without a word under gspo compare;
a sweep folder with a comma a 74-line traceback; Ctrl-C in the first seconds of any command a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from conftest import CONSOLE_SCRIPT, TINY

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.study import launch, sweep


def _main(monkeypatch, capsys, *argv: str) -> tuple[int, list[str]]:
    """gspo.cli.main.main with `argv`, in this process: (exit code, stderr lines)."""
    from gspo.cli import main as cli

    monkeypatch.setattr(sys, "argv", ["gspo", *argv])
    with pytest.raises(SystemExit) as e:
        cli.main()
    return e.value.code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("endpoint", ["http://[bad", "not a url", "https://", "https://host:port"])
def test_a_malformed_hf_endpoint_is_one_line_for_any_command(monkeypatch, capsys, endpoint):
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    code, err = _main(monkeypatch, capsys, "report", "nowhere")
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"error: HF_ENDPOINT={endpoint!r} is not an http(s) URL with a host")


def test_a_mirror_endpoint_passes(monkeypatch):
    from gspo.conf.environment import check_hf_endpoint

    for good in ("https://hf-mirror.com", "http://localhost:8080/"):
        monkeypatch.setenv("HF_ENDPOINT", good)
        check_hf_endpoint()


def test_wandb_online_without_a_key_is_one_line_before_a_sweep_folder(gspo, monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.delenv("NETRC", raising=False)
    with pytest.raises(GspoError, match=r"^logger.wandb=online but no W&B API key is set \(WANDB_API_KEY, or"):
        compose_config(["logger.wandb=online"])
    folder = tmp_path / "sw"
    result = gspo.invoke("sweep", *TINY, "seed=0,1", "logger.wandb=online", f"hydra.sweep.dir={folder}")
    assert isinstance(result.exception, GspoError) and str(result.exception).startswith("logger.wandb=online")
    assert not folder.exists()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    compose_config(["logger.wandb=online"])
    (tmp_path / ".netrc").write_text("machine api.wandb.ai login user password " + "y" * 40 + "\n")
    (tmp_path / ".netrc").chmod(0o600)
    monkeypatch.delenv("WANDB_API_KEY")
    compose_config(["logger.wandb=online"])


@pytest.mark.parametrize("given, message", [
    (["hydra/launcher=joblib", "hydra.launcher.n_jobs=0"],
     "hydra.launcher.n_jobs=0: must be a whole number of jobs run at once, >= 1 (or -1: one per core)"),
    (["hydra/launcher=jobllib"], "hydra/launcher=jobllib: no such launcher (available: basic, joblib, submitit_local, "
                                 "submitit_slurm, slurm, slurm_1x8, slurm_2x8) (did you mean joblib?)"),
    (["hydra/launcher=basic", "hydra.launcher.n_jobs=2"], "hydra.launcher.n_jobs=2: n_jobs is the joblib launcher's "
                                                          "setting; hydra/launcher=basic has none"),
    (["hydra.launcher.n_jobs=1"], "hydra.launcher.n_jobs=1: n_jobs is the joblib launcher's setting; add "
                                  "hydra/launcher=joblib"),
    (["hydra.sweep.dir={tmp}/a,b"], "hydra.sweep.dir={tmp}/a,b: Hydra's override grammar does not read this path back "
                                    "as one folder (a ',' is a sweep over values"),
])
def test_a_launcher_or_folder_hydra_cannot_use_is_one_line_and_leaves_nothing(gspo, tmp_path, given, message):
    given = [g.format(tmp=tmp_path) for g in given]
    folder = tmp_path / "sw"
    where = [] if any(g.startswith("hydra.sweep.dir=") for g in given) else [f"hydra.sweep.dir={folder}"]
    result = gspo.invoke("sweep", *TINY, "seed=0,1", f"output_dir={tmp_path / 'runs'}", *where, *given)
    assert isinstance(result.exception, GspoError), result.output
    assert str(result.exception).startswith(message.format(tmp=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no sweep folder, no run: the corrected retry is fresh


def test_n_jobs_alone_sets_how_many_jobs_compare_runs_at_once(monkeypatch):
    from gspo.study.plan import make_plan

    monkeypatch.setattr(launch, "POLICIES", [("always two", lambda _m: 2)])
    assert launch.jobs_at_once(make_plan(["seed=0,1"])) == 2
    assert launch.jobs_at_once(make_plan(["seed=0,1", "hydra.launcher.n_jobs=1"])) == 1  # was 2: the user's 1 overridden
    assert launch.jobs_at_once(make_plan(["seed=0,1", "hydra.launcher.n_jobs=3"])) == 3
    launch.check_launcher(["hydra.launcher.n_jobs=1"], at_once=True)  # compare: n_jobs alone is a number of jobs


def test_a_sweep_that_fails_before_any_job_leaves_no_folder_but_an_older_one_is_kept(gspo, tmp_path, monkeypatch):
    def hydra_refuses():
        raise SystemExit(1)  # as Hydra's run_and_report ends on a setting it cannot use

    monkeypatch.setattr(sweep, "hydra_job", hydra_refuses)
    folder = tmp_path / "sw"
    result = gspo.invoke("sweep", *TINY, "seed=0,1", f"hydra.sweep.dir={folder}")
    assert result.exit_code == 1 and not folder.exists()
    folder.mkdir()
    (folder / "mine.txt").write_text("the user's")
    gspo.invoke("sweep", *TINY, "seed=0,1", f"hydra.sweep.dir={folder}")
    assert (folder / "mine.txt").read_text() == "the user's"


_INTERRUPTED_IMPORT = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
sys.argv = ["gspo", "train", "seed=1"]
from gspo.cli.entry import main
main()
"""


def test_ctrl_c_while_the_libraries_load_is_one_line_and_130():
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130
    assert done.stderr.splitlines() == ["interrupted: gspo train stopped while loading its libraries; nothing was "
                                        "written"]


def test_ctrl_c_in_a_command_is_one_line_and_130(monkeypatch, capsys):
    """Before: Typer ended it as exit 130 without a word (report, eval, explain...), or a traceback before Typer."""
    from gspo.cli import main as cli

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "check_hf_endpoint", interrupted)  # before Typer started
    assert _main(monkeypatch, capsys, "explain") == (130, ["interrupted: gspo explain stopped before it finished"])
    monkeypatch.undo()
    monkeypatch.setattr("gspo.conf.compose_config", interrupted)  # inside the command
    assert _main(monkeypatch, capsys, "explain") == (130, ["interrupted: gspo explain stopped before it finished"])


_ERROR_AFTER_CTRL_C = """
import os, signal, sys, time
import gspo.cli.main as cli

def run():  # a library the Ctrl-C broke mid-import raises its own error, the interrupt lost on the way
    if {ctrl_c}:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass
    raise RuntimeError("Failed to import transformers.models.qwen3.modeling_qwen3: maximum recursion depth exceeded")

cli.app = run  # the command (Typer's app) raises: cli.main.main and the console script around it are real
sys.argv = ["gspo", "train", "seed=1"]
from gspo.cli.entry import main
main()
"""


@pytest.mark.parametrize("ctrl_c", [True, False])
def test_an_error_a_ctrl_c_caused_is_the_interrupts_one_line_and_any_other_a_traceback(ctrl_c):
    """Seen in CI with accelerate installed (trl's dependency): a Ctrl-C at 1 s landed in numpy's lazy import of
    numpy.dtypes, which became a RecursionError that transformers re-raised as its own: a 60-line traceback and exit 1
    where the interrupt's one line and 130 belong. Without a Ctrl-C the same error stays a traceback (a real bug)."""
    done = subprocess.run([sys.executable, "-c", _ERROR_AFTER_CTRL_C.format(ctrl_c=ctrl_c)], capture_output=True,
                          text=True, timeout=120)
    if ctrl_c:
        assert (done.returncode, done.stderr.splitlines()) == (130, ["interrupted: gspo train stopped before it finished"])
    else:
        assert done.returncode == 1 and "RuntimeError: Failed to import" in done.stderr


def test_a_real_ctrl_c_at_any_moment_of_the_first_seconds_is_one_line():
    for delay in (1.0, 3.0):
        proc = subprocess.Popen([CONSOLE_SCRIPT, "train", "train.steps=1", "output_dir=/nonexistent-i59"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        if proc.returncode in (0, 2):  # finished or refused before the signal came (a fast machine): nothing to see
            continue
        assert proc.returncode == 130 and len(err.splitlines()) == 1 and err.startswith("interrupted: gspo train"), err


def test_an_until_experiment_is_reported_whole_or_refused_in_one_line(tmp_path):
    """Before: its round folders named to gspo report gave the plain 95% interval; with another sweep, the
    experiment's folder was "not a run or sweep directory"."""
    from gspo.cli.report import _until_named

    experiment = tmp_path / "exp"
    for i in (1, 2):
        (experiment / f"round-{i}" / "runs").mkdir(parents=True)
    (experiment / "sequential.json").write_text("{}")
    other = tmp_path / "sweep"
    (other / "runs").mkdir(parents=True)
    assert _until_named([experiment / "round-2", experiment / "round-1"]) == [experiment]
    assert _until_named([experiment]) == [experiment] and _until_named([other]) == [other]
    for given in ([experiment, other], [experiment / "round-1"], [experiment / "round-1", experiment / "round-2", other]):
        with pytest.raises(GspoError) as e:
            _until_named(given)
        assert str(e.value).startswith(f"{experiment} is an until=resolved experiment (seeds added in rounds, each "
                                       f"look at its own level): report it alone, gspo report {experiment}")


@pytest.mark.slow
def test_a_finished_sweep_run_again_from_another_folder_is_skipped_not_retrained(gspo, tmp_path):
    """Before: its relative output_dir resolved from the new folder, so every job said "resuming" and trained anew."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    args = ["sweep", *TINY, "seed=0", "train.steps=0", "logger.progress=false", "output_dir=runs"]
    done, again = gspo.batch([([*args, "hydra.sweep.dir=sw"], first), ([*args, f"hydra.sweep.dir={first / 'sw'}"],
                                                                        second)])
    assert done.returncode == 0, done.stderr[-2000:]
    assert again.returncode == 0, again.stderr[-2000:]
    assert "finished already, skipped" in again.stderr and "resuming: it was" not in again.stderr
    assert not (second / "runs").exists()

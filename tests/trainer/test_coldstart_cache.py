"""The cold-start cache is verified before use (issue 37): a damaged cache is said in one line and rebuilt, a
killed or failed build leaves no half-cache under its key, two builders build once.

The in-process cases copy the session's TINY cache (tests/conftest.py `cold_start`) into a private cache
folder (model.tiny.cache_dir, which is not part of the key) and damage the copy. The kill and two-builder cases
run the builder in subprocesses, killed at a chosen moment (a hook), never after a sleep.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import LEARNING_SEED, TINY, without_timing

from gspo.conf import GspoError, compose_config
from gspo.trainer.coldstart import cache_problem, cold_start_path
from gspo.trainer.policy import tiny_spec
from gspo.trainer.run.rundir import MANIFEST, read_jsonl

as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a private mount")


@pytest.fixture(scope="module")
def spec():
    return tiny_spec(compose_config(TINY))


@pytest.fixture
def cache(cold_start, tmp_path) -> Path:
    """A private copy of the session's TINY cold-start cache: damage it freely."""
    root = tmp_path / "cache"
    shutil.copytree(cold_start, root / "coldstart" / cold_start.name)
    return root


def _zero(path: Path, offset: int, size: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\0" * size)


def test_an_intact_cache_is_used_without_a_word(cache, spec, cold_start):
    said = []
    assert cold_start_path(spec, str(cache), said.append) == cache / "coldstart" / cold_start.name
    assert said == []


@pytest.mark.parametrize(("damage", "problem"), [
    ("zeroed", "model.safetensors does not match its checksum"),
    ("truncated", "model.safetensors has 20000 bytes, "),
    ("no manifest", f"no {MANIFEST}: written by an older gspo, without checksums"),
    ("missing file", "tokenizer.json is missing"),
])
def test_each_damage_is_named(cache, cold_start, damage, problem):
    folder = cache / "coldstart" / cold_start.name
    weights = folder / "model.safetensors"
    if damage == "zeroed":
        _zero(weights, 8192, 4096)  # the size stays, the bytes do not
    elif damage == "truncated":
        os.truncate(weights, 20000)
    elif damage == "no manifest":
        (folder / MANIFEST).unlink()
    else:
        (folder / "tokenizer.json").unlink()
    assert cache_problem(folder).startswith(problem)


def test_a_zeroed_cache_is_said_rebuilt_and_the_run_starts_as_from_an_intact_one(gspo, cache, cold_start, finished_run,
                                                                                  tmp_path):
    """The issue's case: zeroed bytes inside model.safetensors gave a run that "finished" from a broken model."""
    folder = cache / "coldstart" / cold_start.name
    _zero(folder / "model.safetensors", 8192, 16384)
    result = gspo.invoke("train", "-q", *TINY, f"seed={LEARNING_SEED}", "train.steps=1", f"model.tiny.cache_dir={cache}",
                         f"output_dir={tmp_path / 'runs'}", "run_id=r")
    assert result.exit_code == 0, (result.exception, result.output)
    assert (f"note: the cached cold start {folder} is damaged (model.safetensors does not match its checksum); "
            "rebuilding it") in result.stderr
    assert cache_problem(folder) is None
    assert (folder / "model.safetensors").read_bytes() == (cold_start / "model.safetensors").read_bytes()
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name, f"{folder.name}.lock"]  # nothing aside
    step0 = read_jsonl(tmp_path / "runs" / "r" / "metrics.jsonl")[0]
    assert without_timing([step0]) == without_timing(read_jsonl(finished_run / "metrics.jsonl")[:1])  # intact eval


def test_a_truncated_cache_is_rebuilt_once_then_used(cache, spec, cold_start):
    folder = cache / "coldstart" / cold_start.name
    os.truncate(folder / "model.safetensors", 100)
    said = []
    assert cold_start_path(spec, str(cache), said.append) == folder
    assert said[0].startswith(f"note: the cached cold start {folder} is damaged (model.safetensors has 100 bytes")
    assert cache_problem(folder) is None
    again = []
    cold_start_path(spec, str(cache), again.append)
    assert again == []  # the next run uses it without a word


def test_the_cache_is_readable_by_the_group(cold_start):
    for path in [cold_start, *cold_start.iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) & 0o044 == 0o044 & ~_umask(), path  # mkdtemp made it 0700


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("kind", ["file", "loop"])
def test_a_cache_path_that_is_a_file_or_a_symlink_loop_is_one_line(spec, tmp_path, monkeypatch, kind):
    where = tmp_path / "cache"
    if kind == "file":
        where.write_text("not a folder")
    else:
        os.symlink(tmp_path / "other", where)
        os.symlink(where, tmp_path / "other")
    monkeypatch.setenv("GSPO_CACHE", str(where))
    with pytest.raises(GspoError) as err:
        cold_start_path(spec, None, log=lambda _m: None)
    text = str(err.value)
    assert text.startswith(f"GSPO_CACHE={where}: cannot make the cache folder {where / 'coldstart'} (") and "\n" not in text
    assert text.endswith("point it at a folder (GSPO_CACHE=<dir> or model.tiny.cache_dir=<dir>)")


# --- kills and two builders: subprocesses --------------------------------------------------------------

BUILDER = """
import os, signal, sys
sys.path.insert(0, sys.argv[3])
from conftest import TINY
from gspo.conf import compose_config
from gspo.trainer import coldstart
from gspo.trainer.run import rundir
from gspo.trainer.policy import tiny_spec

cache, moment = sys.argv[1], sys.argv[2]
if moment != "none":  # SIGKILL this process right after `moment` ran
    module = rundir if moment == "_write_manifest" else coldstart
    real = getattr(module, moment)

    def killed(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    setattr(module, moment, killed)
coldstart.cold_start_path(tiny_spec(compose_config(TINY)), cache, log=lambda m: print(m, flush=True))
"""


def _builder(gspo, cache: Path, moment: str, out) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUILDER, str(cache), moment, str(Path(__file__).parents[1])],
                            env=gspo.env, stdout=out, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["_sft_loss", "_save", "_write_manifest"])
def test_a_build_killed_at_any_moment_leaves_no_cache_and_the_next_builds(gspo, spec, tmp_path, moment):
    """Killed in the fine-tune, after the weights were written, or after complete.json was written but before
    the rename: no folder under the key; the next build clears the killed builder's folder and builds."""
    cache = tmp_path / "cache"
    killed = _builder(gspo, cache, moment, subprocess.PIPE)
    out, _ = killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL, out[-2000:]
    root = cache / "coldstart"
    assert not (root / spec.key()).exists()
    assert [p.name.startswith(f".build-{spec.key()}-") for p in root.iterdir() if p.is_dir()] == [True]
    said = []
    folder = cold_start_path(spec, str(cache), said.append)
    assert said[0].startswith("cold start: none shipped or cached for these settings")  # TINY is not a shipped spec
    assert said[1].startswith("cold start: building the embedded model") and cache_problem(folder) is None
    assert sorted(p.name for p in root.iterdir()) == [spec.key(), f"{spec.key()}.lock"]


@pytest.mark.slow
def test_two_builders_build_once(gspo, spec, tmp_path):
    """Both start while a third holds the key's lock (so they truly overlap), both wait, one builds, the other
    uses its result."""
    cache = tmp_path / "cache"
    (cache / "coldstart").mkdir(parents=True)
    lock = os.open(cache / "coldstart" / f"{spec.key()}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [_builder(gspo, cache, "none", open(log, "w")) for log in logs]
    deadline = time.time() + 300
    while not all("waiting for it" in log.read_text() for log in logs):
        assert time.time() < deadline and all(p.poll() is None for p in procs), [log.read_text() for log in logs]
        time.sleep(0.2)
    os.close(lock)
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    texts = [log.read_text() for log in logs]
    assert sum(t.count("cold start: building the embedded model") for t in texts) == 1, texts
    assert cache_problem(cache / "coldstart" / spec.key()) is None
    assert sorted(p.name for p in (cache / "coldstart").iterdir()) == [spec.key(), f"{spec.key()}.lock"]


@pytest.mark.slow
@as_root
def test_a_full_disk_during_the_build_is_one_line_and_leaves_no_cache(gspo, tmp_path):
    """A real 32 KiB tmpfs as the cache: the fine-tune runs, the 40 KiB weights do not fit."""
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    script = ('mount -t tmpfs -o size=32k tmpfs "$0" && gspo train -q "${@:2}" model.tiny.cache_dir="$0"; rc=$?; '
              'cp -a "$0" "$1"; exit $rc')
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script, str(disk),
                           str(kept), *TINY, "train.steps=1", f"output_dir={tmp_path / 'runs'}", "run_id=r"],
                          env=gspo.env, capture_output=True, text=True, timeout=300, check=False)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert lines[-1].startswith("error: ") and "the disk is full" in lines[-1] and "Traceback" not in proc.stderr
    assert [p.name for p in (kept / "coldstart").iterdir() if not p.name.endswith(".lock")] == []  # no half-cache

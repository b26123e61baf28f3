"""The run directory: everything a run leaves, written so that a killed run stays readable and resumable.

    results/runs/<run_id>/
      config.yaml      fully resolved config
      estimator.txt    the estimator its update computes (`gspo explain`'s card)
      run.json         status (running, finished, failed, interrupted), versions, timing, last step, load average
      metrics.jsonl    one row per step
      evals.jsonl      one row per (benchmark, metric) evaluation
      samples.jsonl    some prompts, completions and rewards per step
      checkpoints/step_000040/  model, tokenizer, optimizer and trainer state, and complete.json (the
                       size and sha256 of every file, written last); `latest` names the newest, for people

Whole files are written to a temporary sibling and renamed into place (atomic on POSIX). JSONL rows are
appended with one write per complete line and flushed; readers skip a torn final line, and a resumed
run first cuts the logs back to its checkpoint so no step appears twice. Nothing cut is lost: the rows
after the restart point (and any torn or unreadable line) are first appended to set-aside/<log>, so a
resume that finds no usable checkpoint, and is then interrupted, still leaves the history it found.
Every file is created readable by the group as the umask allows (as the logs always were), so a
teammate can read a shared run.

run.json records the writer's host and pid; a reader that finds `running` on this host with no such
process shows the run as `dead` (SIGKILLed, or its last write failed); an unreadable run.json is
reported as such and rebuilt by the run's next writer.

One writer per run: the process that writes a run holds an exclusive `flock` on its folder for its whole
life, so a second `gspo train` with the same run_id, or a resume of a run that is still going, is refused.
Resume never trusts a pointer: it scans the step folders newest first and takes the first whose files
match its complete.json.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import socket
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from gspo.conf.errors import GspoError
from gspo.trainer.run.records import RUN_STATUS, metrics_row_problem, record_problem

LOGS = ("metrics.jsonl", "samples.jsonl", "evals.jsonl", "eval_samples.jsonl")
ESTIMATOR_CARD = "estimator.txt"  # <run>/estimator.txt, written at the run's start: `gspo explain` of its config
MANIFEST = "complete.json"  # written last into a checkpoint: without it (or with a mismatch) it is not intact
SET_ASIDE = "set-aside"  # <run>/set-aside/<log>: rows a resume cut from <log>, appended, never rewritten
STATUS_UNREADABLE = "unreadable"  # what a reader shows for a run.json it cannot parse


def _umask() -> int:
    """The process's umask (read by setting it back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it 0600: readable by the group like the logs
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL log; a torn last line (a run killed mid-write) is skipped, not an error."""
    return read_jsonl_lines(path)[0]


def read_jsonl_lines(path: Path) -> tuple[list[dict], list[str]]:
    """(rows, unreadable lines) of a JSONL log: a line that is not a whole JSON object (torn by a kill,
    damaged by hand), or whose step is not a whole number (records.metrics_row_problem), is returned apart,
    never silently lost."""
    if not path.exists():
        return [], []
    rows, bad = [], []
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict) and metrics_row_problem(row) is None:
            rows.append(row)
        elif line.strip():
            bad.append(line)
    return rows, bad


def missing_steps(rows: list[dict], last_step: int) -> list[int]:
    """Steps 0..last_step with no metrics row (each step logs exactly one)."""
    have = {r.get("step") for r in rows}
    return [s for s in range(last_step + 1) if s not in have]


def read_status(path: Path) -> dict:
    """run.json of the run at `path` as a reader sees it: {} when absent; status `unreadable` (with the
    parse error) when it is not JSON; `dead` when it says running on this host and its pid is gone."""
    f = path / "run.json"
    if not f.exists():
        return {}
    try:
        info = json.loads(f.read_text())
        problem = record_problem(info, RUN_STATUS)
        if problem is not None:
            raise ValueError(problem)
    except (ValueError, OSError) as e:
        return {"status": STATUS_UNREADABLE, "error": f"run.json is unreadable ({str(e).splitlines()[0]})"}
    if info.get("status") == "running" and not writer_alive(info):
        info = {**info, "status": "dead", "recorded_status": "running"}
    return info


def writer_alive(info: dict) -> bool:
    """Whether the process run.json names may still be writing: True unless it ran on this host and no
    process with its pid exists now (another host's process cannot be checked from here)."""
    pid = info.get("pid")
    if not isinstance(pid, int) or info.get("host") != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def default_run_id(algo: str, seed: int) -> str:
    """<time>-<algo>-s<seed>-<random>: runs started in the same second (parallel jobs) never share a folder."""
    return f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{algo}-s{seed}-{secrets.token_hex(3)}"


class RunMoved(GspoError, OSError):
    """The run's folder was moved or deleted while its writer held it: one line, and nothing is written at the
    old path (a stub run.json there, status failed, would hide where the run went). An OSError too, so the
    loop's last status write says it rather than failing on it."""

    def __init__(self, path: Path):
        super().__init__(errno.ENOENT, f"run {path} was moved or deleted while this process was writing it; nothing "
                         "more is written there: resume it where it is now, gspo train resume=<its folder>")

    def __str__(self) -> str:
        return self.strerror


class RunDir:
    def __init__(self, path: Path):
        self.path = path
        self.checkpoints = path / "checkpoints"
        self._lock_fd: int | None = None
        self._owner = False  # set by open(): this object is the run's one writer and locks it
        self._attempt_start: float | None = None  # when this process's attempt began (0: its time is counted)

    @classmethod
    def open(cls, output_dir: str, run_id: str, *, resume: bool) -> RunDir:
        """Check that the run can start (or resume) here. A resume takes the run's lock at once (and then
        clears temporary files a killed writer left); a new run creates nothing until its first write, so
        a run that fails before it starts (a bad model path) leaves no empty run."""
        path = Path(output_dir) / run_id
        # a run killed between config.yaml and its first run.json is a run: it resumes (from step 0)
        exists = (path / "run.json").exists() or (path / "config.yaml").is_file()
        if resume and not exists:
            raise GspoError(f"resume=true but there is no run at {path}")
        if resume and not os.access(path, os.W_OK | os.X_OK):  # before the model loads, not at the first write
            raise GspoError(f"run {path} is not writable (read-only or another user's): a resume writes into it; "
                            "copy it somewhere writable and resume the copy")
        if not resume and path.exists() and any(path.iterdir()):
            raise GspoError(f"run directory {path} already exists: pass resume=true or another run_id")
        run = cls(path)
        run._owner = True
        if resume:
            run._lock()
            run._clear_leftovers()
        return run

    def close(self) -> None:
        """Release the run's lock (the kernel releases it too when the process ends)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _lock(self) -> None:
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise GspoError(f"run {self.path} is being written by another gspo process (a live run or its "
                            f"resume): wait for it to end, or use another run_id") from None
        self._lock_fd = fd

    def _claim(self) -> None:
        """Before the first write of a new run: create the folder and take its lock; refuse if someone was first.
        Before every later write: the folder the lock holds is still at `path` (RunMoved otherwise)."""
        if self._lock_fd is not None:
            held = os.fstat(self._lock_fd)
            try:
                here = os.stat(self.path)
            except FileNotFoundError:
                raise RunMoved(self.path) from None
            if (here.st_dev, here.st_ino) != (held.st_dev, held.st_ino):
                raise RunMoved(self.path)
            return
        if not self._owner:
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise GspoError(f"cannot create the run directory {self.path}: {e.strerror}; "
                            f"set output_dir= to a writable folder") from None
        self._lock()
        if any(self.path.iterdir()):
            self.close()
            raise GspoError(f"run directory {self.path} already exists: pass resume=true or another run_id")

    def _clear_leftovers(self) -> None:
        """Temporary files and checkpoint folders of a writer that was killed mid-write."""
        for name in ("config.yaml", "run.json", *LOGS):
            for tmp in self.path.glob(f".{name}.*"):
                tmp.unlink(missing_ok=True)
        for tmp in [*self.checkpoints.glob(".tmp-*"), *self.checkpoints.glob(".latest.*")]:
            shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink(missing_ok=True)

    # --- whole files ---
    def write_config(self, yaml_text: str) -> None:
        self._claim()
        atomic_write_text(self.path / "config.yaml", yaml_text)

    def status(self) -> dict:
        """run.json as written ({} when absent or unreadable: the next set_status rebuilds it whole)."""
        info = read_status(self.path)
        if not info or info.get("status") == STATUS_UNREADABLE:
            return {}
        recorded = info.pop("recorded_status", info["status"])  # what the file says, not a reader's "dead"
        return {**info, "status": recorded}

    def set_status(self, status: str, **fields) -> None:
        self._claim()
        info = self.status() or self._new_info()
        if self._attempt_start is None:  # this process's first record: an attempt begins
            info |= _dead_attempt(info)
            self._attempt_start = info["attempt_started_unix"] = time.time()
        info.update(fields, status=status, updated=_now(), updated_unix=time.time(), pid=os.getpid(),
                    host=socket.gethostname())
        if job := slurm_job():  # where the run ran: every Slurm job that worked on it, in order (a requeue keeps its id)
            info["slurm_jobs"] = list(dict.fromkeys([*info.get("slurm_jobs", []), job]))
        load = round(os.getloadavg()[0], 2)  # runnable processes (1-min mean): the load the run's times were taken under
        info.setdefault("load_start", load)
        info["load_max"] = max(info.get("load_max", load), load)
        if status in ("finished", "failed", "interrupted"):
            info["ended"] = _now()
            if self._attempt_start > 0:  # the attempts' own time: not the hours between them, nor a dead one's
                info["wall_s"] = round(info.get("wall_s", 0.0) + time.time() - self._attempt_start, 1)
                self._attempt_start = 0.0  # counted once
            info["load_end"] = load
        atomic_write_text(self.path / "run.json", json.dumps(info, indent=2) + "\n")

    def _new_info(self) -> dict:
        import torch
        import transformers

        return {
            "run_id": self.path.name, "started": _now(), "started_unix": time.time(),
            "host": socket.gethostname(), "cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
            "versions": {"gspo": gspo_version(), "torch": torch.__version__, "transformers": transformers.__version__},
            "command": " ".join(sys.argv),
        }

    # --- logs ---
    def append(self, log: str, row: dict) -> None:
        self._claim()
        line = json.dumps(row, default=float) + "\n"
        with open(self.path / log, "a") as f:
            f.write(line)
            f.flush()

    def write_json(self, name: str, data: dict) -> Path:
        self._claim()
        atomic_write_text(self.path / name, json.dumps(data, indent=2, default=str) + "\n")
        return self.path / name

    def truncate_logs(self, last_step: int) -> dict[str, int]:
        """Cut rows after `last_step` (and torn lines) so a resumed run never logs a step twice; -1 cuts all.
        What is cut is appended to set-aside/<log> (synced) before the log is rewritten, so an interrupted
        restart loses nothing. Returns the number of lines set aside per log."""
        self._claim()  # a writer that lost the race for a new run must not rewrite the winner's logs
        aside = {}
        for name in LOGS:
            f = self.path / name
            if not f.exists():
                continue
            rows, bad = read_jsonl_lines(f)
            keep = [r for r in rows if _step(r) <= last_step]
            cut = [json.dumps(r) for r in rows if _step(r) > last_step] + bad
            twice: list[dict] = []
            if name == "metrics.jsonl":  # one row per step, in step order (a copied or edited log may hold more)
                keep, twice = one_row_per_step(keep)
            if not cut and not twice and keep == rows:
                continue
            (self.path / SET_ASIDE).mkdir(exist_ok=True)
            with open(self.path / SET_ASIDE / name, "a") as out:
                out.write("".join(line + "\n" for line in [*cut, *map(json.dumps, twice)]))
                out.flush()
                os.fsync(out.fileno())
            atomic_write_text(f, "".join(json.dumps(r) + "\n" for r in keep))
            if cut:
                aside[name] = len(cut)
            if twice:
                aside[f"{name} (steps logged twice: {', '.join(str(_step(r)) for r in twice[:10])})"] = len(twice)
        return aside

    # --- checkpoints ---
    def save_checkpoint(self, step: int, write, *, keep: int = 0) -> Path:
        """`write(folder)` fills a temporary folder; complete.json is added and the folder renamed to
        checkpoints/step_NNNNNN. Only then are checkpoints older than the newest `keep` complete ones
        deleted (0 keeps all), so an intact checkpoint never goes before a newer one is complete."""
        self._claim()
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        final = self.checkpoints / f"step_{step:06d}"
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.checkpoints))
        try:
            tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it 0700: readable by the group like the logs
            try:
                write(tmp)
            except RuntimeError as e:  # torch's writer says "unexpected pos ..." when the disk fills up
                if shutil.disk_usage(self.checkpoints).free < _FULL_BYTES:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp)) from e
                raise
            for f in tmp.rglob("*"):  # some writers (safetensors) make their files 0600
                f.chmod((0o777 if f.is_dir() else 0o666) & ~_umask())
            _write_manifest(tmp, step)
            if final.exists():  # this step saved again (a finished run resumed with the same steps)
                os.replace(final, tmp.with_name(tmp.name + "-old"))
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(tmp.with_name(tmp.name + "-old"), ignore_errors=True)
        atomic_write_text(self.checkpoints / "latest", final.name + "\n")
        for old in self.checkpoints.glob("superseded-step_*"):  # set aside by a rebuild that has now redone them
            if checkpoint_step(old) <= step:
                shutil.rmtree(old, ignore_errors=True)
        complete = [p for p in self.step_folders() if (p / MANIFEST).exists()]
        if keep > 0 and len(complete) > keep:
            for old in self.step_folders():
                if old.name < complete[-keep].name:
                    shutil.rmtree(old, ignore_errors=True)
        return final

    def latest_checkpoint(self, log=None, *, set_aside: bool = False, before: int | None = None) -> Path | None:
        """The newest intact checkpoint, found by scanning (never by trusting `latest`); each newer one
        that is damaged or incomplete is reported through `log` and passed over, and with `set_aside`
        (the run's writer, resuming) renamed to damaged-step_NNNNNN so no later prune counts it.
        `before`: only checkpoints of a smaller step (a resume that must rebuild a step's missing row)."""
        for folder in reversed(self.step_folders()):
            if before is not None and checkpoint_step(folder) >= before:
                continue
            problem = checkpoint_problem(folder)
            if problem is None:
                return folder
            if log is not None:
                log(f"resume: checkpoint {folder.name} is not intact ({problem}); trying the one before it")
            if set_aside:
                shutil.rmtree(folder.with_name(f"damaged-{folder.name}"), ignore_errors=True)
                os.replace(folder, folder.with_name(f"damaged-{folder.name}"))
        return None

    def step_folders(self) -> list[Path]:
        return sorted(p for p in self.checkpoints.glob("step_*") if p.is_dir())

    def set_aside_checkpoints(self, after: int) -> list[str]:
        """Rename the step folders of a step after `after` to superseded-step_NNNNNN (a resume rebuilding
        from an earlier checkpoint retrains those steps; no prune may count the old ones meanwhile); each
        is deleted once the run has saved a checkpoint at its step or later."""
        moved = []
        for folder in self.step_folders():
            if checkpoint_step(folder) > after:
                target = folder.with_name(f"superseded-{folder.name}")
                shutil.rmtree(target, ignore_errors=True)
                os.replace(folder, target)
                moved.append(folder.name)
        return moved


_FULL_BYTES = 1 << 20  # less free space than this after a failed checkpoint write: the disk is full


def _dead_attempt(info: dict) -> dict:
    """run.json's fields for an earlier attempt that died while running (its record still says running; this process
    holds the run's lock, so its writer is gone): its seconds from its start to its last record, apart from the
    run's wall_s, which sums the attempts that ended."""
    if info.get("status") != "running":
        return {}
    began = info.get("attempt_started_unix", info.get("started_unix"))
    last = info.get("updated_unix")
    seconds = max(0.0, last - began) if isinstance(began, int | float) and isinstance(last, int | float) else 0.0
    return {"dead_s": round(info.get("dead_s", 0.0) + seconds, 1), "dead_attempts": info.get("dead_attempts", 0) + 1}


def checkpoint_step(folder: Path) -> int:
    return int(folder.name.rsplit("_", 1)[1])


def _step(row: dict) -> int:
    step = row.get("step", 0)
    return step if isinstance(step, int) else 0


def one_row_per_step(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the rows in step order, the last written of each step; the earlier rows of a step logged twice)."""
    last = {_step(r): i for i, r in enumerate(rows)}
    return [rows[last[s]] for s in sorted(last)], [r for i, r in enumerate(rows) if last[_step(r)] != i]


def seal_folder(folder: Path, step: int | None = None) -> None:
    """Make `folder` and its files readable by the group (as the umask allows; mkdtemp and safetensors make
    them private), then write its complete.json last: a folder without one, or whose files differ from it,
    is not intact (checkpoint_problem)."""
    for f in [folder, *folder.rglob("*")]:
        f.chmod((0o777 if f.is_dir() else 0o666) & ~_umask())
    _write_manifest(folder, step)


def _write_manifest(folder: Path, step: int | None) -> None:
    files = {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(folder.rglob("*")) if p.is_file()}
    atomic_write_text(folder / MANIFEST, json.dumps({"step": step, "files": files}, indent=1) + "\n")


def checkpoint_problem(folder: Path) -> str | None:
    """Why the checkpoint in `folder` cannot be trusted, or None when every file matches complete.json. The
    manifest is checked by its schema first (`manifest_problem`): a damaged one is no proof of anything."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return f"no readable {MANIFEST}: its write never finished"
    problem = manifest_problem(manifest, folder)
    if problem is not None:
        return f"{MANIFEST} is damaged ({problem})"
    for name, want in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, {want['bytes']} were written"
        if _sha256(path) != want["sha256"]:
            return f"{name} does not match its checksum"
    return None


_SHA256 = re.compile(r"[0-9a-f]{64}")


def manifest_problem(manifest, folder: Path) -> str | None:
    """What breaks complete.json's schema ({"step": int or null, "files": {name: {"bytes": int >= 0, "sha256": 64
    hex digits}}}, every file of the folder listed, none outside it), or None. `{"files": {}}` lists nothing, so
    it would vouch for any weights, zeroed ones too: damaged."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return "no files object"
    step = manifest.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        return f"step is {json.dumps(step)[:40]}"
    files = manifest["files"]
    for name, want in files.items():
        if Path(name).is_absolute() or ".." in Path(name).parts:
            return f"{name[:60]!r} is outside the folder"
        if not (isinstance(want, dict) and isinstance(want.get("bytes"), int) and not isinstance(want["bytes"], bool)
                and want["bytes"] >= 0 and isinstance(want.get("sha256"), str) and _SHA256.fullmatch(want["sha256"])):
            return f"{name[:60]}: {json.dumps(want)[:60]} is no size and sha256"
    present = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST
               and not p.name.startswith(".")}
    unlisted = sorted(present - files.keys())
    if unlisted:
        return f"{unlisted[0]} is not listed" + (f" (nor {len(unlisted) - 1} more)" if len(unlisted) > 1 else "")
    return None


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def gspo_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gspo")
    except PackageNotFoundError:
        return "unknown"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def slurm_job() -> str | None:
    """The Slurm job this process runs in, as squeue and sacct name it (`<array id>_<task>` for a job array's
    task, as Hydra's submitit launcher submits a sweep), or None outside Slurm."""
    env = os.environ
    if "SLURM_ARRAY_JOB_ID" in env and "SLURM_ARRAY_TASK_ID" in env:
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID")

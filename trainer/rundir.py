"""The run directory: everything a run leaves, written so that a killed run stays readable and resumable.

    results/runs/<run_id>/
      config.yaml      fully resolved config
      run.json         status (running, finished, failed, interrupted), versions, timing, last step
      metrics.jsonl    one row per step
      evals.jsonl      one row per (benchmark, metric) evaluation
      samples.jsonl    some prompts, completions and rewards per step
      checkpoints/step_000040/  model, tokenizer, optimizer and trainer state; `latest` names the newest

Whole files are written to a temporary sibling and renamed into place (atomic on POSIX). JSONL rows are
appended with one write per complete line and flushed; readers skip a torn final line, and a resumed
run first cuts the logs back to its checkpoint so no step appears twice.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from gspo.conf.errors import GspoError

LOGS = ("metrics.jsonl", "samples.jsonl", "evals.jsonl", "eval_samples.jsonl")


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
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
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def default_run_id(algo: str, seed: int) -> str:
    return f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{algo}-s{seed}"


class RunDir:
    def __init__(self, path: Path):
        self.path = path
        self.checkpoints = path / "checkpoints"

    @classmethod
    def open(cls, output_dir: str, run_id: str, *, resume: bool) -> RunDir:
        """Check that the run can start (or resume) here. Creates nothing: the folder appears with the
        first file written, so a run that fails before it starts (a bad model path) leaves no empty run."""
        path = Path(output_dir) / run_id
        exists = (path / "run.json").exists()
        if resume and not exists:
            raise GspoError(f"resume=true but there is no run at {path}")
        if not resume and path.exists() and any(path.iterdir()):
            raise GspoError(f"run directory {path} already exists: pass resume=true or another run_id")
        return cls(path)

    # --- whole files ---
    def write_config(self, yaml_text: str) -> None:
        atomic_write_text(self.path / "config.yaml", yaml_text)

    def status(self) -> dict:
        f = self.path / "run.json"
        return json.loads(f.read_text()) if f.exists() else {}

    def set_status(self, status: str, **fields) -> None:
        info = self.status() or self._new_info()
        info.update(fields, status=status, updated=_now())
        if status in ("finished", "failed", "interrupted"):
            info["ended"] = _now()
            info["wall_s"] = round(time.time() - info.get("started_unix", time.time()), 1)
        atomic_write_text(self.path / "run.json", json.dumps(info, indent=2) + "\n")

    def _new_info(self) -> dict:
        import torch
        import transformers

        return {
            "run_id": self.path.name, "started": _now(), "started_unix": time.time(),
            "host": socket.gethostname(), "cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
            "versions": {"gspo": _gspo_version(), "torch": torch.__version__, "transformers": transformers.__version__},
            "command": " ".join(sys.argv),
        }

    # --- logs ---
    def append(self, log: str, row: dict) -> None:
        line = json.dumps(row, default=float) + "\n"
        with open(self.path / log, "a") as f:
            f.write(line)
            f.flush()

    def truncate_logs(self, last_step: int) -> None:
        """Drop rows after `last_step` (and torn lines) so a resumed run never logs a step twice."""
        for name in LOGS:
            f = self.path / name
            if f.exists():
                keep = [r for r in read_jsonl(f) if r.get("step", 0) <= last_step]
                atomic_write_text(f, "".join(json.dumps(r) + "\n" for r in keep))

    # --- checkpoints ---
    def save_checkpoint(self, step: int, write, *, keep: int = 0) -> Path:
        """`write(folder)` fills a temporary folder that is renamed to checkpoints/step_NNNNNN; then all
        but the newest `keep` checkpoints are deleted (0 keeps all)."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        final = self.checkpoints / f"step_{step:06d}"
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.checkpoints))
        try:
            write(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        atomic_write_text(self.checkpoints / "latest", final.name + "\n")
        if keep > 0:
            for old in sorted(self.checkpoints.glob("step_*"))[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
        return final

    def latest_checkpoint(self) -> Path | None:
        pointer = self.checkpoints / "latest"
        if not pointer.exists():
            return None
        path = self.checkpoints / pointer.read_text().strip()
        return path if path.exists() else None


def _gspo_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gspo")
    except PackageNotFoundError:
        return "unknown"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")

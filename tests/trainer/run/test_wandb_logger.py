"""W&B logging with no network: an offline run's record log holds exactly the numbers of metrics.jsonl.

wandb 0.31 keeps an offline run's history only in `wandb/offline-run-*/run-<id>.wandb`, W&B's
leveldb-style log of `wandb.proto.wandb_internal_pb2.Record` protobufs (no reader is left in the SDK):

    header   ":W&B" + magic 0xBEE1 (uint16 LE) + version 0 (uint8)
    records  laid out in 32 KiB blocks counted from the start of the file; each chunk is
             crc32 (uint32 LE, zlib crc32 of type byte then data) + length (uint16 LE) + type (uint8)
             + data; type FULL=1, or FIRST=2, MIDDLE=3, LAST=4 for a record split across blocks;
             a block tail shorter than a chunk header is zero padding.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from pathlib import Path

import pytest
from conftest import LEARNING_SEED, TINY

from gspo.trainer.run.loggers import wandb_mode
from gspo.trainer.run.rundir import read_jsonl

pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")

BLOCK, CHUNK_HEADER = 32 * 1024, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> list:
    """Every Record in a .wandb file, checking the header and each chunk's checksum."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B record log"
    magic, version = struct.unpack("<HB", data[4:7])
    assert (magic, version) == (0xBEE1, 0)
    records, pending, pos = [], None, 7
    while pos + CHUNK_HEADER <= len(data):
        if BLOCK - pos % BLOCK < CHUNK_HEADER:  # zero padding up to the next block
            pos += BLOCK - pos % BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if (crc, length, kind) == (0, 0, 0):  # preallocated zeros after the last record
            break
        chunk = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        assert len(chunk) == length, f"chunk at {pos} runs past the end of the file"
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"bad checksum at {pos}"
        pos += CHUNK_HEADER + length
        if kind == FULL:
            records.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind in (MIDDLE, LAST):
            assert pending is not None, f"chunk of type {kind} at {pos} without a FIRST"
            pending += chunk
            if kind == LAST:
                records.append(pending)
                pending = None
        else:
            raise AssertionError(f"unknown chunk type {kind} at {pos}")
    parsed = []
    for blob in records:
        record = pb.Record()
        record.ParseFromString(blob)
        parsed.append(record)
    return parsed


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def history_by_step(records) -> dict[int, dict]:
    """{step: {key: value}} from the history records (values are JSON)."""
    out: dict[int, dict] = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {_key(i): json.loads(i.value_json) for i in r.history.item}
            out.setdefault(int(items["_step"]), {}).update(items)
    return out


def _wait_for_exit_record(log: Path, timeout: float = 60) -> None:
    """wandb-core writes the log in the background: `run.finish()` can return while the file still holds
    only its header (seen with 0.31). A process exit (wandb's atexit teardown) flushes it; in-process,
    wait until the exit record is on disk."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(r.WhichOneof("record_type") == "exit" for r in read_records(log)):
                return
        except AssertionError:  # caught mid-write
            pass
        time.sleep(0.2)


@pytest.fixture(scope="module")
def wandb_train(gspo, tmp_path_factory):
    """(run folder, the command's Result) of a TINY run logging to W&B offline."""
    out = tmp_path_factory.mktemp("wandb")
    result = gspo.invoke("train", "-q", *TINY, f"output_dir={out}", "run_id=wb", f"seed={LEARNING_SEED}",
                         "train.steps=2", "logger=wandb", "logger.wandb=offline")
    assert result.exit_code == 0, (result.exception, result.output)
    return out / "wb", result


@pytest.fixture(scope="module")
def wandb_run(wandb_train) -> Path:
    return wandb_train[0]


def test_the_run_ends_saying_where_its_offline_run_is_and_how_to_sync_it(wandb_train):
    """One line, even under -q: W&B keeps an offline run silently, and `wandb sync` is what uploads it."""
    run, result = wandb_train
    (folder,) = run.glob("wandb/offline-run-*")
    # in-process the weight-loading bars print too (the console script's main turns them off)
    assert result.stderr.splitlines()[-1] == f"W&B offline run: {folder}; upload it with: wandb sync {folder}"
    assert result.stderr.count("W&B") == 1


def test_offline_run_log_holds_the_metrics(wandb_run):
    (log,) = wandb_run.glob("wandb/offline-run-*/run-*.wandb")
    assert log.name == "run-wb.wandb"  # the W&B run id is the run id
    _wait_for_exit_record(log)
    records = read_records(log)
    kinds = [r.WhichOneof("record_type") for r in records]
    assert kinds[0] == "header" and "run" in kinds and "exit" in kinds
    (run_record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run_record.run_id, run_record.project) == ("wb", "gspo")
    assert (run_record.display_name, run_record.run_group, run_record.job_type) == ("wb", "wb", "train")
    (exit_record,) = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 0

    history = history_by_step(records)
    rows = read_jsonl(wandb_run / "metrics.jsonl")
    assert sorted(history) == [r["step"] for r in rows] == [0, 1, 2]
    for row in rows:
        logged = {k: v for k, v in history[row["step"]].items() if not k.startswith("_")}
        expected = {k: v for k, v in row.items() if k != "step" and v is not None}
        assert logged == expected  # every key, the same float bit for bit
    assert "reward/mean" in history[1] and "clip/token_frac" in history[2] and "eval/arith/accuracy" in history[0]

    # the resolved config rides on the run record (and on later config records, if any)
    updates = [run_record.config] + [r.config for r in records if r.WhichOneof("record_type") == "config"]
    config = {_key(i): json.loads(i.value_json) for u in updates for i in u.update}
    assert config["algo"]["name"] == "gspo" and config["train"]["steps"] == 2 and config["seed"] == LEARNING_SEED


def test_wandb_files_stay_in_the_run_dir(wandb_run):
    assert (wandb_run / "wandb").is_dir()
    assert json.loads((wandb_run / "run.json").read_text())["status"] == "finished"
    assert not (wandb_run.parent / "wandb").exists()


def test_auto_mode_is_offline_without_a_key_and_online_with_one(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert wandb_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode("auto") == "online"
    assert [wandb_mode(m) for m in ("offline", "disabled", "online")] == ["offline", "disabled", "online"]

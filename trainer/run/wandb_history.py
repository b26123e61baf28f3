"""Which steps a W&B run's local record logs hold: what a resumed run reads to find the steps a killed
attempt logged to metrics.jsonl but never got into W&B.

wandb 0.31 keeps a run's history only in `wandb/<offline-run|run>-<time>-<id>/run-<id>.wandb`, a
leveldb-style log of `wandb.proto.wandb_internal_pb2.Record` protobufs, written by the separate wandb-core
process; the SDK has no reader for it any more (`wandb sync` is wandb-core's). Layout:

    header   ":W&B" + magic 0xBEE1 (uint16 LE) + version 0 (uint8)
    records  in 32 KiB blocks counted from the start of the file; each chunk is crc32 (uint32 LE, zlib crc32
             of the type byte then the data) + length (uint16 LE) + type (uint8) + data; type FULL=1, or
             FIRST=2, MIDDLE=3, LAST=4 for a record split across blocks; a block tail shorter than a chunk
             header is zero padding.

The reader is lenient where the tests' reader is strict: a log torn by a kill ends at its first chunk that
is short, zero, or fails its checksum, and holds the records before it.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

BLOCK, CHUNK_HEADER = 32 * 1024, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)


def record_blobs(data: bytes) -> list[bytes]:
    """The serialized Records of a record log's bytes, up to the first torn or damaged chunk ([] when the
    header is not W&B's)."""
    if data[: len(HEADER)] != HEADER:
        return []
    blobs, pending, pos = [], None, len(HEADER)
    while pos + CHUNK_HEADER <= len(data):
        if BLOCK - pos % BLOCK < CHUNK_HEADER:  # zero padding up to the next block
            pos += BLOCK - pos % BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        chunk = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        if kind not in (FULL, FIRST, MIDDLE, LAST) or len(chunk) != length:
            break  # preallocated zeros after the last record, or a chunk cut short by the kill
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            break
        pos += CHUNK_HEADER + length
        if kind == FULL:
            blobs.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif pending is not None:
            pending += chunk
            if kind == LAST:
                blobs.append(pending)
                pending = None
    return blobs


def logged_steps(logs: list[Path]) -> set[int]:
    """Every step with a history record in the record logs `logs` (unreadable files count as empty)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    steps: set[int] = set()
    for log in logs:
        try:
            data = log.read_bytes()
        except OSError:
            continue
        for blob in record_blobs(data):
            record = pb.Record()
            try:
                record.ParseFromString(blob)
            except DecodeError:  # a damaged record is not a logged step
                continue
            if record.WhichOneof("record_type") != "history":
                continue
            for item in record.history.item:
                if (item.key or "/".join(item.nested_key)) == "_step":
                    steps.add(int(json.loads(item.value_json)))
    return steps

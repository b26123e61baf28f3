"""Every random draw of a run derives from (seed, step, what it is for), so a resumed run continues as an
uninterrupted one would and `gspo eval` of a run's checkpoint draws what its periodic eval drew."""

from __future__ import annotations

import hashlib


def step_seed(seed: int, step: int, salt: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{step}:{salt}".encode()).digest()[:4], "little")

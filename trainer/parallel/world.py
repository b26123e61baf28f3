"""This process's place among the job's processes, read from the environment torchrun sets: apart from
distributed.py (which imports torch) so that a command which only checks a config against the processes' layout
(gspo explain's card) loads no torch."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class World:
    """This process's place among the job's processes (rank 0 of 1 without torchrun)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def world_from_env() -> World:
    """The world torchrun describes in the environment (one process when it is not set)."""
    env = os.environ
    return World(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)))

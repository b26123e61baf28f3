"""A range for every numeric setting (conf/ranges.py), the arith task's held-out pool (evals/arith.py
split_pool), disk errors of any library's wording (conf/errors.py disk_error) and a broken <run>/wandb
(trainer/run/loggers.py check_wandb_folder), each one line before anything loads. Seen before:
train.collapse.patience=-1 a TypeError at step 1, entropy_max_factor=-1 every run collapsed at step 1,
experts_per_token=8 of 4 experts a traceback in the cold start, verdict.round_seeds=1e12 a MemoryError,
task.eval_size=1e9 no output at all, EFBIG a SafetensorError traceback, <run>/wandb a file: a traceback after the
model loaded and the finished run marked failed."""

from __future__ import annotations

import dataclasses
import errno
import json
import shutil
import subprocess
import sys
import typing
import zlib

import pytest
from conftest import TINY

from gspo.conf import compose_config, validate_config
from gspo.conf.errors import GspoError, disk_error
from gspo.conf.ranges import RULES
from gspo.conf.schema import Config, VerdictConfig
from gspo.conf.verdict import split_verdict


def _numeric_keys(cls, prefix: str = ""):
    for f in dataclasses.fields(cls):
        kind = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _numeric_keys(kind, f"{prefix}{f.name}.")
        elif any(t in (int, float) for t in (typing.get_args(kind) or (kind,))) or \
                any(t in (int, float) for a in typing.get_args(kind) for t in typing.get_args(a)):
            yield f"{prefix}{f.name}"


def test_every_numeric_setting_has_a_rule():
    keys = [*_numeric_keys(Config), *(f"verdict.{k}" for k in _numeric_keys(VerdictConfig))]
    assert "train.collapse.patience" in keys and "train.adam_betas" in keys  # the walk sees nested and list fields
    assert [k for k in keys if k not in RULES] == []


@pytest.mark.parametrize("overrides, message", [
    (["train.collapse.patience=-1"], "train.collapse.patience=-1: must be >= 1 (a collapse is a fall that lasts at "
                                     "least one step)"),
    (["train.collapse.window=0"], "train.collapse.window=0: must be >= 1 (the moving average of the reward is over at "
                                  "least one step)"),
    (["train.collapse.entropy_max_factor=-1"], "train.collapse.entropy_max_factor=-1.0: must be > 1 (at or below 1x "
                                               "the first step's entropy, every run would count as exploding)"),
    (["model=tiny-moe", "model.tiny.num_experts=4", "model.tiny.experts_per_token=8"],
     "model.tiny.experts_per_token=8: must be at most model.tiny.num_experts=4 (each token is routed to that many of "
     "the experts)"),
    (["model=tiny-moe", "model.tiny.experts_per_token=0"], "model.tiny.experts_per_token=0: must be >= 1"),
    (["model.tiny.moe_intermediate_size=-8"], "model.tiny.moe_intermediate_size=-8: must be >= 1 and <= 65536 (a "
                                                "layer's width, allocated when the model is built)"),
    (["task.eval_size=1000000000"], "task.eval_size=1000000000: must be >= 1 and <= 100000 (every held-out prompt is "
                                    "sampled at step 0 and at each eval)"),
])
def test_a_value_out_of_its_range_is_one_line(overrides, message):
    with pytest.raises(GspoError) as e:
        validate_config(compose_config(overrides))
    assert str(e.value) == message


@pytest.mark.parametrize("given, message", [
    ("verdict.round_seeds=1000000000000", "verdict.round_seeds=1000000000000: must be >= 1 and <= 200 (each seed is "
                                          "one run per arm)"),
    ("verdict.max_seeds=201", "verdict.max_seeds=201: must be >= 2 and <= 200 (each seed is one run per arm, and the "
                              "looks' boundaries are planned over them)"),
])
def test_verdict_sizes_are_bounded(given, message):
    with pytest.raises(GspoError) as e:
        split_verdict([given])
    assert str(e.value) == message
    assert split_verdict(["verdict.max_seeds=200", "verdict.round_seeds=200"])[0].max_seeds == 200


def test_the_held_out_pool_bounds_eval_size():
    from gspo.evals.arith import make_split

    # 1-digit operands: 9 x 9 sums and 9 x 8 products (times a digit 2..9); held out: crc32 of the prompt % 10 == 0
    prompts = [f"{a}+{b}=" for a in range(1, 10) for b in range(1, 10)] + \
        [f"{a}*{b}=" for a in range(1, 10) for b in range(2, 10)]
    held = sum(zlib.crc32(p.encode()) % 10 == 0 for p in prompts)
    assert len(make_split("test", held, seed=0, min_digits=1, max_digits=1, ops="+*")) == held
    with pytest.raises(GspoError) as e:
        make_split("test", held + 1, seed=0, min_digits=1, max_digits=1, ops="+*")
    assert str(e.value) == (f"task.eval_size={held + 1}: the arith task's held-out split with 1..1 digits and ops '+*' "
                            f"holds {held} distinct problems; ask for at most that many")


def test_a_file_size_limit_is_a_disk_error_in_any_librarys_words():
    said = disk_error(OSError(errno.EFBIG, "File too large", "/r/model.safetensors"))
    assert str(said).startswith("/r/model.safetensors: the file is larger than this process may write (ulimit -f")
    # safetensors' own error under a real limit (a subprocess: the limit is the process's)
    code = ("import resource, torch; from safetensors.torch import save_file; from gspo.conf.errors import disk_error\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
            "try:\n    save_file({'w': torch.zeros(10000)}, sys.argv[1])\n"
            "except Exception as e:\n    print(type(e).__name__, '|', disk_error(e))\n")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-c", "import sys\n" + code, f"{tmp}/w.safetensors"],
                              capture_output=True, text=True, timeout=120)
    name, said = done.stdout.strip().split(" | ")
    assert name == "SafetensorError" and said.startswith("the file is larger than this process may write")


@pytest.mark.parametrize("broken", ["file", "dangling link"])
def test_a_broken_wandb_folder_is_one_line_before_the_model_and_the_run_stays_finished(gspo, finished_run, tmp_path,
                                                                                         broken):
    run = tmp_path / "r"
    shutil.copytree(finished_run, run)
    if broken == "file":
        (run / "wandb").write_text("not a folder")
    else:
        (run / "wandb").symlink_to(tmp_path / "gone")
    before = (run / "run.json").read_text()
    result = gspo.invoke("train", "-q", *TINY, f"resume={run}", "logger.wandb=offline")
    assert isinstance(result.exception, GspoError)
    assert str(result.exception).startswith(f"{run / 'wandb'} is a ")
    assert str(result.exception).endswith("move it aside (W&B keeps the run's files there), or set logger.wandb=disabled")
    assert (run / "run.json").read_text() == before and json.loads(before)["status"] == "finished"

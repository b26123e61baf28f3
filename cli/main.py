"""`gspo`: the command line. Thin: parse, compose the config, call into trainer/ and evals/.

Config overrides use Hydra's syntax (`algo=grpo train.steps=20 seed=1`). `gspo train` composes with
Hydra's compose API; `gspo sweep` hands its arguments to a `hydra.main` job with --multirun, so
Hydra's sweepers and launchers work unchanged.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import sys
from importlib import resources
from shlex import quote
from urllib.parse import urlparse

import typer

from gspo.cli.compare import EPILOG, compare_cmd
from gspo.cli.grade import grade_app
from gspo.cli.report import report_cmd
from gspo.conf.choice_check import group_files
from gspo.conf.environment import check_hf_endpoint
from gspo.conf.errors import GspoError, interrupt_said, is_rank0, one_line_errors, sigint_seen
from gspo.conf.schema import Config

app = typer.Typer(
    name="gspo",
    help="Train language models with GRPO, GSPO and their family on one rollout/update loop, and compare them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(grade_app, name="grade")

EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


def _groups_help() -> str:
    root = resources.files("gspo.conf")
    lines = []
    for group in (f.name for f in dataclasses.fields(Config) if root.joinpath(f.name).is_dir()):  # the schema's groups
        lines.append(f"{group}={'|'.join(sorted(group_files(group)))}")
    return "Config groups (pick one each): " + "; ".join(lines) + ". " + (
        "Options: any key of the resolved config, e.g. seed=1 train.steps=20 train.lr=1e-4 "
        "train.minibatches=4 rollout.temperature=1.0 logger.wandb=offline; print them all with --cfg. "
        "Each rollout batch is split into train.minibatches=4 updates (GSPO paper): with 1 minibatch and 1 epoch the "
        "update is on-policy, every ratio is 1, and GRPO and GSPO give the same gradient."
    )


@app.command(context_settings=EXTRA, epilog=_groups_help())
def train(
    overrides: list[str] = typer.Argument(None, help="Hydra overrides, e.g. algo=grpo seed=1 train.steps=20"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or log lines."),
) -> None:
    """Train with an algorithm of the GRPO family, algo= below (default: the embedded tiny model and task, on the CPU).

    Hydra's own flags work as in any Hydra app: --cfg job|hydra|all [--resolve], --info, -m/--multirun
    (the same as gspo sweep), hydra/launcher=joblib|submitit_local, hydra/sweeper=optuna. --cfg alone
    prints the resolved, checked config with each key's one-line doc.
    """
    from gspo.conf import compose_config
    from gspo.conf.docs import annotated_yaml
    from gspo.conf.overrides import INFO_FLAGS, MULTIRUN

    args = list(overrides or [])
    if any(a in MULTIRUN for a in args):
        from gspo.study.sweep import run_sweep

        run_sweep(args)
        return
    cfg_alone = "--cfg" in args and args[args.index("--cfg") + 1 : args.index("--cfg") + 2] not in (["job"], ["hydra"], ["all"])
    if not cfg_alone and any(a in INFO_FLAGS for a in args):
        from gspo.conf.overrides import check_sweep_overrides

        check_sweep_overrides([a for a in args if "=" in a and not a.startswith("-")])  # one line, not Hydra's many
        from gspo.study.sweep import run_hydra_flags  # torch: once the overrides compose

        run_hydra_flags(args)
        return
    config = compose_config([a for a in args if a != "--cfg"])
    if cfg_alone:
        typer.echo(annotated_yaml(config), nl=False)
        return
    if quiet:
        config.logger.progress = False
    from gspo.trainer.assets import (
        check_offline,  # offline, every missing hub asset in one line, before torch loads
    )

    check_offline(config, " ".join(["gspo fetch", *(quote(a) for a in args)]))
    from gspo.trainer.loop import train as run_training


    # always say how to resume, where an offline W&B run is, and a note (a damaged cache rebuilt)
    # quiet still says why a short run takes minutes: a new cold start for changed settings
    log = _log if not quiet else (lambda m: _log(m) if m.startswith(("interrupted:", "W&B offline run:", "note:",
                                                                    "cold start: none")) else None)
    try:
        run_dir = run_training(config, log=log)
    except KeyboardInterrupt as e:  # Typer would make any interrupt exit 130
        raise typer.Exit(interrupt_exit_code(e)) from None
    if is_rank0():
        typer.echo(f"run finished: {run_dir}")


@app.command(context_settings=EXTRA)
def explain(
    overrides: list[str] = typer.Argument(None, help="the same overrides as gspo train, e.g. algo=gspo train.minibatches=4"),
) -> None:
    """Print the exact estimator the update of `gspo train <overrides>` computes: ratio, clip or mask rule, advantage,
    aggregation and its normaliser (micro-batch, accumulation and data-parallel factors), where pi_old and the
    sampler's log-probs come from, the correction. Loads no model; every run writes the same card to estimator.txt."""
    from gspo.conf import compose_config

    config = compose_config(list(overrides or []))
    from gspo.trainer.engines.registry import AUTO
    from gspo.trainer.step.advantages import check_algorithm  # no torch: vocab/lazy.py
    from gspo.trainer.step.explain import estimator_card
    from gspo.trainer.tasks.registry import build_task
    from gspo.vocab.choices import Replay

    if config.task.kind == "arith":  # the other tasks read their dataset to build; the card does not need it
        check_algorithm(config.algo, build_task(config.task))
    if config.rollout.engine == AUTO or config.algo.routing_replay != Replay.NONE:
        # rollout=auto's pick (a run's) and Routing Replay's rules ask the engines and the model's config: torch
        from gspo.trainer.engines.registry import resolve_engine
        from gspo.trainer.parallel.world import World
        from gspo.trainer.preflight import check_routing_replay, replay_needs

        config.rollout.engine = resolve_engine(config, needs=replay_needs(config.algo))
        check_routing_replay(config, World(0, int(os.environ.get("WORLD_SIZE", "1"))))  # no card for a refused run
    typer.echo(estimator_card(config, world_size=int(os.environ.get("WORLD_SIZE", "1"))), nl=False)


@app.command(context_settings=EXTRA)
def sweep(
    overrides: list[str] = typer.Argument(None, help="Hydra sweep overrides, e.g. algo=grpo,gspo seed=0,1,2"),
) -> None:
    """Run a grid of training jobs with Hydra's multirun: the same as gspo train -m (any Hydra launcher
    or sweeper works: hydra/launcher=joblib, hydra/sweeper=optuna).

    Each job is a full `gspo train` run in <output_dir>/<sweep>-<job>-<algo>-s<seed>/; the sweep folder
    results/sweeps/<stamp>/ lists them, and its end says the `gspo report` command that compares them.
    Example: gspo sweep algo=grpo,gspo seed=0,1,2
    """
    from gspo.study.sweep import run_sweep

    run_sweep(overrides or [])


app.command("report")(report_cmd)
app.command("compare", context_settings=EXTRA, epilog=EPILOG)(compare_cmd)


@app.command("fetch", context_settings=EXTRA)
def fetch_cmd(
    overrides: list[str] = typer.Argument(None, help="gspo train's overrides (model=qwen3-0.6b task=math "
                                          "eval.benches=[aime24]) or a compare preset: preset=qwen3-0.6b [overrides]"),
) -> None:
    """Download the Hugging Face hub assets a run or a compare preset reads (model and tokenizer, the task's
    dataset, the benchmarks) into the cache ahead of time, so that it then runs offline (HF_HUB_OFFLINE=1).
    Each is loaded as the run loads it. Example: gspo fetch preset=qwen3-0.6b"""
    from gspo.cli.fetch import run_fetch
    from gspo.study.presets import pick_preset, sweep_params

    args = list(overrides or [])
    preset = pick_preset(args)[0] if any(a.startswith("preset=") for a in args) else None
    rest = [a for a in args if not a.startswith("preset=")]
    run_fetch(preset, sweep_params(preset) if preset else {}, rest, say=typer.echo, log=_log)


@app.command("eval", context_settings=EXTRA)
def eval_cmd(
    overrides: list[str] = typer.Argument(None, help="Hydra overrides, as gspo train's: eval.benches=\\[aime24] "
                                          "eval.run=<run dir> | model=hf model.name=<path or hub id>, eval.k=, "
                                          "eval.limit=, eval.greedy=true, +eval.paths.aime24=FILE, rollout.temperature="),
) -> None:
    """Evaluate a run's latest checkpoint (eval.run=DIR, under the run's own config), a local model or hub id
    (model=hf model.name=...) or the embedded model on benchmarks (eval.benches=\\[arith,aime24,livecodebench,
    codeforces]); rows go to evals.jsonl, as the periodic evals of gspo train write them.

    The config is gspo train's, composed by Hydra: --cfg prints it with each key's doc; -m evaluates every
    combination (eval.benches=\\[aime24],\\[livecodebench] model.name=a,b), one output folder per job.
    """
    from gspo.conf import compose_config
    from gspo.conf.docs import annotated_yaml
    from gspo.conf.overrides import MULTIRUN

    args = list(overrides or [])
    _refuse_model_path(args)
    if any(a in MULTIRUN for a in args):
        from gspo.study.sweep import SweepCall, run_sweep

        run_sweep(args, SweepCall(command="eval"))
        return
    config = compose_config([a for a in args if a != "--cfg"], command="eval")
    if "--cfg" in args:
        typer.echo(annotated_yaml(config), nl=False)
        return
    from gspo.trainer.assets import check_offline, fetch_command

    check_offline(config, fetch_command(config))
    from gspo.trainer.evaluate import run_eval

    out = run_eval(config, log=_log)
    typer.echo(f"evals written to {out / 'evals.jsonl'}")


@app.command(context_settings=EXTRA)
def coldstart(
    overrides: list[str] = typer.Argument(None, help="the same overrides as gspo train, e.g. model=tiny-moe"),
    out: str = typer.Option("", "--out", help="folder for the rebuild (a new <key>/ inside it); default: the cache's "
                            "coldstart/rebuilds/<time>/"),
) -> None:
    """Rebuild the embedded model's cold start for these settings from its spec, on this machine, and say how far
    it lands from the start gspo ships (steps, dev accuracy, weights, sampled accuracy on one seed). Runs never
    rebuild a shipped start; this shows how much of it depends on the CPU that built it."""
    import json
    import time
    from pathlib import Path

    from gspo.conf import compose_config

    config = compose_config(list(overrides or []))
    if config.model.name != "tiny":
        raise GspoError(f"gspo coldstart builds the embedded model's start (model=tiny or tiny-moe), not model.name={config.model.name}")
    from gspo.trainer.coldstart import SHIPPED, compare_starts, rebuild
    from gspo.trainer.model.models import cache_root
    from gspo.trainer.policy import tiny_spec

    spec = tiny_spec(config)
    folder = Path(out) if out else cache_root(config.model.tiny.cache_dir) / "coldstart" / "rebuilds" / time.strftime("%Y%m%d-%H%M%S")
    built = rebuild(spec, folder, _log, progress=config.logger.progress)
    typer.echo(f"rebuilt: {built}")
    shipped = SHIPPED / spec.key()
    if not shipped.is_dir():
        typer.echo(f"no start is shipped for these settings (key {spec.key()}): nothing to compare with")
        return
    far = compare_starts(spec, shipped, built)
    typer.echo(f"shipped {shipped}: {_start_line(far, 0)}")
    typer.echo(f"rebuilt here: {_start_line(far, 1)}")
    typer.echo("weights: " + ("the same bytes" if far["same_bytes"] else f"differ (largest |difference| {far['max_abs_weight_diff']:.3g})"))
    (built / "compared.json").write_text(json.dumps(far, indent=2) + "\n")


def _start_line(far: dict, i: int) -> str:
    where = far["built_on"][i] or {}
    return (f"{far['steps'][i]} fine-tune steps, dev sampled accuracy {far['dev_sampled_accuracy'][i]:.2f} as built, "
            f"{far['sampled_accuracy_same_seed'][i]:.3f} on one seed; built on {where.get('cpu', 'an unrecorded CPU')} "
            f"(torch {where.get('torch', '?')}, {where.get('threads', '?')} threads)")


@app.command("export-hf")
def export_hf_cmd(
    checkpoint: str = typer.Argument(..., help="a sharded checkpoint: <run>/checkpoints/step_NNNNNN of a train.fsdp run"),
    out: str = typer.Argument(..., help="a new folder for the Hugging Face model (config, weights, tokenizer)"),
) -> None:
    """Convert a train.fsdp run's sharded checkpoint (torch.distributed.checkpoint shards) into a Hugging Face
    folder, in this one process: gspo eval model=hf model.name=<out>, or transformers' from_pretrained, read
    it. (A run's final checkpoint holds the whole weights already.)"""
    from pathlib import Path

    from gspo.trainer.parallel.fsdp import export_hf
    from gspo.trainer.run.rundir import checkpoint_problem

    folder = Path(checkpoint)
    if not folder.is_dir():
        raise GspoError(f"{checkpoint}: no such checkpoint folder")
    problem = checkpoint_problem(folder)
    if problem is not None:
        raise GspoError(f"{checkpoint} is not an intact checkpoint: {problem}")
    typer.echo(f"wrote {export_hf(folder, Path(out))}")


def _refuse_model_path(args: list[str]) -> None:
    for arg in args:
        key, _, value = arg.partition("=")
        if key == "model" and ("/" in value or value.startswith(".")):
            raise GspoError(f"{arg!r}: a model by path or hub id is model=hf model.name={value}")


def _log(message: str) -> None:
    typer.echo(message, err=True)


def _offline_without_network() -> None:
    """When the Hugging Face hub's host does not even resolve, work offline at once (local files and the
    cache) instead of retrying for a minute. Must run before transformers or datasets are imported:
    huggingface_hub reads HF_HUB_OFFLINE at import time."""
    if os.environ.get("HF_HUB_OFFLINE"):
        return
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"


def main() -> None:
    """Console entry point: user errors are one line on stderr and exit code 2, never a traceback; an interrupt
    (Ctrl-C, or a signal the trainer turns into one) at any moment is one line and 128 + the signal's number."""
    try:
        with one_line_errors():
            check_hf_endpoint()  # every command reads it (huggingface_hub at import): one line, not a traceback
            _offline_without_network()
            # weight loading/saving bars would bury the run's own progress: transformers' and the hub's bars both read
            # this at import (as transformers.utils.logging.disable_progress_bar() sets them), and importing
            # transformers here would cost a command that fails on its config several seconds before its one line
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            app()
    except KeyboardInterrupt as e:  # outside Typer's command (its own start)
        _interrupted(e)
    except SystemExit as e:  # Typer ends a command's interrupt as exit 130, silently
        interrupt = _interrupt_of(e)
        if interrupt is None:
            raise
        _interrupted(interrupt)
    except Exception:  # an error a Ctrl-C caused in a library it interrupted (conf/errors.py sigint_seen)
        if not sigint_seen():
            raise
        _interrupted(KeyboardInterrupt())


def _interrupt_of(e: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt an exit was raised over (Typer raises Exit(130) from it), or None."""
    seen = 0
    while e is not None and seen < 5:
        if isinstance(e, KeyboardInterrupt):
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def _interrupted(e: KeyboardInterrupt) -> None:
    """One line (unless the trainer or the sweep said theirs, naming what is kept and how to continue), then exit."""
    if is_rank0() and not interrupt_said(e):
        command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
        typer.echo(f"interrupted: gspo {command} stopped before it finished", err=True)
    sys.exit(interrupt_exit_code(e))


def interrupt_exit_code(e: KeyboardInterrupt) -> int:
    """128 + the signal's number, the shell's convention for a process ended by a signal: 130 for Ctrl-C
    (SIGINT), 143 for SIGTERM (the trainer turns it into KeyboardInterrupt("signal 15")), so a scheduler or
    a script tells a kill from a user's Ctrl-C."""
    if e.args and isinstance(e.args[0], str) and e.args[0].startswith("signal "):
        return 128 + int(e.args[0].split()[1])
    return 128 + signal.SIGINT


if __name__ == "__main__":
    main()

"""The experiment's plan (docs/plan.md): what a sweep or a compare runs and how it is judged, parsed once from the
command line and the preset (each Hydra key once: `seed=`, `+seed=`, `++seed=`, `range(...)` are one key, so Hydra
plans each (arm, seed) once) and registered whole in the sweep folder (plan.json) before the first run. Every reader
takes the Plan: the sweep, the rounds, the launcher policy, `gspo fetch`, the --cfg grid; the report reads plan.json.
A rerun composes its own and must match (`register`); seeds added to a finished fixed plan are its next round; an
until's end (a budget spent) is recorded (`mark_ended`). Arms provably equal are folded by each algorithm's
registration (`same_as`, `on_policy_as`), never a name here (`fold_equal_arms`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace

from omegaconf import DictConfig

from gspo.algos import ALGOS
from gspo.conf.compose import compose_config
from gspo.conf.errors import GspoError
from gspo.conf.keys import bare_lists
from gspo.conf.overrides import (
    MULTIRUN,
    check_sweep_overrides,
    first_job,
    key_of,
    one_per_key,
    planned_jobs,
    swept_keys,
)
from gspo.conf.resume import flat_config, trajectory_neutral
from gspo.conf.schema import VerdictConfig
from gspo.report.arms import Arm, label_keys, pairs, short_label
from gspo.trainer.run.rundir import gspo_version
from gspo.trainer.run.sweepdir import PLAN, read_plan, write_plan
from gspo.vocab.choices import Until

SEED = "seed"
_RUN_KEYS = ("seed", "run_id", "output_dir", "resume")  # each run's own, not the arm's
DESIGN_VERDICT = ("max_seeds", "round_seeds", "spending", "max_minutes")  # an until's looks are planned with these


@dataclass(frozen=True)
class Plan:
    """`overrides`: Hydra's argv (each key once, sweep folder included); `params`: the preset's sweep params;
    `notes`: arms folded before planning."""

    overrides: tuple[str, ...]
    params: tuple[tuple[str, str], ...] = ()
    command: str = "train"
    preset: str | None = None
    verdict: VerdictConfig = field(default_factory=VerdictConfig)
    resume: bool = False
    notes: tuple[str, ...] = ()

    @cached_property
    def jobs(self) -> tuple[str, ...] | None:
        """Hydra's job list, each job's swept values (None: a search sweeper draws them)."""
        return planned_jobs(list(self.overrides), dict(self.params))  # its one caller: every other reader takes the Plan

    @property
    def arms(self) -> tuple[str, ...]:
        """Each arm's defining overrides (its job without the seed), in job order: `algo=grpo`."""
        return tuple(dict.fromkeys(" ".join(t for t in job.split() if key_of(t) != SEED) for job in self.jobs or []))

    @property
    def seeds(self) -> tuple[str, ...]:
        """The seeds every arm runs, in job order (the config's seed where none is swept)."""
        swept = dict.fromkeys(t.split("=", 1)[1] for job in self.jobs or [] for t in job.split() if key_of(t) == SEED)
        return tuple(swept) or (self.given(SEED) or "0",)

    def int_seeds(self) -> list[int]:
        try:
            return [int(s) for s in self.seeds]
        except ValueError:
            raise GspoError("verdict.until=resolved needs integer seeds (seed=0,1,2)") from None

    def given(self, key: str) -> str | None:
        """The value the plan gives `key`: the command line's (it wins over a preset's params), else the preset's."""
        said = [o.split("=", 1)[1] for o in self.overrides if key_of(o) == key and "=" in o]
        return said[-1] if said else dict(self.params).get(key)

    @property
    def swept(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*dict(self.params), *swept_keys(list(self.overrides))]))

    @property
    def folder(self) -> str | None:
        return self.given("hydra.sweep.dir")

    @property
    def fixed(self) -> list[str]:
        """The overrides every job shares (Hydra's own, the seed and swept keys left out)."""
        return [o for o in self.overrides if not o.startswith(("hydra.", "hydra/")) and key_of(o) not in
                {SEED, *self.swept}]

    def with_keys(self, **values: str | None) -> Plan:
        """The plan with `seed=`/`hydra.sweep.dir=` given (a value) or left out (None): a round's sweep."""
        names = {k.replace("__", "."): v for k, v in values.items()}
        kept = [o for o in self.overrides if key_of(o) not in names]
        kept += [f"{k}={v}" for k, v in names.items() if v is not None]
        return replace(self, overrides=tuple(kept))


def make_plan(args: list[str], command: str = "train", preset: str | None = None,
              params: dict[str, str] | None = None, verdict: VerdictConfig | None = None) -> Plan:
    """The plan of `gspo sweep|compare <args>`: checked (every swept value composes), each key once, arms that
    provably equal folded (with notes). The launcher's plugin is checked by its sweep (study/launch.py)."""
    params = params or {}
    overrides = bare_lists([a for a in args if a not in MULTIRUN])  # eval.benches=aime24 as in gspo train
    resume = any(a.startswith("resume=") for a in overrides)
    overrides = one_per_key([a for a in overrides if not a.startswith("resume=")], params)
    check_sweep_overrides(overrides, command)
    notes: list[str] = []
    if command == "train":
        overrides, notes = fold_equal_arms(Plan(tuple(overrides), tuple(params.items())))
    return Plan(tuple(overrides), tuple(params.items()), command, preset, verdict or VerdictConfig(), resume, tuple(notes))


def fold_equal_arms(plan: Plan) -> tuple[list[str], list[str]]:
    """(the plan's overrides, notes). An algorithm that equals another when every sequence has one advantage
    (algo.advantage=group, no token-level correction: GSPO-token and GSPO, GSPO paper eqs. 13-14) is dropped from
    an algo= list holding both, with a note. On-policy (train.minibatches=1 train.epochs=1) two algorithms whose
    gradients are then equal (every ratio is 1: GSPO and GRPO) are refused. Keys this cannot see (a preset's own
    settings) leave the arms as they are. An algo= entry that is a preset of another name (grpo_replay) is left to
    the config."""
    overrides, given = list(plan.overrides), plan.given
    algos = (given("algo") or "").split(",")
    notes = []
    known = {a: ALGOS[a] for a in algos if a in ALGOS}
    on_policy = given("train.minibatches") == "1" and given("train.epochs") in (None, "1")
    for spec in known.values():
        if on_policy and spec.on_policy_as in known:
            other = known[spec.on_policy_as]
            raise GspoError(f"train.minibatches=1 is on-policy: every ratio is 1, so {other.title} and {spec.title} give "
                            "the same gradient and their arms cannot differ; use train.minibatches=4 (the GSPO "
                            "paper's) or train.epochs=2")
    token_free = not any(key_of(o).startswith(("algo.advantage", "algo.correction"))
                         for o in [*overrides, *dict(plan.params)])
    dropped = [a for a, spec in known.items() if token_free and spec.same_as in known]
    if dropped:
        kept = ",".join(a for a in algos if a not in dropped)
        overrides = [o for o in overrides if key_of(o) != "algo"] + [f"algo={kept}"]
        for a in dropped:
            spec = known[a]
            notes.append(f"{spec.title} left out: with one advantage per sequence (algo.advantage=group) it equals "
                         f"{known[spec.same_as].title} in value and gradient; sweep a preset with per-token "
                         f"advantages (algo.advantage=step) to compare them")
    return overrides, notes


def job_overrides(plan: Plan, job: str) -> list[str]:
    """What job `job` (its swept values; "": a search sweeper's first point) composes: the plan's fixed overrides
    and its own values."""
    base = plan.fixed if plan.jobs is not None else [o for o in plan.overrides if not o.startswith(("hydra.", "hydra/"))]
    return first_job([*base, *job.split()])


def arm_config(plan: Plan, arm: str | None = None) -> DictConfig:
    """`arm`'s composed config at the plan's first seed (None: the first arm, or a search sweeper's first point)."""
    return compose_config(job_overrides(plan, f"{(plan.arms or ('',))[0] if arm is None else arm} seed={plan.seeds[0]}"))


def arm_configs(plan: Plan) -> dict[str, dict]:
    """Each arm's composed config, flattened: what it trains (trajectory-neutral keys and the run's own left out)."""
    return {arm: {k: v for k, v in flat_config(arm_config(plan, arm)).items()
                  if k not in _RUN_KEYS and not trajectory_neutral(k)} for arm in plan.arms}


def comparisons(plan: Plan, configs: dict[str, dict] | None = None) -> list[str]:
    """`arm vs baseline`, exactly as the report will pair the arms' runs: the report's own label keys and strata
    (report/arms.py) over each arm's composed config (`configs`: arm_configs(plan)), so the plan registers the
    page's comparisons. On override strings alone they can differ: algo=gspo_tis is GSPO with a correction, its own
    stratum on the page (algo.correction.kind differs), compared with GRPO at its own lag as the nearest baseline."""
    configs = arm_configs(plan) if configs is None else configs
    if len(configs) < 2:
        return []
    keys = label_keys([SimpleNamespace(config=c) for c in configs.values()])
    arms = {name: Arm(short_label(v := {k: c.get(k) for k in keys}), v, []) for name, c in configs.items()}
    names = {id(a): name for name, a in arms.items()}
    return [f"{names[id(arm)]} vs {names[id(base)]}" for arm, base in pairs(list(arms.values()))]


def record(plan: Plan, rounds: list[list[int]] | None = None) -> dict:
    """plan.json's content: the plan whole, as JSON; `rounds`: an until's seeds of each round (a fixed plan: its
    seeds, then each next round's)."""
    v = plan.verdict
    until = v.until == Until.RESOLVED
    stop = {"until": v.until, **({f"verdict.{k}": getattr(v, k) for k in DESIGN_VERDICT} if until else {})}
    configs = arm_configs(plan)
    compared = comparisons(plan, configs)
    return json.loads(json.dumps({
        "gspo": gspo_version(), "preset": plan.preset, "arms": configs, "seeds": list(plan.seeds),
        "primary": v.primary, "effect": v.effect, "comparisons": compared,
        "alpha": f"0.05 over the {len(compared)} comparison(s) of the primary score: "
                 + ("Bonferroni, then group-sequential spending over the looks" if until else "Holm"),
        "stop": stop, "launcher": [o for o in plan.overrides if o.startswith(("hydra/launcher=", "hydra.launcher."))],
        "rounds": rounds or [list(plan.seeds)], "ended": None}))


def differences(was: dict, now: dict) -> list[str]:
    """Each way `now` differs from the registered plan `was`, in words (the seeds last)."""
    said = []
    if list(was["arms"]) != list(now["arms"]):
        said.append(f"arms {', '.join(was['arms'])} -> {', '.join(now['arms'])}")
    if was.get("launcher") != now.get("launcher"):
        said.append(f"launcher {' '.join(was.get('launcher') or ['(the policy)'])} -> "
                    f"{' '.join(now.get('launcher') or ['(the policy)'])}")
    stop = {f"verdict.{k}": (was.get(k), now.get(k)) for k in ("primary", "effect")}
    stop |= {f"verdict.{k.removeprefix('verdict.')}": (was["stop"].get(k), now["stop"].get(k))
             for k in sorted(was["stop"].keys() | now["stop"].keys()) if k != "verdict.max_minutes"}
    said += [f"{k}={json.dumps(a)} -> {json.dumps(b)}" for k, (a, b) in stop.items() if a != b]
    said += _config_changes(was, now)
    if was["seeds"] != now["seeds"]:
        new = [s for s in now["seeds"] if s not in was["seeds"]]
        gone = [s for s in was["seeds"] if s not in now["seeds"]]
        said.append("; ".join(([f"new seeds {','.join(new)}"] if new else [])
                              + ([f"seeds {','.join(gone)} dropped"] if gone else [])) or "the seeds' order")
    return said


def _config_changes(was: dict, now: dict) -> list[str]:
    """A changed value of an arm's composed config (an edited preset, a new default): once when every arm shares
    the change, else per arm."""
    changes: dict[str, list[str]] = {}
    for arm, config in was["arms"].items():
        other = now["arms"].get(arm)
        for key in sorted(config.keys() | (other or {}).keys()) if other is not None else []:
            if config.get(key) != other.get(key):
                changes.setdefault(f"{key}={json.dumps(config.get(key))} -> {json.dumps(other.get(key))}", []).append(arm)
    return [words + ("" if len(arms) == len(was["arms"]) else f" in arm {', '.join(arms)}")
            for words, arms in changes.items()]


def check_registered(folder: Path, was: dict, now: dict) -> list[str]:
    """The seeds `now` adds to the registered plan `was` as its next round ([]: the same plan resumes); any other
    difference is one line naming each, and the next-round route where only seeds were added."""
    said = differences(was, now)
    if not said:
        return []
    new = [s for s in now["seeds"] if s not in was["seeds"]]
    only_seeds = len(said) == 1 and new and all(s in now["seeds"] for s in was["seeds"])
    if only_seeds and was["stop"].get("until") != Until.RESOLVED:
        return new
    route = (f"; to add seeds, give the registered seeds and the new ones (seed={','.join([*was['seeds'], *new])}) "
             "with nothing else changed: they run as the plan's next round" if new else "")
    raise GspoError(f"{folder} holds a registered plan ({PLAN}, gspo {was.get('gspo')}) that this command changes: "
                    f"{'; '.join(said)}{route if was['stop'].get('until') != Until.RESOLVED else ''}; rerun it as "
                    "registered to resume it, or start another hydra.sweep.dir=")


def check_ended(folder: Path, was: dict, verdict: VerdictConfig) -> None:
    """An until whose last look spent the rest of alpha has ended: a larger budget cannot reopen it."""
    ended = was.get("ended")
    if not ended or ended.get("stop") == "settled" or verdict.until != Until.RESOLVED:  # a plain compare: differences
        return
    if (verdict.max_minutes, verdict.max_seeds) != (was["stop"].get("verdict.max_minutes"),
                                                    was["stop"].get("verdict.max_seeds")):
        raise GspoError(f"{folder}: the experiment ended at look {ended['looks']} ({ended['stop']} budget spent: that "
                        "look spent the rest of alpha), so a larger budget cannot add looks to it; start a new "
                        "experiment with its own seeds in another hydra.sweep.dir= (the same command reruns its page)")


def mark_ended(folder: Path, looks: int, stop: str) -> None:
    """Record the until's end in plan.json: the look that spent the last of alpha, and why."""
    write_plan(folder, (read_plan(folder) or {}) | {"ended": {"looks": looks, "stop": stop}})


def register(folder: Path, plan: Plan, rounds: list[list[int]] | None = None,
             legacy: dict | None = None) -> tuple[dict, list[str]]:
    """(the registered plan, the seeds this command adds as its next round): the plan written whole to `folder`
    before its first run, or a rerun checked against it (`legacy`: an older gspo's, derived from its records)."""
    now = record(plan, rounds)
    was = read_plan(folder) or legacy
    if was is None:
        write_plan(folder, now)
        return now, []
    check_ended(folder, was, plan.verdict)
    new = check_registered(folder, was, now)
    if was is legacy and not new:
        write_plan(folder, now)
    return was, new

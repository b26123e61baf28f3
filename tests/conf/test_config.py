"""Every shipped config composes: each option of each group (found in the installed package, not listed
here) with the defaults, its yaml values land in the resolved config, and the result survives the
round trip through config.yaml. The sweep presets parse and name real options."""

from __future__ import annotations

import itertools
import re
from importlib import resources
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gspo.conf import compose_config, config_to_yaml
from gspo.conf.schema import Config

ROOT = resources.files("gspo.conf")
GROUPS = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name not in ("sweep", "__pycache__")
                and any(f.name.endswith(".yaml") for f in p.iterdir()))
# what an option needs before it composes into a runnable config
REQUIRED = {("model", "hf"): ["model.name=some-org/some-model"], ("algo", "grpo_replay"): ["model=tiny-moe"]}
REFUSED = {(("algo", "grpo_replay"), ("model", "tiny"))}  # Routing Replay on the dense embedded model


def _options(group: str) -> list[str]:
    return sorted(p.name.removesuffix(".yaml") for p in ROOT.joinpath(group).iterdir() if p.name.endswith(".yaml"))


def _is_global(group: str, option: str) -> bool:
    return ROOT.joinpath(group, f"{option}.yaml").read_text().startswith("# @package _global_")


def _preset(group: str, option: str) -> dict:
    """What <group>/<option>.yaml sets to its group's node, with the presets its defaults list names merged in
    first (a preset in the global package: its `group:` node)."""
    node = OmegaConf.load(str(ROOT.joinpath(group, f"{option}.yaml")))
    bases = [_preset(group, d) for d in node.pop("defaults", []) if d != "_self_"]
    own = node[group] if _is_global(group, option) else node
    return OmegaConf.to_container(OmegaConf.merge(*bases, own))


def _assert_preset_applied(cfg, group: str, option: str) -> None:
    def check(node, preset: dict, path: str) -> None:
        for key, value in preset.items():
            if (group, option, key) == ("model", "hf", "name"):
                continue  # null in the preset: the user must name the model
            if isinstance(value, dict):  # a nested preset sets some keys of a node, the schema the rest
                check(node[key], value, f"{path}{key}.")
            else:
                assert node[key] == value, f"{group}={option}: {path}{key}"

    check(cfg[group], _preset(group, option), "")
    if _is_global(group, option):  # its other nodes too
        node = OmegaConf.to_container(OmegaConf.load(str(ROOT.joinpath(group, f"{option}.yaml"))))
        for other, values in node.items():
            if other != group:
                check(cfg[other], values, f"{other}.")


ALL = [(g, o) for g in GROUPS for o in _options(g)]


def test_groups_are_the_ones_users_type():
    assert GROUPS == ["algo", "logger", "model", "rollout", "task"]
    assert {"grpo", "gspo", "gspo_token"} <= set(_options("algo"))


@pytest.mark.parametrize(("group", "option"), ALL, ids=[f"{g}={o}" for g, o in ALL])
def test_every_option_composes_with_the_defaults(group, option):
    cfg = compose_config([f"{group}={option}", *REQUIRED.get((group, option), [])])
    assert _preset(group, option), f"{group}/{option}.yaml is empty"
    _assert_preset_applied(cfg, group, option)
    # what config.yaml holds loads back into the schema as the same config
    reloaded = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.create(config_to_yaml(cfg)))
    assert reloaded == cfg


def test_model_hf_without_a_name_says_so():
    from gspo.conf.errors import GspoError

    with pytest.raises(GspoError, match="model.name"):
        compose_config(["model=hf"])


def _allowed(combo) -> bool:
    return not any(set(refused) <= set(combo) for refused in REFUSED)


def _pairwise(options: list[list[tuple[str, str]]]) -> list[tuple]:
    """A covering array of strength 2, built greedily: every two options of two groups (that some allowed
    combination holds) appear together in at least one combination. The groups' yaml files interact through
    the nodes they set, two at a time (a model preset and a rollout preset, an algo preset and a task
    preset), so this checks every interaction the full product did, in a tenth of the compositions."""
    combos = [c for c in itertools.product(*options) if _allowed(c)]

    def pairs(c):
        return set(itertools.combinations(c, 2))

    uncovered = set().union(*(pairs(c) for c in combos))
    chosen = []
    while uncovered:
        best = max(combos, key=lambda c: len(pairs(c) & uncovered))
        chosen.append(best)
        uncovered -= pairs(best)
    return chosen


def test_the_pairwise_combinations_cover_every_pair():
    options = [[(g, o) for o in _options(g)] for g in GROUPS]
    chosen = _pairwise(options)
    for a, b in itertools.combinations(options, 2):
        for x, y in itertools.product(a, b):
            assert any(x in c and y in c for c in chosen) or not _allowed((x, y)), (x, y)
    assert len(chosen) < len(list(itertools.product(*options))) / 4


def test_every_pair_of_options_composes():
    for combo in _pairwise([[(g, o) for o in _options(g)] for g in GROUPS]):
        overrides = [f"{g}={o}" for g, o in combo] + [
            x for c in combo for x in REQUIRED.get(c, []) if x.split("=")[0] not in GROUPS]  # the combo picks groups
        cfg = compose_config(overrides)
        for g, o in combo:
            _assert_preset_applied(cfg, g, o)


def test_algo_presets_carry_the_paper_clip_ranges():
    names = ("grpo", "gspo", "gspo_token", "dapo", "gmpo", "cispo")
    got = {o: (_preset("algo", o)["clip_low"], _preset("algo", o)["clip_high"]) for o in names}
    assert got == {"grpo": (0.2, 0.27), "gspo": (3e-4, 4e-4), "gspo_token": (3e-4, 4e-4), "dapo": (0.2, 0.28),
                   "gmpo": (0.4, 0.4), "cispo": (1.0, 4.0)}


def test_family_presets_carry_their_papers_settings():
    dapo, dr_grpo, sapo = (_preset("algo", o) for o in ("dapo", "dr_grpo", "sapo"))
    assert dapo["options"] == {"aggregation": "token_mean"}
    cfg = compose_config(["algo=dapo"])  # DAPO's rollout options, set by its preset
    assert (cfg.rollout.dynamic_sampling, cfg.rollout.max_draws, cfg.rollout.overlong_buffer) == (True, 3, 0.2)
    assert (dr_grpo["adv_scale"], dr_grpo["options"]) == ("none", {"aggregation": "seq_mean_token_sum_norm"})
    assert (sapo["options"]["tau_pos"], sapo["options"]["tau_neg"]) == (1.0, 1.05)


def test_readme_lists_every_algorithm_preset():
    # The README's `algo=` row is the list users read first: it names exactly the presets (whose names the
    # registry is held to in tests/algos/test_algos_registry.py).
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `algo=` |"))
    assert re.findall(r"`([a-z_]+)`", row.split("|")[2]) == _options("algo")


SWEEPS = sorted(p.name for p in ROOT.joinpath("sweep").iterdir() if p.name.endswith(".yaml"))


@pytest.mark.parametrize("name", SWEEPS)
def test_sweep_preset_parses_and_names_real_options(name):
    text = ROOT.joinpath("sweep", name).read_text()
    assert text.lstrip().startswith("# @package _global_")
    params = OmegaConf.load(str(ROOT.joinpath("sweep", name))).hydra.sweeper.params
    assert params, f"{name} sweeps nothing"
    for key, values in params.items():
        choices = [v.strip() for v in str(values).split(",")]
        if key in GROUPS:
            assert set(choices) <= set(_options(key)), f"{name}: {key}={values}"
        else:
            overrides = [f"{key}={c}" for c in choices]
            for o in overrides:  # each value is a valid override of a schema key, within the preset
                compose_config([f"+sweep={name.removesuffix('.yaml')}", o])
    compose_config([f"+sweep={name.removesuffix('.yaml')}"])


def test_compare_sweep_is_grpo_and_gspo_over_three_seeds():
    # no GSPO-token arm: with one advantage per sequence it equals GSPO in value and gradient (issue 25)
    params = OmegaConf.load(str(ROOT.joinpath("sweep", "compare.yaml"))).hydra.sweeper.params
    assert {k: str(v).replace(" ", "") for k, v in params.items()} == {"algo": "grpo,gspo", "seed": "0,1,2"}
    cfg = compose_config(["+sweep=compare"])
    assert (cfg.train.steps, cfg.train.eval_every, cfg.task.eval_size, cfg.train.minibatches) == (20, 10, 128, 4)

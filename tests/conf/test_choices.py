"""Closed choices fail at compose time in one line (valid values, a suggestion for a near miss) without
loading torch, and every schema field carries the one-line doc that `gspo train --cfg` prints."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from gspo.conf import GspoError, compose_config
from gspo.conf.choice_check import choice_error
from gspo.conf.docs import annotated_yaml, key_docs


def test_choice_error_names_the_valid_values_and_the_near_miss():
    assert str(choice_error("algo.name", "gpso", ["grpo", "gspo", "gspo_token"])) == (
        "algo.name='gpso': use one of grpo, gspo, gspo_token (did you mean gspo?)")
    assert "did you mean" not in str(choice_error("rollout.engine", "sglang", ["hf", "vllm"]))


@pytest.mark.parametrize(("override", "words"), [
    (["algo.name=gpso"], ["grpo, gspo, gspo_token", "did you mean gspo?"]),
    (["algo.name=sapoo"], ["cispo, dapo, dppo_kl, dppo_tv, dr_grpo, dro, gdpo, gmpo, grpo, gspo, gspo_token, icepop, "
                           "luspo, maxrl, opsm, sapo, vespo", "did you mean sapo?"]),
    (["algo=grpo", "algo.options.aggregation=token_meen"], ["did you mean token_mean?"]),
    (["rollout.engine=vlm"], ["did you mean vllm?"]),
    (["algo.advantage=steps"], ["group, step, gdpo", "did you mean step?"]),
    (["train.precision=fp23"], ["did you mean fp32?"]),
    (["rollout.dtype=bfloat61"], ["did you mean bfloat16?"]),
])
def test_closed_choices_are_checked_at_compose(override, words):
    with pytest.raises(GspoError) as e:
        compose_config(override)
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


def test_an_option_of_another_algorithm_is_no_such_key():
    with pytest.raises(GspoError, match="algo.options.aggregation.*no such key"):
        compose_config(["algo=gspo", "algo.options.aggregation=token_mean"])


def test_compose_errors_do_not_load_torch():
    code = ("import sys\nfrom gspo.conf import GspoError, compose_config\n"
            "try:\n    compose_config(['algo.name=gpso'])\nexcept GspoError:\n    pass\n"
            "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_every_schema_field_has_a_doc():
    docs = key_docs()
    assert len(docs) > 80
    assert [k for k, v in docs.items() if not v] == []


def test_cfg_prints_each_key_with_its_doc_and_stays_yaml():
    cfg = compose_config(["algo=grpo"])
    text = annotated_yaml(cfg)
    assert "  minibatches: 4  # M updates per rollout batch" in text
    assert "  aggregation: seq_mean_token_mean" in text
    assert yaml.safe_load(text) == OmegaConf.to_container(cfg, resolve=True)


def test_gspo_train_cfg_shows_the_docs():
    from typer.testing import CliRunner

    from gspo.cli.main import app

    out = CliRunner().invoke(app, ["train", "--cfg", "algo=gspo_token_step"])
    assert out.exit_code == 0, out.output
    assert "advantage: step  # estimator:" in out.output

"""The step's context holds the config's nodes typed by the schema's dataclasses, not `Any`."""

from __future__ import annotations

import typing

from omegaconf import OmegaConf

from gspo.conf import compose_config
from gspo.conf.schema import AlgoConfig, RolloutConfig, TrainConfig
from gspo.trainer.step.context import StepContext
from tests.conftest import TINY


def test_the_step_context_holds_the_schemas_typed_nodes():
    hints = typing.get_type_hints(StepContext)
    assert (hints["algo"], hints["train"], hints["sampling"]) == (AlgoConfig, TrainConfig, RolloutConfig)
    ctx = StepContext.of(compose_config(TINY))
    for name in ("algo", "train", "sampling"):  # what a run hands the step is structured by those classes
        assert OmegaConf.get_type(getattr(ctx, name)) is hints[name], name
    assert not any(hint is typing.Any for hint in hints.values())

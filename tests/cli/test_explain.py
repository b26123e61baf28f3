"""`gspo explain`: the loss card of a config (trainer/step/explain.py), with the overrides of `gspo train`, loading no
model; the same card is each run's estimator.txt."""

from __future__ import annotations

from tests.conftest import LEARNING_SEED, TINY


def explain(gspo, *args: str) -> str:
    result = gspo.invoke("explain", *args)
    assert result.exit_code == 0, (result.exception, result.output)
    return result.output


def test_gspo_card_says_the_sequence_ratio_its_band_and_its_normaliser(gspo_env):
    from tests.conftest import Gspo

    out = explain(Gspo(gspo_env), "algo=gspo")
    assert "s_i = exp(1/|y_i| sum_t (logp_it - old_logp_it))" in out
    assert "clip(s_i, 0.9997, 1.0004)" in out and "aggregate  seq_mean: J = 1/N sum_i J_i" in out
    assert "16 prompts x 8 = 128 sequences, split into 4 minibatches of N = 32" in out
    assert "correction none" in out


def test_the_card_follows_every_override(gspo_env):
    from tests.conftest import Gspo

    g = Gspo(gspo_env)
    out = explain(g, "algo=dr_grpo", "train.minibatches=2", "train.micro_batch_size=16", "rollout.max_new_tokens=32")
    assert "A_i = r_i - mean_G over each group of G = 8 (no std division)" in out
    assert "1/N sum_i 1/L sum_t J_it  (N sequences; L = rollout.max_new_tokens = 32" in out
    assert "2 minibatches of N = 64" in out and "4 micro-batch(es) of 16 per minibatch" in out
    out = explain(g, "algo=gspo", "algo.correction.kind=tis", "algo.old_logp_source=engine", "train.minibatches=1")
    assert "correction tis at geometric level: c = sg(min(rho, 1.001))" in out and "on-policy" in out
    out = explain(g, "algo=cispo")
    assert "w_it = sg(clip(r_it, 0, 5))" in out and "TRL's epsilon_high=5 equals this clip_high=4" in out
    out = explain(g, "algo=dppo_tv")
    assert "keep_it = (p - q <= 0.15) if A_it > 0, (p - q >= -0.15) if A_it <= 0" in out
    out = explain(g, "algo=dapo")
    assert "token_mean: J = 1/T" in out and "overlong penalty over the last 0.2 of 64 tokens" in out
    assert "task rewards (correctness, unshaped) are all equal are dropped, up to 3 draws" in out


# The console script's path through `gspo explain`, in a fresh interpreter: the card of each config, then which of
# torch (its import run: torch._C) and transformers the command loaded.
_NO_TORCH_PROBE = """
import sys
from gspo.cli.entry import main
for args in ([], ["algo=dapo"], ["algo=cispo", "algo.correction.kind=tis", "algo.old_logp_source=engine",
             "rollout.dtype=bfloat16"], ["algo=gspo", "rollout.lag=1"]):
    sys.argv = ["gspo", "explain", *args]
    try:
        main()
    except SystemExit as e:
        assert not e.code, e.code
print([m for m in ("torch._C", "transformers") if m in sys.modules])
"""


def test_the_card_runs_no_torch_import(gspo_env):
    """The card needs the config and the registries' declarations, not a model: with a named engine and no Routing
    Replay, `gspo explain` loads neither torch nor transformers (21 s under load before; issue 60). rollout=auto's
    pick and Routing Replay's rules still load them, where the engines and the model's config are asked."""
    import subprocess
    import sys

    from tests.conftest import load_scaled

    out = subprocess.run([sys.executable, "-c", _NO_TORCH_PROBE], env=gspo_env, capture_output=True, text=True,
                         timeout=load_scaled(120), check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("estimator  ") == 4 and out.stdout.splitlines()[-1] == "[]", out.stdout[-2000:]


def test_a_bad_override_is_one_line(gspo_env):
    from tests.conftest import Gspo

    result = Gspo(gspo_env).subprocess("explain", "algo=gpso")
    assert result.returncode == 2 and "did you mean gspo" in result.stderr and "Traceback" not in result.stderr


def test_no_card_for_routing_replay_a_run_would_refuse(gspo_env):
    """Routing Replay's rules are preflight's (trainer/preflight.py), not the config's: explain asks them too."""
    from tests.conftest import Gspo

    result = Gspo(gspo_env).subprocess("explain", "algo.routing_replay=trainer")
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: algo.routing_replay=trainer needs a Mixture-of-Experts model and the "
                                     "embedded model is dense: use model=tiny-moe (or an MoE through model=hf)")
    assert "replay     routing replay" in explain(Gspo(gspo_env), "model=tiny-moe", "algo.routing_replay=trainer")


def test_each_run_writes_the_card_of_its_config(gspo, finished_run):
    card = explain(gspo, *TINY, f"seed={LEARNING_SEED}", "train.steps=2")
    assert (finished_run / "estimator.txt").read_text() == card


def test_every_algo_preset_has_a_card():
    from importlib import resources

    from gspo.conf import compose_config
    from gspo.trainer.step.explain import estimator_card

    presets = sorted(p.name.removesuffix(".yaml") for p in resources.files("gspo.conf").joinpath("algo").iterdir()
                     if p.name.endswith(".yaml"))
    for preset in presets:
        moe = ["model=tiny-moe"] if preset == "grpo_replay" else []  # Routing Replay needs an MoE model
        card = estimator_card(compose_config([f"algo={preset}", *moe]))
        assert card.startswith("estimator  ") and "objective  " in card and "{" not in card, preset

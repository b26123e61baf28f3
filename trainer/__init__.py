"""The trainer: rooms by job, each importing only the rooms below it (tests/test_layers.py holds the order).

    run < model < parallel < tasks < engines < step < the recipe (this folder's own modules)

run/       the run's records and watchdogs: run directory, loggers, progress bars, seeds, guards, collapse
model/     the model: loading, precision, LoRA adapters, the chunked log-prob forward
parallel/  processes and shards: data parallelism, FSDP, MoE routing shared across ranks
tasks/     training tasks: what a task is, the task registry, the code task
engines/   rollout engines: the Engine interface and its Capabilities, hf, vLLM, their registry, `Rollout`
step/      one training step: sampling, scoring, advantages, the update, metric reduction, its context
loop.py, evaluate.py, policy.py, coldstart.py, state.py, preflight.py (every pre-run check, one pass), assets.py
(the hub assets a config needs, for `gspo fetch` and the offline check): the recipe that composes the rooms into a run.

The trainer may import algos, conf and evals; only report/ and cli/ import the trainer.
"""

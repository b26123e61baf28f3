"""Rollout engines: the interface every engine implements and the capabilities the trainer asks instead of
an engine's name (base), what an engine returns (rollout: `Rollout`, its masks, the row sampler), the hf
engine (hf_engine), the vLLM engine (vllm_engine, importing vLLM only when used), the registry that builds
one from `rollout.engine` and checks what the config asks of it (registry), and where the loss's old
log-probs come from (logp_origin).

May import: algos, conf, evals; trainer.run, trainer.model, trainer.parallel, trainer.tasks."""

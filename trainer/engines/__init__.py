"""Rollout engines: what an engine returns (rollout: `Rollout`, its masks, the row sampler), the hf engine
(hf_engine), the vLLM engine (vllm_engine, importing vLLM only when used), picking one from `rollout.engine`
(registry), and where the loss's old log-probs come from (logp_origin).

May import: algos, conf, evals; trainer.run, trainer.model, trainer.parallel, trainer.tasks."""

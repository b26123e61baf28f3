"""Processes and shards: who this process is and the reductions across ranks (distributed), FSDP2 sharding
of the policy (fsdp), and MoE routing recorded, shared across ranks and replayed (moe).

May import: algos, conf, evals; trainer.run, trainer.model."""

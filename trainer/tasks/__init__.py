"""Training tasks: what a task is (task_types: items, drawing, rewards, step grades), the registry that
builds one from `cfg.task` (registry), and code as a task (code_task).

May import: algos, conf, evals; trainer.run, trainer.model, trainer.parallel."""

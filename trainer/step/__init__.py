"""One training step, the same for every algorithm: a batch sampled and graded (sampling), scored (scoring),
its advantages (advantages), the update's epochs and minibatches (update) and its guard against a non-finite value (undo), metrics reduced over micro-batches
and ranks (reduction), the context a step reads (context), and the loss card of the estimator it computes (explain).

May import: algos, conf, evals; trainer.run, trainer.model, trainer.parallel, trainer.tasks, trainer.engines."""

"""The project's words, each stated once: the closed choices of the config with their named values (choices.py),
the metric catalogue (metrics.py), how metrics reduce (reductions.py) and the algorithms gspo ships with the names their papers write (algorithms.py).

The bottom room: it imports only the standard library, so conf/ (which checks a config before torch loads),
algos/, evals/, trainer/ and report/ (which reads runs without torch) all read the same vocabulary. Code compares
a choice with its named value (`cfg.rollout.kv_cache == KvCache.STATIC`), never with a bare string.
"""

"""Graders: functions of a response and its gold, used by `gspo eval`, `gspo grade` and the training
reward alike. `math` (math-verify), `code` (programs run in gspo.evals.sandbox against tests) and
`codeforces` (CodeForces judging: checkers, interactive problems, CodeElo rating)."""

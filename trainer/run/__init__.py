"""The run's records and watchdogs: the run directory and its files (rundir), where metrics go (loggers),
progress bars, the seeds every draw derives from, the non-finite guards and the collapse detector.

May import: algos, conf, evals. No other room of the trainer (it is the lowest)."""

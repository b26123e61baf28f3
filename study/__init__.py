"""The experiment: what `gspo sweep` and `gspo compare` plan, launch, resume and decide, between report/ (which
reads runs) and cli/ (which parses and calls). This package's __init__ imports nothing, so the CLI loads only the
rooms a command needs (presets.py is torch-free; the sweep and its jobs load the trainer).

    presets.py   the compare presets (conf/sweep/*.yaml): names, swept keys, the default
    plan.py      the experiment's plan: arms, seeds, primary, stopping design, parsed once and registered in
                 <folder>/plan.json before the first run; arms provably equal under the config folded before anything
                 runs (the algorithm registry says which)
    launch.py    the launcher and resource policy: which launcher, how many jobs at once, torch threads per job
                 (a registry of policies: `register_policy`)
    watch.py     a launcher's workers watch the `gspo` process from birth and end with it, resumably
    eta.py       job i/N and the ETAs a sweep prints
    job.py       one Hydra job: its typed launch record (trainer/run/sweepdir.Launch), its job record, the run
    sweep.py     a sweep: its folder, plan and resume (sweep.json), the launch, the Hydra multirun
    until.py     an until=resolved experiment's record (sequential.json): design, looks, the page
    rounds.py    the rounds of until=resolved: seeds per round, a group-sequential look after each, the stopping
                 rules (a registry: `register_stop`)
    compare.py   `gspo compare`: a preset's sweep (or its rounds), then the Report the CLI prints

The sweep folder's format (sweep.json, launch.json, runs/<job>.json) is trainer/run/sweepdir.py's, read and
written there alone.

May import: algos, conf, evals, trainer, report.
"""

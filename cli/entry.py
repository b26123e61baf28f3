"""The `gspo` console script: a first line at once, then the command line proper (gspo.cli.main).

Importing torch, transformers, pandas and matplotlib takes 6-10 s on a small CPU and minutes under load (54 s at
load 3 and 3-5.5 min at load 15 on the 2-core VM, issue 60) before a command can print anything; a user at a terminal sees this module's line instead of a silent wait. Only
on a terminal: piped or captured output (scripts, tests) is exactly the command's own. This module
imports nothing heavy, and nothing of the project until the line is out.
"""

from __future__ import annotations

import sys

SLOW = ("train", "sweep", "compare", "report", "eval", "grade", "export-hf", "fetch")  # commands that import torch or pandas
HELP = ("--help", "-h", "--cfg", "--info")


def first_line(argv: list[str]) -> str | None:
    """What to say at once for `gspo argv...` (None: nothing, e.g. no command, or help)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in SLOW or any(a in HELP for a in argv):
        return None
    if command == "report":  # no torch
        return f"gspo {command}: starting (loading pandas and matplotlib takes a few seconds)"
    return f"gspo {command}: starting (loading torch and its libraries: seconds on a quiet machine, minutes on a busy one)"


def main() -> None:
    """A Ctrl-C while the libraries load (the first seconds of every command) is one line and exit 130, as one
    during the command is (gspo.cli.main.main): never an import's traceback, nor that of an error it caused."""
    try:
        line = first_line(sys.argv[1:])
        if line and sys.stderr.isatty():
            print(line, file=sys.stderr, flush=True)
        from gspo.conf.errors import sigint_seen, watch_sigint  # light: before torch and transformers
    except KeyboardInterrupt:
        _loading_interrupted()
    watch_sigint()
    try:
        from gspo.cli.main import main as run
    except KeyboardInterrupt:
        _loading_interrupted()
    except Exception:
        if not sigint_seen():
            raise
        _loading_interrupted()
    run()


def _loading_interrupted() -> None:
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
    print(f"interrupted: gspo {command} stopped while loading its libraries; nothing was written".replace("  ", " "),
          file=sys.stderr, flush=True)
    sys.exit(130)

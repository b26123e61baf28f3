"""`user_errors`: a command function run inside `one_line_errors` (conf/errors.py, the one place a user error
becomes one line), for the commands a CliRunner also calls directly."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from gspo.conf.errors import one_line_errors

F = TypeVar("F", bound=Callable)


def user_errors(fn: F) -> F:
    """`one_line_errors` around a command function."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with one_line_errors():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]

"""Math answer grading with math-verify: the one grader behind AIME evals and math training rewards.

The response's answer is taken only from a \\boxed{} or a final-answer phrase ("The answer is 42",
"Final answer: 42", "**Answer:** 42"), never from the last number in the text: a response with no
such answer is wrong, not a lucky guess. The gold is parsed leniently (a bare "x^2+1" or "204", or a
full solution with a \\boxed{}). Equivalence (1/2 == 0.5 == \\frac{1}{2}, LaTeX forms, sets) is
math-verify's.

math-verify bounds parse/verify time with signal.alarm, which only works on the main thread. On the
main thread we call it directly with its timeouts; off the main thread (a reward computed in a worker
thread) the call is shipped to a small pool of spawned processes, where it runs on *their* main thread
with the same timeouts, behind an outer timeout that kills a stuck worker. If no process can be
started (a daemonic process may not have children) the call runs in-thread with timeouts disabled.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
from collections.abc import Sequence
from multiprocessing.pool import Pool

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException

TIMEOUT_S = 5  # math-verify's own limit for each parse and for verify, seconds
_OUTER_TIMEOUT_S = 4 * TIMEOUT_S + 10  # up to three parses and one verify, plus a worker's first import

# Answer extraction from the response: anchored only (boxed first, then "answer is"/"answer:" phrases).
_RESPONSE_CONFIG = (
    LatexExtractionConfig(try_extract_without_anchor=False, boxed_match_priority=0),
    ExprExtractionConfig(try_extract_without_anchor=False),
)


def grade_math(response: str, gold: str) -> bool:
    """Whether the response's final answer equals the gold answer.

    >>> grade_math("Adding the two times gives \\\\boxed{204}.", "204")
    True
    >>> grade_math("The answer is 204.", "204")
    True
    >>> grade_math("So the final answer is $0.5$.", "\\\\frac{1}{2}")
    True
    >>> grade_math("The answer is 205.", "204")
    False
    >>> grade_math("I could not finish; maybe 204 apples?", "204")
    False
    """
    if not isinstance(response, str) or not response.strip() or gold is None or not str(gold).strip():
        return False
    if threading.current_thread() is threading.main_thread():
        return _verify(response, str(gold), TIMEOUT_S)
    return _OFF_MAIN_THREAD.grade(response, str(gold))


def math_reward(response: str, gold: str) -> float:
    """Training reward: 1.0 if grade_math says correct, else 0.0.

    >>> math_reward("\\\\boxed{\\\\dfrac{3}{4}}", "0.75")
    1.0
    >>> math_reward("", "0.75")
    0.0
    """
    return 1.0 if grade_math(response, gold) else 0.0


def grade_math_batch(responses: Sequence[str], golds: Sequence[str], *, workers: int = 1) -> list[bool]:
    """grade_math over pairs; workers > 1 grades in that many spawned processes (main-thread timeouts)."""
    if workers <= 1 or len(responses) <= 1:
        return [grade_math(r, g) for r, g in zip(responses, golds, strict=True)]
    args = [(r, "" if g is None else str(g), TIMEOUT_S) for r, g in zip(responses, golds, strict=True)]
    try:
        pool = multiprocessing.get_context("spawn").Pool(min(workers, len(args)))
    except (AssertionError, OSError):  # a daemonic process may not have children
        return [grade_math(r, g) for r, g, _ in args]
    with pool:
        return pool.starmap(_verify_nonempty, args)


def _parse_gold(gold: str, timeout_s: int | None) -> list:
    # A bare answer ("x^2+1") is only found inside math delimiters; a solution text carries its own.
    if "\\boxed" in gold or "$" in gold:
        return parse(gold, parsing_timeout=timeout_s)
    return parse(f"${gold}$", parsing_timeout=timeout_s) or parse(gold, parsing_timeout=timeout_s)


def _verify(response: str, gold: str, timeout_s: int | None) -> bool:
    """parse + verify with the given math-verify timeout (None disables it); any failure is False."""
    try:
        gold_parsed = _parse_gold(gold, timeout_s)
        answer = parse(response, _RESPONSE_CONFIG, fallback_mode="no_fallback", parsing_timeout=timeout_s)
        if not gold_parsed or not answer:
            return False
        return bool(verify(gold_parsed, answer, timeout_seconds=timeout_s))
    except (Exception, TimeoutException):
        return False


def _verify_nonempty(response: str, gold: str, timeout_s: int | None) -> bool:
    if not isinstance(response, str) or not response.strip() or not gold.strip():
        return False
    return _verify(response, gold, timeout_s)


class _MainThreadWorkers:
    """Spawned processes that run _verify on their main thread, so math-verify's alarms work there.

    Created on first use. A call that outlives the outer timeout (a C-level hang no alarm can break)
    is wrong, and the pool is terminated and rebuilt on the next call.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._pool: Pool | None = None
        self._unavailable = False

    def grade(self, response: str, gold: str) -> bool:
        pool = self._get_pool()
        if pool is None:
            return _verify(response, gold, None)
        try:
            return pool.apply_async(_verify, (response, gold, TIMEOUT_S)).get(_OUTER_TIMEOUT_S)
        except multiprocessing.TimeoutError:
            self._discard(pool)
            return False
        except Exception:
            return False

    def _get_pool(self) -> Pool | None:
        with self._lock:
            if self._pool is None and not self._unavailable:
                try:
                    self._pool = multiprocessing.get_context("spawn").Pool(self._size)
                    atexit.register(self._pool.terminate)
                except (AssertionError, OSError):  # daemonic process, or no processes left
                    self._unavailable = True
            return self._pool

    def _discard(self, pool: Pool) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.terminate()


_OFF_MAIN_THREAD = _MainThreadWorkers(size=min(4, os.cpu_count() or 1))

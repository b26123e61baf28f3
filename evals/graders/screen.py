"""What a program's output must pass before a checker sees it: values a checker would read as NaN or an
infinity, and output a checker may not check at all (issue 46).

A checker is arbitrary code: one that rejects `abs(a - b) > eps` passes NaN (every NaN comparison is
false), one that accepts `abs(a - b) <= eps * max(1, |a|, |b|)` passes an infinity (inf <= inf), and one
that zips the expected and the given numbers checks nothing of an empty or short output. So the output
is read here the ways a checker reads it, by value, not by word:
- every token a checker may parse as a number: split on whitespace AND on the punctuation of JSON, CSV and
  Python lists (a run of letters, digits, "_", ".", "+", "-"), parsed with float() (Unicode digits,
  underscores and exponents included: "1e309", "-1e309", 400 nines, "1e999999" are infinities to float())
  and with decimal.Decimal ("sNaN"); NaN or an infinity is a wrong answer. A plain integer that overflows a
  float (400 nines) is allowed only where the expected answer has one too (big-integer problems);
- an output with no token where one is expected;
- where the expected answer holds a real number (a tolerance problem), a whitespace token count other than
  the expected answer's. Where every expected token is an integer or a word, the count is left to the
  checker: a path, a set or a construction of any valid length is what checkers exist for.
Streamed: only tokens shaped like a non-finite number (nan, inf, an exponent, 300 digits or more) are
parsed, and counting stops one past the expected count, so the screen holds no list of the output's tokens
(a token at a time: at most one token's copy, 4 bytes a character at worst). Its cost on a hostile 16 MiB
output is a few seconds of the grader's CPU (Python's re tries every position), none on ordinary output.
"""

from __future__ import annotations

import decimal
import math
import re
from collections.abc import Iterator

# a token as a checker splitting on punctuation sees it (a maximal run of \\w . + -), when it has the shape of a
# number float() or Decimal could read as non-finite: nan, snan, inf, infinity, an exponent, or a plain
# number long enough to overflow a float (1.8e308: 309 digits)
# (the mantissa matched once, atomically through a lookahead and a back-reference, so a 16 MiB run of
# digits is read in linear time, not backtracked over)
_CANDIDATE = re.compile(r"(?<![\w.+-])[+-]?(?:s?nan\d*|inf(?:inity)?|(?=[\d_.]*\d)(?=([\d_.]+))\1e[+-]?[\d_]+"
                        r"|(?=[\d_.]{300})[\d_.]+)(?![\w.+-])", re.IGNORECASE)
_LONG_DIGITS = re.compile(r"[\d_.]{300}")
_INTEGER = re.compile(r"[+-]?\d[\d_]*")
_WHITESPACE_TOKEN = re.compile(r"\S+")


def screen_for_checker(output: str, expected: str) -> str | None:
    """Why `output` must not reach a checker for `expected` (a wrong answer), or None.

    >>> screen_for_checker("[NaN, NaN]", "0.5 0.5"), screen_for_checker("1e309", "2.333333333")
    ("non-finite number 'NaN' in the output", "non-finite number '1e309' in the output")
    >>> screen_for_checker("0.5 infinite", "0.5 x") is None
    True
    """
    if _WHITESPACE_TOKEN.search(expected) and not _WHITESPACE_TOKEN.search(output):
        return "empty output"
    big_ok = any(_non_finite(m.group()) == "overflow" for m in _CANDIDATE.finditer(expected))
    for match in _candidates(output):
        kind = _non_finite(match.group())
        if kind == "non_finite" or (kind == "overflow" and not big_ok):
            return f"non-finite number {match.group()[:20]!r} in the output"
    want = _WHITESPACE_TOKEN.findall(expected)  # the expected answer is the problem's, not the program's
    if any(_is_real(token) for token in want):
        got = _count_up_to(output, len(want) + 1)
        if got != len(want):
            return f"{got if got <= len(want) else 'more'} tokens for an answer of {len(want)}"
    return None


def _candidates(text: str) -> Iterator[re.Match]:
    """_CANDIDATE's matches; none without a letter of nan, inf or an exponent and without a long number
    (str's own search is ~100 times faster than the regex's, which tries every position)."""
    if any(letter in text for letter in "nNiIeE") or _LONG_DIGITS.search(text):
        yield from _CANDIDATE.finditer(text)


def _non_finite(token: str) -> str | None:
    """"overflow" for a plain integer that float() makes infinite, "non_finite" for any other NaN or
    infinity (float's or Decimal's reading), else None."""
    try:
        value = float(token)
    except (ValueError, OverflowError):
        try:
            return "non_finite" if not decimal.Decimal(token).is_finite() else None
        except (decimal.InvalidOperation, ValueError):
            return None
    if math.isfinite(value):
        return None
    return "overflow" if _INTEGER.fullmatch(token) else "non_finite"


def _is_real(token: str) -> bool:
    """A finite number that is not a plain integer ("2.5", "1e-9")."""
    try:
        return math.isfinite(float(token)) and not _INTEGER.fullmatch(token)
    except ValueError:
        return False


def _count_up_to(text: str, cap: int) -> int:
    """Whitespace tokens of `text`, counted up to `cap`."""
    n = 0
    for _ in _WHITESPACE_TOKEN.finditer(text):
        n += 1
        if n >= cap:
            break
    return n

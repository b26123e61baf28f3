"""What a program's output must pass before a checker sees it: values a checker would read as NaN or an
infinity, and output a checker may not check at all (issues 46 and 58).

A checker is arbitrary code: one that rejects `abs(a - b) > eps` passes NaN (every NaN comparison is
false), one that accepts `abs(a - b) <= eps * max(1, |a|, |b|)` passes an infinity (inf <= inf), and one
that zips the expected and the given numbers checks nothing of an empty or short output, or of `[]`. So the
output is read here the ways a checker reads it, by value, not by word, whatever separates the numbers
(whitespace, JSON, CSV, brackets): a token is a maximal run of letters, digits, "_", ".", "+" and "-".
- a token float() or decimal.Decimal reads as NaN or an infinity ("1e309", "-1e309", 400 nines, "1e999999",
  "[NaN, NaN]", "nan,nan", "sNaN") is a wrong answer; a plain integer that overflows a float (400 nines) is
  allowed only where the expected answer has one too (big-integer problems);
- an output with no token where one is expected;
- the count rule, on number tokens (what float() reads: "[2.5,3.5]" holds two, "2.5 3.5" too): where the
  expected answer holds a real number (a tolerance problem), as many numbers as it holds; where it holds only
  integers (and words), at least one number (a path or a construction of any valid length is what checkers
  exist for, but `[]` or "" is no answer to a numeric question).
Linear time: every pattern starts only at a token's first character (a look-behind refuses the others in one
step) and backtracks only within that token, so a pass costs a bounded number of steps per byte whatever the
shape (before issue 58 a look-ahead for 300 digits tried every position: 16 MiB of runs of 299 dots cost
39.6 s); counting stops one past the expected count. The screen runs inside the checker's sandboxed job
(`checker_program`), under that job's CPU and memory limits, never in the grader's process.
Checkers parse, never eval: in that job the checker's `eval` reads a Python literal only
(ast.literal_eval: the answer as data), and its `exec` and `compile` refuse.
This module is shipped into the sandbox as source: the stdlib only.
"""

from __future__ import annotations

import decimal
import math
import re

_T = r"[\w.+-]"  # a token's characters, as a checker splitting on punctuation sees them
# Each pattern starts with one character class, so re skips the characters outside it in C without entering
# the matcher; a look-behind over that character and the one before it then refuses a start inside a token in
# one step, and what follows backtracks only within the token it started on.
_FIRST = rf"[+\-.\d](?<!{_T}.)"  # the first character of a number token
_MANTISSA = r"(?:(?<=[+-])(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)|(?<=\d)[\d_]*(?:\.[\d_]*)?|(?<=\.)\d[\d_]*)"
_END = rf"(?!{_T})"
# a number float() reads, finite or not (underscores anywhere between digits: a loose reading)
_NUMBER = re.compile(rf"{_FIRST}{_MANTISSA}(?:[eE][+-]?\d[\d_]*)?{_END}")
# the tokens float() or Decimal could read as non-finite: a number with an exponent, a plain number long enough
# to overflow a float (1.8e308: 309 digits), nan, snan (with digits), inf, infinity
_CANDIDATES = (re.compile(rf"{_FIRST}{_MANTISSA}[eE][+-]?\d[\d_]*{_END}"),
               re.compile(rf"{_FIRST}(?=[\d_.]{{299}}){_MANTISSA}{_END}"),
               re.compile(rf"[+\-sni](?<!{_T}.)(?:(?<=[+-])(?:s?nan\d*|inf(?:inity)?)|(?<=s)nan\d*|(?<=n)an\d*"
                          rf"|(?<=i)nf(?:inity)?){_END}", re.IGNORECASE))
_INTEGER = re.compile(r"[+-]?\d[\d_]*")
_WHITESPACE_TOKEN = re.compile(r"\S+")


def screen_for_checker(output: str, expected: str) -> str | None:
    """Why `output` must not reach a checker for `expected` (a wrong answer), or None.

    >>> screen_for_checker("[NaN, NaN]", "0.5 0.5"), screen_for_checker("[]", "[1, 2]")
    ("non-finite number 'NaN' in the output", 'no number for an answer of 2 numbers')
    >>> screen_for_checker("0.5 infinite", "0.5 x") is None, screen_for_checker("[2.5,3.5]", "2.5 3.5") is None
    (True, True)
    """
    if _WHITESPACE_TOKEN.search(expected) and not _WHITESPACE_TOKEN.search(output):
        return "empty output"
    big_ok = any(_non_finite(m.group()) == "overflow" for m in _candidates(expected))
    for match in _candidates(output):
        kind = _non_finite(match.group())
        if kind == "non_finite" or (kind == "overflow" and not big_ok):
            return f"non-finite number {match.group()[:20]!r} in the output"
    want = [m.group() for m in _NUMBER.finditer(expected)]  # the expected answer is the problem's, not the program's
    if any(not _INTEGER.fullmatch(token) for token in want):
        got = _count_up_to(output, len(want) + 1)
        if got != len(want):
            return f"{got if got <= len(want) else 'more'} numbers for an answer of {len(want)}"
    elif want and not _NUMBER.search(output):
        return f"no number for an answer of {len(want)} numbers"
    return None


def _candidates(text: str):
    """The tokens of `text` shaped like a non-finite number, one pattern after another."""
    for pattern in _CANDIDATES:
        yield from pattern.finditer(text)


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


def _count_up_to(text: str, cap: int) -> int:
    """Number tokens of `text`, counted up to `cap`."""
    n = 0
    for _ in _NUMBER.finditer(text):
        n += 1
        if n >= cap:
            break
    return n


# The checker's job: this module's source, the screen on the job's files, then the checker with `eval` for
# data only. A refusal is exit status 3 and a line starting with the job's nonce (which the answer, data in a
# file, never sees).
_CHECKER_MAIN = '''
def _gspo_checker_builtins():
    import ast
    import builtins

    def literal_eval(source, *_, **__):  # checkers parse, never eval: the answer as data only
        return ast.literal_eval(source.decode() if isinstance(source, bytes) else source)

    def refused(*_, **__):
        raise PermissionError("checkers parse, never exec or compile (the answer is data)")

    return {**vars(builtins), "eval": literal_eval, "exec": refused, "compile": refused}


def _gspo_screen_then_check(nonce, checker):
    import sys

    with open(sys.argv[3], encoding="utf-8", errors="replace") as f:
        output = f.read()
    with open(sys.argv[2], encoding="utf-8", errors="replace") as f:
        why = screen_for_checker(output, f.read())
    del output
    if why is not None:
        sys.stdout.write(f"{nonce} {why}\\n")
        sys.stdout.flush()
        sys.exit(3)
    code = compile(checker, "checker.py", "exec")
    exec(code, {"__name__": "__main__", "__file__": "checker.py", "__builtins__": _gspo_checker_builtins()})
'''
REFUSED_STATUS = 3


def checker_program(checker: str, nonce: str) -> str:
    """The source of a checker's sandboxed job: the screen (this module, stdlib only) on input.txt,
    correct_output.txt and solution_output.txt (argv 1-3), then `checker` with the answer as data only;
    a refusal exits REFUSED_STATUS with a first line `nonce reason`."""
    import inspect
    import sys

    return (inspect.getsource(sys.modules[__name__]) + _CHECKER_MAIN
            + f"\n_gspo_screen_then_check({nonce!r}, {checker!r})\n")

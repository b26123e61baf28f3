"""The screen before a checker (issue 46): values, not words. The two checker shapes below are common ones
that a hostile output fools; each literal is first shown to fool one of them (so the test can fail), then
refused by the screen. The sandboxed end-to-end runs are in test_sandbox_attacks.py."""

from __future__ import annotations

import re

import pytest

from gspo.evals.graders.screen import screen_for_checker

# Tolerance against the larger of the two values (the "absolute or relative error" checker): inf <= inf.
TOLERANCE = """import re, sys
read = lambda p: [float(x) for x in re.split(r"[\\s,\\[\\]]+", open(p).read()) if x]
want, got = read(sys.argv[2]), read(sys.argv[3])
print(1 if len(got) == len(want) and all(abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b)) for a, b in zip(got, want)) else 0)
"""
# Reject on any error over eps, pairs from zip(): NaN is never "> eps", and zip() checks nothing it does not pair.
ZIP = """import re, sys
read = lambda p: [float(x) for x in re.split(r"[\\s,\\[\\]]+", open(p).read()) if x]
want, got = read(sys.argv[2]), read(sys.argv[3])
print(0 if any(abs(a - b) > 1e-6 * max(1.0, abs(b)) for a, b in zip(got, want)) else 1)
"""
WANT = "2.333333333"
INFINITE = ["1e309", "-1e309", "9" * 400, "1e999999"]
NAN = ["[NaN, NaN]", "nan,nan"]


def checker_says(checker: str, output: str, expected: str, tmp_path) -> str:
    """The checker's reply run in this process (as the sandbox runs it: argv input, answer, output)."""
    files = [tmp_path / name for name in ("in", "ans", "out")]
    for path, text in zip(files, ("", expected, output), strict=True):
        path.write_text(text)
    import contextlib
    import io
    import sys
    buf, argv = io.StringIO(), sys.argv
    sys.argv = ["checker.py", *map(str, files)]
    try:
        with contextlib.redirect_stdout(buf):
            exec(checker, {"__name__": "__main__"})
    finally:
        sys.argv = argv
    return buf.getvalue().strip()


@pytest.mark.parametrize("literal", INFINITE)
def test_infinities_to_float_are_refused(literal, tmp_path):
    assert checker_says(TOLERANCE, literal, WANT, tmp_path) == "1"  # fooled: inf <= 1e-6 * inf
    assert screen_for_checker(literal, WANT) == f"non-finite number {literal[:20]!r} in the output"


@pytest.mark.parametrize("literal", NAN)
def test_nan_split_on_punctuation_is_refused(literal, tmp_path):
    assert checker_says(ZIP, literal, f"{WANT} {WANT}", tmp_path) == "1"  # fooled: nan > eps is false
    refused = screen_for_checker(literal, f"{WANT} {WANT}")
    assert refused is not None and refused.startswith("non-finite number") and "an" in refused.lower()


@pytest.mark.parametrize("output, why", [("", "empty output"), ("  \n", "empty output"),
                                         (WANT, "1 numbers for an answer of 2"),
                                         (f"{WANT} 1.5 7", "more numbers for an answer of 2")])
def test_empty_or_short_output_never_reaches_a_zip_checker(output, why, tmp_path):
    assert checker_says(ZIP, output, f"{WANT} 1.5", tmp_path) == "1"  # fooled: zip() pairs nothing or one
    assert screen_for_checker(output, f"{WANT} 1.5") == why


def test_what_a_checker_must_judge_itself_passes():
    """Finite values, words that start like inf or nan, big integers where the answer is one, and, where the
    answer is integers or words, any count (a path or a construction of any valid length)."""
    assert screen_for_checker("2.3333333 1.5", f"{WANT} 1.5") is None
    assert screen_for_checker("YES infinite nancy 1e5 1.5e-300", "YES x y 1 2") is None
    assert screen_for_checker("9" * 400, "8" * 401) is None  # a big-integer problem
    assert screen_for_checker("1e309", "8" * 401) is not None  # still no infinity with an exponent
    assert screen_for_checker("3\n1 5 4", "4\n1 2 3 4") is None
    assert screen_for_checker("", "") is None


def test_unicode_digits_underscores_and_snan_are_read_as_float_and_decimal_read_them():
    for literal in ("\uff11e309", "1_0e3_09", "sNaN", "-Infinity", "NaN123", "+inf"):
        assert float(literal) if not re.search("snan|nan1", literal, re.I) else True  # they do parse
        assert screen_for_checker(literal, WANT) is not None, literal


# A zip() checker over JSON or CSV: it parses the numbers whatever separates them (issue 58: the count rule
# looked at whitespace tokens only, so "[]" or "[2.5]" passed it).
JSON_ZIP = """import json, sys
want, got = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
print(0 if any(abs(a - b) > 1e-6 for a, b in zip(got, want)) else 1)
"""


@pytest.mark.parametrize("output, expected, why", [
    ("[]", "[2.5, 3.5]", "0 numbers for an answer of 2"), ("[2.5]", "[2.5,3.5]", "1 numbers for an answer of 2"),
    ("[]", "[1, 2, 3]", "no number for an answer of 3 numbers"), ("[2.5,3.5,9]", "[2.5, 3.5]", "more numbers for an answer of 2")])
def test_json_and_csv_answers_are_counted_by_their_numbers(output, expected, why, tmp_path):
    assert checker_says(JSON_ZIP, output, expected, tmp_path) == "1"  # fooled: zip() pairs nothing or too few
    assert screen_for_checker(output, expected) == why
    csv = output.strip("[]")  # the same numbers as CSV: refused too ("" as empty)
    assert screen_for_checker(csv, expected.strip("[]")) == (why if csv else "empty output")


def test_numbers_in_any_layout_pass_the_count():
    assert screen_for_checker("[2.5,3.5]", "2.5 3.5") is None
    assert screen_for_checker("2.5, 3.5\n", "[2.5, 3.5]") is None
    assert screen_for_checker("[1]", "[1, 2, 3]") is None  # integers: any length, the checker judges


def test_the_screen_takes_linear_time_whatever_the_shape():
    """Runs of 299 dots or digits cost a look-ahead of 300 characters at every position (issue 58: 45 s of the
    grader's CPU on 16 MiB, against 0.8 s for control bytes); now each pattern starts only on a token's first
    character, so no shape costs much more per byte than bytes no pattern looks at."""
    import time

    def cpu(unit: str) -> float:
        text = (unit * ((1 << 20) // len(unit) + 1))[:1 << 20]
        started = time.process_time()
        screen_for_checker(text, "2.5 3.5")
        return time.process_time() - started

    control = min(cpu("\x01") for _ in range(2))
    for unit in ("." * 299 + " ", "9" * 299 + " ", "1e1", "e "):
        assert cpu(unit) < 6 * control + 0.05, (unit[:5], cpu(unit), control)

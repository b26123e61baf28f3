"""The embedded task: multi-digit arithmetic with a worked, digit-by-digit scratchpad.

It exists so that `gspo train` learns something real on a laptop with no GPU and no network: problems
are generated from a seed, the reward is exact, and every answer needs a worked response of 30+ tokens
(one scratchpad step per digit), so token-level importance-weight noise has room to accumulate, which is
the regime where GRPO and GSPO differ.

Format (the same text is used for the cold-start fine-tune, for RL and for eval)::

    prompt:    "4821+3967="
    response:  "1+7+0=08|2+6+0=08|8+9+0=17|4+3+1=08|#8788"  then end-of-sequence

    prompt:    "482*7="
    response:  "2*7+0=14|8*7+1=57|4*7+5=33|#3374"

Each step ``x?y+c=ds`` writes the two-digit partial result: its first digit is the carry into the next
step, its second the answer digit. The answer after ``#`` is the answer digits read back in reverse;
with a final carry it gains a leading digit. Grading reads the integer after the last ``#`` only.

>>> p = ArithProblem(4821, 3967, "+")
>>> p.prompt
'4821+3967='
>>> p.solution
'1+7+0=08|2+6+0=08|8+9+0=17|4+3+1=08|#8788'
>>> grade_arith(p.solution, p.gold)
True
>>> grade_arith("1+7+0=08|#8789", "8788"), grade_arith("no answer", "8788")
(False, False)
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass

from gspo.conf.errors import GspoError

#: Every character the task's text can contain; the embedded tokenizer is built from this.
ALPHABET = "0123456789+*=|#"
ANSWER_MARK = "#"
_ANSWER_RE = re.compile(r"#(\d+)")


@dataclass(frozen=True)
class ArithProblem:
    a: int
    b: int
    op: str  # "+" (a + b) or "*" (a times the single digit b)

    @property
    def prompt(self) -> str:
        return f"{self.a}{self.op}{self.b}="

    @property
    def gold(self) -> str:
        return str(self.a + self.b if self.op == "+" else self.a * self.b)

    @property
    def solution(self) -> str:
        """The worked response, least significant digit first."""
        da = str(self.a)[::-1]
        steps, carry = [], 0
        if self.op == "+":
            db = str(self.b)[::-1]
            for i in range(max(len(da), len(db))):
                x = int(da[i]) if i < len(da) else 0
                y = int(db[i]) if i < len(db) else 0
                s = x + y + carry
                steps.append(f"{x}+{y}+{carry}={s:02d}")
                carry = s // 10
        else:
            for ch in da:
                s = int(ch) * self.b + carry
                steps.append(f"{ch}*{self.b}+{carry}={s:02d}")
                carry = s // 10
        return "|".join(steps) + "|" + ANSWER_MARK + self.gold


def extract_answer(response: str) -> str | None:
    """The integer after the last ``#`` in a response, or None when there is none."""
    found = _ANSWER_RE.findall(response)
    return found[-1] if found else None


def grade_arith(response: str, gold: str) -> bool:
    """Exact reward: the answer after the last ``#`` equals the gold integer."""
    answer = extract_answer(response)
    return answer is not None and int(answer) == int(gold)


_PROMPT_RE = re.compile(r"(\d+)([+*])(\d+)=")


def parse_prompt(prompt: str) -> ArithProblem:
    """The problem a prompt states ("4821+3967=" -> ArithProblem(4821, 3967, "+"))."""
    found = _PROMPT_RE.fullmatch(prompt)
    if found is None:
        raise ValueError(f"not an arith prompt: {prompt!r}")
    return ArithProblem(int(found[1]), int(found[3]), found[2])


def grade_steps(prompt: str, response: str) -> list[tuple[int, float]]:
    """Each worked step of `response` graded on its own: (end, reward) per step, `end` the index just past
    the step's last character (its ``|``, or the end of the response for the last part).

    Step k of the scratchpad (the text before the last ``#``, split at ``|``) is right (1.0) when it
    equals step k of the worked solution; the answer part (from the last ``#``) is right when the answer
    is (`grade_arith`); extra or missing steps are wrong.

    >>> grade_steps("48+39=", "8+9+0=17|4+3+1=07|#77")
    [(9, 1.0), (18, 0.0), (21, 0.0)]
    >>> grade_steps("48+39=", "8+9+0=17|4+3+1=08|#87")
    [(9, 1.0), (18, 1.0), (21, 1.0)]
    """
    problem = parse_prompt(prompt)
    gold_steps = problem.solution.split("|")[:-1]
    mark = response.rfind(ANSWER_MARK)
    body = response if mark < 0 else response[:mark]
    out, start = [], 0
    for k, part in enumerate(body.split("|")):
        if part:  # the step runs through its '|'
            out.append((min(start + len(part) + 1, len(body)), float(k < len(gold_steps) and part == gold_steps[k])))
        start += len(part) + 1
    if mark >= 0:
        out.append((len(response), float(grade_arith(response, problem.gold))))
    return out or [(len(response), 0.0)]


def sample_problem(rng: random.Random, *, min_digits: int, max_digits: int, ops: str) -> ArithProblem:
    """One problem; addition takes two numbers of min..max digits, multiplication one and a digit 2..9."""
    op = rng.choice(ops)

    def number() -> int:
        n = rng.randint(min_digits, max_digits)
        return rng.randint(10 ** (n - 1), 10**n - 1)

    if op == "+":
        return ArithProblem(number(), number(), "+")
    return ArithProblem(number(), rng.randint(2, 9), "*")


def make_split(
    split: str, n: int, *, seed: int, min_digits: int, max_digits: int, ops: str
) -> list[ArithProblem]:
    """A deterministic list of ``n`` distinct problems (when the space allows) for a split.

    A problem belongs to the held-out split when a hash of its prompt falls in one bucket of ten, so no
    "test" problem can ever appear in "sft" or "train" whatever the sizes asked for; "sft" and "train"
    draw from different streams of the seed."""
    if not ops or set(ops) - {"+", "*"}:
        raise GspoError(f"arith task: ops must be made of '+' and '*', got {ops!r}")
    if not 1 <= min_digits <= max_digits:
        raise GspoError(f"arith task: need 1 <= min_digits <= max_digits, got {min_digits}..{max_digits}")
    want_test = split == "test"
    pool = split_pool(min_digits, max_digits, ops, test=want_test)
    if n > pool:
        raise GspoError(f"task.eval_size={n}: the arith task's held-out split with {min_digits}..{max_digits} digits "
                        f"and ops {ops!r} holds {pool} distinct problems; ask for at most that many" if want_test else
                        f"arith task: cannot draw {n} distinct {split} problems from the {pool} there are")
    rng = random.Random(f"{seed}:{split}")
    out: list[ArithProblem] = []
    seen: set[ArithProblem] = set()
    for _ in range(200 * n):
        p = sample_problem(rng, min_digits=min_digits, max_digits=max_digits, ops=ops)
        if is_held_out(p) != want_test or p in seen:
            continue
        seen.add(p)
        out.append(p)
        if len(out) == n:
            return out
    raise GspoError(f"arith task: cannot draw {n} distinct {split} problems with {min_digits}..{max_digits} digits")


_COUNTED = 300_000  # problem spaces up to this size are counted one by one (a fraction of a second); larger ones estimated


def split_pool(min_digits: int, max_digits: int, ops: str, *, test: bool) -> int:
    """How many distinct problems the held-out split (`test`) or the others hold: counted where the space is
    small, else nine tenths of the hash's share (the share of a bucket of ten is within a percent of a tenth
    there), so asking for more fails at once rather than after 200 draws per problem."""
    numbers = range(10 ** (min_digits - 1), 10**max_digits)
    space = len(numbers) ** 2 * ("+" in ops) + len(numbers) * 8 * ("*" in ops)
    if space > _COUNTED:
        tenth = space // 10
        return int(0.9 * tenth) if test else space - int(1.1 * tenth)
    problems = [ArithProblem(a, b, op) for op in sorted(set(ops)) for a in numbers
                for b in (numbers if op == "+" else range(2, 10))]
    held = sum(map(is_held_out, problems))
    return held if test else len(problems) - held


def is_held_out(problem: ArithProblem) -> bool:
    return zlib.crc32(problem.prompt.encode()) % 10 == 0

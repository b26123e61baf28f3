"""Benchmark (CPU): the rows of issue 58 that need a number, each with the figure its defence changes.

  screen    the answer screen's CPU on 16 MiB shapes (runs of 299 dots, "e " pairs, long digit runs, short
            numbers, ...), called in this process, and the grader process's own CPU while run_code sends the
            worst shape to a checker (before: the screen ran in the grader's thread, holding the GIL)
  memory    the grader's peak memory growth (VmHWM, reset through /proc/self/clear_refs after a warm-up, in a
            fresh process per row) for 16 MiB of ASCII, astral and invalid-UTF-8 output, compared in the
            grader ("lines") and sent to a checker
  cgroups   dying memory cgroups (v1: /proc/cgroups' count of memory cgroups less those in the tree) left
            by 20 tests that each read a file dropped from the page cache first (root grader with a memory cgroup)

    python perf/grader_attacks58.py                          # the default backend, every row
    GSPO_SANDBOX_BACKEND=unshare python perf/grader_attacks58.py --only memory

One JSON line per row. Run an older tree's code with PYTHONPATH pointing at a folder whose gspo is that tree.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from gspo.evals.graders import screen
from gspo.evals.graders.code import run_code
from gspo.evals.sandbox import sandbox_backend

CAP = 16 << 20
SHAPES = {  # 16 MiB each (the output cap); name -> the unit repeated
    "dots299": "." * 299 + " ", "e_pairs": "e ", "digits299": "9" * 299 + " ", "short_reals": "1.5 ",
    "exp_chain": "1e1", "control": "\x01",
}
WANT = "2.5 3.5"
OUTPUTS = {  # programs writing 16 MiB less a byte (the cap is 16 MiB)
    "ascii": f"import os\nos.write(1, b'1' * ({CAP} - 1))",
    "astral": f"import os\nos.write(1, b' ' + b'1' * ({CAP} - 6) + '\\U0001f600'.encode())",
    "invalid_utf8": f"import os\nos.write(1, b'\\xff' * ({CAP} - 1))",
}


def _shape(unit: str) -> str:
    return (unit * (CAP // len(unit) + 1))[:CAP]


def screen_cpu() -> list[dict]:
    """The screen's CPU per shape in this process (whichever screen this tree has)."""
    call = screen.screen_for_checker
    rows = []
    for name, unit in SHAPES.items():
        text = _shape(unit)
        started = time.process_time()
        why = call(text, WANT)
        spent = time.process_time() - started
        rows.append({"row": "screen_cpu", "shape": name, "cpu_s": round(spent, 2),
                     "ns_per_byte": round(spent * 1e9 / CAP, 1), "refused": why is not None})
    return rows


def grader_cpu_with_checker() -> dict:
    """The grader process's CPU (all its threads) grading the worst shape through a checker."""
    code = f"import sys\nsys.stdout.write(('.' * 299 + ' ') * ({CAP} // 300))"
    run_code("print(1)", [{"input": "", "output": "1"}], timeout_s=5, memory_mb=256, checker="print(1)")
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.perf_counter()
    r = run_code(code, [{"input": "", "output": WANT}], timeout_s=10, memory_mb=256, checker="print(1)")
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"row": "grader_cpu_dots299_to_checker", "verdict": r.verdict, "message": r.message[:80],
            "grader_cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
            "wall_s": round(time.perf_counter() - wall, 2)}


def _vm(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def memory(kind: str, checker: bool) -> dict:
    """In this (fresh) process: peak growth over the resident set after a warm-up."""
    run_code("print(1)", [{"input": "", "output": "1"}], timeout_s=5, memory_mb=256,
             checker="print(1)" if checker else None)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set
    base = _vm("VmRSS")
    r = run_code(OUTPUTS[kind], [{"input": "", "output": "1"}], timeout_s=10, memory_mb=256,
                 checker="print(1)" if checker else None)
    return {"row": "grader_peak", "output": kind, "to": "checker" if checker else "lines", "verdict": r.verdict,
            "peak_growth_mib": round((_vm("VmHWM") - base) / 1024, 1)}


def cgroups(tests: int = 20) -> dict:
    """Memory cgroups on the machine (v1 /proc/cgroups counts dying ones) before and after `tests` tests."""
    def count() -> int:
        with open("/proc/cgroups") as f:
            for line in f:
                if line.startswith("memory\t"):
                    return int(line.split()[2])
        return -1

    files = _uncached_files(tests)
    before = count()
    code = "import sys\nprint(len(open(sys.stdin.read().strip(), 'rb').read()) > 0)"
    r = run_code(code, [{"input": f, "output": "True"} for f in files], timeout_s=2, memory_mb=64)
    time.sleep(1)
    return {"row": "memory_cgroups_left", "tests": tests, "verdict": r.verdict, "more_cgroups": count() - before}


def _uncached_files(n: int) -> list[str]:
    """n files under /usr/share of 16 KiB or more, their pages dropped from the page cache (fadvise DONTNEED),
    so that each test's read charges fresh pages to its job's memory cgroup."""
    found = []
    for folder, _, names in os.walk("/usr/share"):
        for name in sorted(names):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) >= 16384:
                found.append(path)
        if len(found) >= n:
            break
    for path in found[:n]:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    return found[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="screen,memory,cgroups")
    parser.add_argument("--fresh", help=argparse.SUPPRESS)  # one memory row, in a child process
    args = parser.parse_args()
    if args.fresh:
        kind, to = args.fresh.split(":")
        print(json.dumps(memory(kind, to == "checker")), flush=True)
        return
    print(json.dumps({"backend": sandbox_backend(), "load": os.getloadavg()}), flush=True)
    for part in args.only.split(","):
        if part == "screen":
            for row in screen_cpu():
                print(json.dumps(row), flush=True)
            print(json.dumps(grader_cpu_with_checker()), flush=True)
        elif part == "memory":
            for kind in OUTPUTS:
                for to in ("lines", "checker"):
                    subprocess.run([sys.executable, __file__, "--fresh", f"{kind}:{to}"], check=True, env=os.environ)
        elif part == "cgroups":
            print(json.dumps(cgroups()), flush=True)


if __name__ == "__main__":
    main()

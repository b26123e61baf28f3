"""CodeForces: the open-r1/codeforces problems (`problems`), the CodeElo-style rating (`rating`) and the
Codeforces API client that fetches a contest's standings for it (`api`). The grader of a response is
gspo.evals.graders.codeforces; the benchmark that puts them together is gspo.evals.benchmarks.codeforces.
"""

from __future__ import annotations

"""A root grader's sandbox uids (issue 46): each running sandbox leases a host uid no other sandbox on the
machine holds, so per-user kernel quotas are its own. The leases themselves, without any sandbox."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gspo.conf.errors import GspoError
from gspo.evals.sandbox.uids import DEFAULT_RANGE, RANGE_ENV, lease, uid_range

# a range of this test process's own, above the default one: no sandbox of a concurrent test holds these
FIRST = DEFAULT_RANGE[0] + DEFAULT_RANGE[1] + 4 * (os.getpid() % 4096)


def test_leases_are_distinct_until_released(monkeypatch):
    """A range of two uids: two leases take both, a third finds none, a released uid is leased again."""
    monkeypatch.setenv(RANGE_ENV, f"{FIRST}:2")
    one, two = lease(), lease()
    assert {one.uid, two.uid} == {FIRST, FIRST + 1}
    with pytest.raises(OSError, match="all 2 sandbox uids"):
        lease()
    one.release()
    again = lease()
    assert again.uid == one.uid
    for held in (two, again):
        held.release()


_HOLDER = """
import os, sys, time
from gspo.evals.sandbox.uids import lease
held = lease()
print(held.uid, flush=True)
sys.stdin.read()  # hold until the test closes our input
"""


def test_a_lease_held_by_another_process_is_not_given_out(monkeypatch):
    """What pytest-xdist workers and concurrent graders need: a uid another process holds is skipped, and
    comes free when that process ends (the kernel drops its flock however it ends)."""
    monkeypatch.setenv(RANGE_ENV, f"{FIRST + 2}:1")
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=os.environ)
    try:
        assert int(holder.stdout.readline()) == FIRST + 2
        with pytest.raises(OSError, match="all 1 sandbox uids"):
            lease()
    finally:
        holder.kill()
        holder.wait()
    mine = lease()
    assert mine.uid == FIRST + 2
    mine.release()


@pytest.mark.parametrize("text", ["abc", "100000", "1000:10", "65000:1000", "4294967000:1000"])
def test_a_bad_range_is_one_clear_error(monkeypatch, text):
    """Not first:count, or a range reaching the accounts' uids, 'nobody' (65534) or -1."""
    monkeypatch.setenv(RANGE_ENV, text)
    with pytest.raises(GspoError, match=RANGE_ENV):
        uid_range()

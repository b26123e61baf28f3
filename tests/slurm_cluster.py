"""A real one-node Slurm cluster on this machine, for the tests marked `slurm` (and by hand):

    python tests/slurm_cluster.py up /tmp/cluster     # starts it; prints the SLURM_CONF to export
    python tests/slurm_cluster.py down /tmp/cluster

Debian's `munge` and `slurm-wlm` (.ci/apt-packages.txt): munged with a fresh key, slurmctld and slurmd started from a
generated slurm.conf in a folder of ours, on free loopback ports, so nothing of the machine's own Slurm (if any) is
touched. One partition `cpu` holds this host with its cores and memory. Accounting is off (no slurmdbd, as on
many small clusters): `sacct` answers no. Memory limits are enforced as Slurm does without cgroups
(jobacct_gather/linux polls every second and OverMemoryKill kills a step over its --mem), so a job over its
memory is killed for real. Nothing here is a mock: sbatch, squeue, scancel and scontrol talk to these daemons.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun")


def missing() -> str | None:
    """Why a cluster cannot start here (one line), or None."""
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root (slurmd runs jobs as their user)"
    lacking = [p for p in DAEMONS + CLIENTS if shutil.which(p) is None and not Path(f"/usr/sbin/{p}").exists()]
    if lacking:
        return f"Slurm is not installed ({', '.join(lacking)} missing): apt-get install slurm-wlm munge"
    return None


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _memory_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


def _daemon(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class LocalSlurm:
    """The cluster in `root`: `start()`, then `env` (SLURM_CONF for every client) while it runs, `stop()`."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.node = socket.gethostname()
        self.conf = self.root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def write_conf(self) -> None:
        r = self.root
        for sub in ("state", "spool", "log", "munge"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        ctld, slurmd = _free_ports(2)
        cpus = os.cpu_count() or 1
        self.conf.write_text("\n".join([
            "ClusterName=gspotest", f"SlurmctldHost={self.node}(127.0.0.1)", f"SlurmctldPort={ctld}",
            f"SlurmdPort={slurmd}", "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge",
            f"AuthInfo=socket={r / 'munge' / 'sock'}", "CredType=cred/munge", f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}", f"SlurmctldPidFile={r / 'ctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU_Memory", "JobAcctGatherType=jobacct_gather/linux", "JobAcctGatherFrequency=1",
            "JobAcctGatherParams=OverMemoryKill", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none", "MpiDefault=none", "ReturnToService=2", "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2", "KillWait=5", "MinJobAge=600", "SlurmctldTimeout=30",
            "SlurmdTimeout=30", "InactiveLimit=0", "Waittime=0", "MessageTimeout=30",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={max(1024, _memory_mb() - 2048)} "
            "State=UNKNOWN", "DefMemPerCPU=3072",  # a job that asks no memory gets 3 GiB a CPU, not the whole node
            f"PartitionName=cpu Nodes={self.node} Default=YES MaxTime=INFINITE State=UP", ""]))

    def start(self, timeout: float = 60.0) -> None:
        self.write_conf()
        r = self.root
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        env = {**os.environ, **self.env}
        subprocess.run([_daemon("munged"), "--force", f"--socket={r / 'munge' / 'sock'}", f"--key-file={key}",
                        f"--log-file={r / 'munge' / 'log'}", f"--pid-file={r / 'munge' / 'pid'}",
                        f"--seed-file={r / 'munge' / 'seed'}"], check=True, env=env, capture_output=True)
        for argv in ([_daemon("slurmctld"), "-D", "-i", "-f", str(self.conf)],
                     [_daemon("slurmd"), "-D", "-N", self.node, "-f", str(self.conf)]):
            log = open(r / "log" / f"{Path(argv[0]).name}.out", "ab")
            self.procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))
        self.wait_idle(timeout)

    def wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            out = self.run("sinfo", "--noheader", "--format=%T", check=False)
            if out.returncode == 0 and out.stdout.strip() == "idle":
                return
            time.sleep(0.5)
        logs = " | ".join(f.read_text(errors="replace")[-400:] for f in sorted((self.root / "log").glob("*")))
        self.stop()
        raise RuntimeError(f"the local Slurm cluster did not come up within {timeout:.0f} s: {logs}")

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=60, check=check)

    def stop(self) -> None:
        if self.conf.exists():
            self.run("scancel", "--full", "--partition=cpu", check=False)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs.clear()
        pid = self.root / "munge" / "pid"
        if pid.exists():
            try:
                os.kill(int(pid.read_text().strip()), signal.SIGTERM)
            except (ValueError, ProcessLookupError):
                pass


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("up", "down"):
        sys.exit("usage: python tests/slurm_cluster.py up|down FOLDER")
    cluster = LocalSlurm(Path(sys.argv[2]).resolve())
    if sys.argv[1] == "up":
        if why := missing():
            sys.exit(why)
        cluster.start()
        cluster.procs.clear()  # left running on purpose: `down` stops them by their pid files
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        for name in ("ctld.pid", "slurmd.pid", "munge/pid"):
            f = cluster.root / name
            if f.exists():
                try:
                    os.kill(int(f.read_text().strip()), signal.SIGTERM)
                except (ValueError, ProcessLookupError):
                    pass

"""A one-host Slurm of the tests' own: munged, slurmctld and slurmd from the distribution's packages, each with its
own key, socket, config, ports, state and pid files in a temporary folder (nothing in /etc is used or changed).

Memory limits: task/cgroup (ConstrainRAMSpace) where this machine lets slurmd make cgroups, so a step over --mem
is killed by the kernel's cgroup OOM handler and Slurm says OUT_OF_MEMORY; otherwise jobacct_gather/linux with
OverMemoryKill (slurmstepd samples and kills; the job reads FAILED, slurmstepd's "exceeded memory limit" line says
why). `why_not()` names what is missing, for a skip reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "sstat")
PACKAGES = "apt-get install -y slurmctld slurmd slurm-client munge"


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "a one-host Slurm needs root (slurmd runs jobs as their user)"
    missing = [name for name in ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd") if not Path(name).exists()]
    missing += [name for name in CLIENTS if shutil.which(name) is None]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)}); `{PACKAGES}`"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cgroup_memory_usable() -> bool:
    probe = Path("/sys/fs/cgroup/memory") / f"traindeck-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


class OneHostSlurm:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = socket.gethostname()
        self.conf = root / "slurm.conf"
        self.socket = root / "munge" / "munge.sock"
        self.cgroup = _cgroup_memory_usable()
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    def start(self, timeout_s: float = 90.0) -> str | None:
        """None when the node is idle and takes jobs; else why not (the daemons' log tails)."""
        munge = self.root / "munge"
        for d in ("munge", "state", "spool", "log"):
            (self.root / d).mkdir(mode=0o700, exist_ok=True)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        munged = subprocess.run(["/usr/sbin/munged", "--force", f"--socket={self.socket}", f"--key-file={key}",
                                 f"--log-file={munge / 'munged.log'}", f"--pid-file={munge / 'munged.pid'}",
                                 f"--seed-file={munge / 'seed'}"], capture_output=True, text=True, check=False)
        if munged.returncode != 0:
            return f"munged did not start: {munged.stderr.strip()}"
        self._write_conf()
        for daemon in ("slurmctld", "slurmd"):
            done = subprocess.run([f"/usr/sbin/{daemon}", "-f", str(self.conf)], env=self.env, capture_output=True,
                                  text=True, check=False)
            if done.returncode != 0:
                return f"{daemon} did not start: {done.stderr.strip()}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "--noheader", "--format=%t"], env=self.env, capture_output=True,
                                   text=True, check=False).stdout.strip()
            if state in ("idle", "mix", "alloc"):
                return None
            time.sleep(1.0)
        return f"the node did not become idle in {timeout_s:g} s: " + self.log_tail()

    def _write_conf(self) -> None:
        r = self.root
        memory = (["TaskPlugin=task/cgroup", "JobAcctGatherType=jobacct_gather/cgroup",
                   "JobAcctGatherParams=NoOverMemoryKill"] if self.cgroup else
                  ["TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/linux",
                   "JobAcctGatherParams=OverMemoryKill"])
        lines = [
            "ClusterName=traindeck-test", f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", *memory, "JobAcctGatherFrequency=task=1",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
            "AccountingStorageType=accounting_storage/none", "MinJobAge=600", "KillWait=3", "ReturnToService=2",
            "MpiDefault=none", "SchedulerType=sched/backfill",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} RealMemory=2000 State=UNKNOWN",
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        if self.cgroup:
            (r / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
                                           "ConstrainRAMSpace=yes\nConstrainSwapSpace=no\nConstrainCores=no\n"
                                           "ConstrainDevices=no\nIgnoreSystemd=yes\n")

    def log_tail(self, lines: int = 5) -> str:
        tails = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.root / "log" / name
            if path.exists():
                tails.append(f"{name}: " + " | ".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "; ".join(tails)

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=False, timeout=60)

    def stop(self) -> None:
        """Cancel every job of this cluster, then end the daemons by their pid files (and wait for them)."""
        if self.conf.exists():
            self.run("scancel", "--full", f"--user={os.getuid()}")
            time.sleep(1.0)
        for pid_file in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
            path = self.root / pid_file
            try:
                pid = int(path.read_text().strip())
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError):
                continue
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except OSError:
                    break
                time.sleep(0.2)
            else:
                os.kill(pid, signal.SIGKILL)
        self._remove_cgroups()

    def _remove_cgroups(self) -> None:
        """slurmd's empty cgroup folders (slurm_<host>/...), deepest first; a folder still in use stays."""
        for controller in Path("/sys/fs/cgroup").iterdir() if self.cgroup else []:
            top = controller / f"slurm_{self.host}"
            if not top.is_dir():
                continue
            for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                try:
                    folder.rmdir()
                except OSError:
                    pass
            try:
                top.rmdir()
            except OSError:
                pass

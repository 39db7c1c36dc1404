"""Slurm's own command-line tools, asked with argv lists and a time limit; their answers parsed.

Every call returns what it could read or a reason it could not (a missing tool, an unreachable controller): the
job follower keeps following through a controller's hiccup instead of failing the run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

TIMEOUT_S = 30.0
# squeue states after which the job runs no more (a job may linger as COMPLETING while its nodes clean up).
FINAL_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "SPECIAL_EXIT", "TIMEOUT", "REVOKED",
})


@dataclass(frozen=True)
class Answer:
    ok: bool
    out: str
    err: str


def ask(argv: list[str], env: Mapping[str, str] | None = None, timeout_s: float = TIMEOUT_S) -> Answer:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        return Answer(False, "", f"{argv[0]} not found on PATH (is this a Slurm submit host?)")
    except subprocess.TimeoutExpired:
        return Answer(False, "", f"{argv[0]} did not answer within {timeout_s:g} s")
    except OSError as exc:
        return Answer(False, "", f"{argv[0]}: {exc}")
    return Answer(done.returncode == 0, done.stdout, done.stderr.strip())


def submit(script: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    """(job id, sbatch's message). The environment travels with --export=ALL, never through a file."""
    answer = ask(["sbatch", "--parsable", "--export=ALL", script], env=env)
    job = answer.out.strip().split(";")[0] if answer.ok else ""
    if not job.isdigit():
        return None, answer.err or answer.out.strip() or "sbatch gave no job id"
    return job, answer.err


@dataclass(frozen=True)
class QueueState:
    listed: bool  # False: squeue no longer lists the job (it ended, and MinJobAge may have passed)
    state: str = ""  # PENDING, RUNNING, COMPLETING, ... (squeue's %T)
    reason: str = ""  # why it waits (Resources, Priority, QOSMaxJobsPerUserLimit...), "None" while running
    nodes: list[str] = field(default_factory=list)
    problem: str = ""  # squeue could not be asked; the state is unknown, not ended


def queue_state(job: str) -> QueueState:
    answer = ask(["squeue", "--noheader", "--jobs", job, "--states=all", "--format=%T|%r|%N"])
    if not answer.ok:
        if "Invalid job id" in answer.err:  # the controller has forgotten it: long over
            return QueueState(False)
        return QueueState(False, problem=answer.err or "squeue failed")
    line = answer.out.strip().splitlines()[0] if answer.out.strip() else ""
    if not line:
        return QueueState(False)
    state, _, rest = line.partition("|")
    reason, _, nodelist = rest.partition("|")
    return QueueState(True, state.strip(), reason.strip(), hostnames(nodelist.strip()) if nodelist.strip() else [])


def hostnames(nodelist: str) -> list[str]:
    """vm,gpu[01-02] -> each host (Slurm's own expansion; the list itself when scontrol cannot be asked)."""
    answer = ask(["scontrol", "show", "hostnames", nodelist])
    names = answer.out.split() if answer.ok else []
    return names or [nodelist]


def cancel(job: str) -> Answer:
    return ask(["scancel", job])


def step_usage(job: str) -> list[dict[str, str]]:
    """Per-step, per-node peaks of the running job from sstat (Slurm's own accounting of its job steps):
    [{step, max_rss, max_rss_node, ave_cpu, tasks}]; empty when sstat cannot tell (no jobacct_gather plugin)."""
    answer = ask(["sstat", "--noheader", "--parsable2", "--allsteps", "--jobs", job,
                  "--format=JobID,MaxRSS,MaxRSSNode,AveCPU,NTasks"], timeout_s=10.0)
    rows = []
    for line in answer.out.splitlines() if answer.ok else []:
        cells = line.split("|")
        if len(cells) >= 5:
            rows.append({"step": cells[0], "max_rss": cells[1], "max_rss_node": cells[2], "ave_cpu": cells[3],
                         "tasks": cells[4]})
    return rows

"""How a Slurm job ended, from sacct (the accounting database) or, where there is none, from scontrol.

sacct needs slurmdbd; a cluster without it (or a one-host test set-up) keeps an ended job in the controller's
memory for MinJobAge seconds (300 by default), and `scontrol show job` reads it from there. Which source was used is
said in the diagnosis. The job's state alone hides an out-of-memory step: a step killed by its memory limit leaves
the batch script's srun failing, so the job reads FAILED while sacct lists the step as OUT_OF_MEMORY and slurmstepd
writes "Detected N oom-kill event(s) in StepId=..." into the job's output; either counts as OUT_OF_MEMORY here.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from traindeck.backend.slurm.commands import ask

# slurmstepd's own lines in the job's output when a step meets its memory limit: task/cgroup ("oom-kill event"),
# jobacct_gather's OverMemoryKill ("exceeded memory limit"), and srun's summary of the task.
_OOM_LINES = (
    re.compile(r"Detected \d+ oom[-_ ]kill event\(s\) in (?:StepId=)?(?P<step>[\w.]+)", re.IGNORECASE),
    re.compile(r"(?:StepId=|Step )(?P<step>[\w.]+) exceeded memory limit", re.IGNORECASE),
    re.compile(r"srun: error: (?P<node>\S+): task \d+: Out Of Memory"),
)


@dataclass
class JobEnd:
    job_id: str
    state: str  # the job's own state as Slurm reports it (sacct's job line, or scontrol's JobState)
    exit_code: str = ""  # Slurm's "code:signal"
    reason: str = ""
    nodes: str = ""
    elapsed: str = ""
    time_limit: str = ""
    steps: dict[str, str] = field(default_factory=dict)  # step id -> state (sacct only)
    oom_steps: list[str] = field(default_factory=list)  # steps that ran out of memory (sacct or slurmstepd's lines)
    source: str = ""  # "sacct" | "scontrol" | "" (neither could tell)
    note: str = ""  # why the source is not sacct

    @property
    def effective_state(self) -> str:
        """The state traindeck reports: OUT_OF_MEMORY when a step ran out of memory, whatever the job line says."""
        if self.oom_steps and self.state in ("FAILED", "OUT_OF_MEMORY", "CANCELLED", ""):
            return "OUT_OF_MEMORY"
        return self.state

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["effective_state"] = self.effective_state
        return data


def read_end(job: str, output_tail: list[str]) -> JobEnd:
    end, why = _from_sacct(job)
    if end is None:
        end = _from_scontrol(job, why)
    for line in output_tail:
        for pattern in _OOM_LINES:
            found = pattern.search(line)
            if found is not None:
                step = found.groupdict().get("step") or f"{job} (on {found.group('node')})"
                if step not in end.oom_steps:
                    end.oom_steps.append(step)
    return end


def _from_sacct(job: str) -> tuple[JobEnd | None, str]:
    answer = ask(["sacct", "--noheader", "--parsable2", "--jobs", job,
                  "--format=JobID,State,ExitCode,NodeList,Elapsed,Timelimit"])
    if not answer.ok or not answer.out.strip():
        return None, answer.err or "sacct knows no such job"
    end: JobEnd | None = None
    for line in answer.out.splitlines():
        cells = line.split("|")
        if len(cells) < 6:
            continue
        step_id, state = cells[0], cells[1].split()[0] if cells[1] else ""  # "CANCELLED by 0" -> CANCELLED
        if step_id == job:
            end = JobEnd(job, state, exit_code=cells[2], nodes=cells[3], elapsed=cells[4], time_limit=cells[5],
                         source="sacct")
        elif end is not None:
            end.steps[step_id] = state
            if state == "OUT_OF_MEMORY":
                end.oom_steps.append(step_id)
    return end, "" if end is not None else "sacct did not list the job"


def _from_scontrol(job: str, why: str) -> JobEnd:
    answer = ask(["scontrol", "show", "job", job, "--oneline"])
    fields = dict(re.findall(r"(\w+)=(\S*)", answer.out)) if answer.ok else {}
    if not fields.get("JobState"):
        return JobEnd(job, "", source="", note=f"sacct: {why}; scontrol: {answer.err or 'no answer'} (the "
                                                 "controller keeps an ended job only MinJobAge seconds)")
    return JobEnd(job, fields.get("JobState", ""), exit_code=fields.get("ExitCode", ""),
                  reason=fields.get("Reason", ""), nodes=fields.get("NodeList", ""),
                  elapsed=fields.get("RunTime", ""), time_limit=fields.get("TimeLimit", ""), source="scontrol",
                  note=f"sacct unavailable ({why}): read from `scontrol show job`, which keeps an ended job "
                       "MinJobAge seconds; a cluster with slurmdbd answers through sacct")


def exit_status(end: JobEnd) -> int:
    """The job follower's exit code for the supervisor: 0 only for COMPLETED."""
    if end.effective_state == "COMPLETED":
        return 0
    code, _, sig = end.exit_code.partition(":")
    if code.isdigit() and int(code):
        return int(code)
    if sig.isdigit() and int(sig):
        return 128 + int(sig)
    return 1


def diagnosis_fields(end: JobEnd, stop_requested: bool) -> dict[str, Any]:
    """What the diagnosis takes from the scheduler (written as the run's scheduler_end.json): a whole diagnosis
    for ends only Slurm can explain, else evidence lines for the usual diagnosis of the job's output."""
    state = end.effective_state
    job = f"Slurm job {end.job_id}"
    facts = [f"{job} ended {end.state or 'in an unknown state'}"
             + (f", exit code {end.exit_code}" if end.exit_code else "")
             + (f", reason {end.reason}" if end.reason and end.reason != "None" else "")
             + (f", on {end.nodes}" if end.nodes else "")
             + (f" (read from {end.source})" if end.source else "")]
    if end.steps:
        facts.append("steps: " + ", ".join(f"{step} {st}" for step, st in end.steps.items()))
    if end.note:
        facts.append(end.note)
    data: dict[str, Any] = {"scheduler": "slurm", "job_id": end.job_id, "state": state, "evidence": facts}
    if stop_requested or state in ("COMPLETED", "FAILED", ""):
        return data  # a stop, a success, or a failure the job's own output explains best
    if state == "OUT_OF_MEMORY":
        steps = ", ".join(end.oom_steps)
        data.update(summary=f"{job} ran out of memory (OUT_OF_MEMORY): Slurm killed step {steps} at the job's "
                            "memory limit.", kind="cgroup_oom", memory="cgroup",
                    advice="Ask for more memory per node (--mem), or lower what each rank holds (smaller batch, "
                           "ZeRO offload off the host).")
    elif state == "TIMEOUT":
        data.update(summary=f"{job} reached its time limit ({end.time_limit or '--time'}) and Slurm ended it "
                            "(TIMEOUT).", kind="killed",
                    advice="Ask for a longer --time, or save checkpoints often enough to resume the run.")
    elif state == "NODE_FAIL":
        data.update(summary=f"A node of {job} failed (NODE_FAIL on {end.nodes or 'its nodes'}); Slurm ended the "
                            "job.", kind="peer_lost", advice="Resubmit; tell the cluster's admins if the node "
                                                              "keeps failing.")
    elif state == "CANCELLED":
        data.update(summary=f"{job} was cancelled outside traindeck (scancel by its owner or an administrator).",
                    kind="killed")
    else:  # BOOT_FAIL, DEADLINE, PREEMPTED, REVOKED, SPECIAL_EXIT
        data.update(summary=f"Slurm ended {job}: {state}.", kind="killed")
    return data

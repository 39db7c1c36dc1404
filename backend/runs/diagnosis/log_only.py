"""The diagnosis of a log from anywhere (a colleague's paste, a cluster job's output file, a run started without
traindeck), made as the supervisor makes it for its own runs: the same tail of the log (the last MiB, 2,000 lines,
bar redraws collapsed, torch's and traindeck's rank tags read), the same rules, the launchers' reports in the log
standing in for the ends the supervisor would have seen, and the exit status given by the user if known. What only
a supervisor can know (which process ended when, memory samples, the kernel's OOM log) is said as unknown."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from traindeck.backend.runs.diagnosis.diagnose import Diagnosis, Evidence, diagnose
from traindeck.backend.runs.diagnosis.evidence import free_space_of, log_tail

TAIL_BYTES = 1 << 20  # what the supervisor reads of output.log at a run's end (run_end.py)
TAIL_LINES = 2000


@dataclass(frozen=True)
class LogDiagnosis:
    diagnosis: Diagnosis
    unknown: list[str] = field(default_factory=list)  # what a log alone cannot tell


def diagnose_logs(paths: list[Path], exit_code: int | None = None) -> LogDiagnosis:
    """The diagnosis of the logs at `paths` (read in the order given, as one output) ended with `exit_code`
    (the launcher's, where known). OSError when a file cannot be read."""
    lines: list[str] = []
    for path in paths:
        with open(path, "rb"):  # unreadable: said by the caller, not read as an empty log
            pass
        lines += log_tail(path, max_bytes=TAIL_BYTES, max_lines=TAIL_LINES)
    lines = lines[-TAIL_LINES:]
    evidence = Evidence(launcher_returncode=exit_code, log_tail=lines, log_only=True, free_space=free_space_of(lines))
    diagnosis = diagnose(evidence)
    unknown = ["no process was seen ending: which rank ended and how is read from the launchers' reports in the log",
               "no memory was sampled and no kernel log read: an out-of-memory kill can be suspected, not confirmed"]
    if exit_code is None:
        unknown.insert(0, "the exit status (give it with --exit-code N)")
        if diagnosis.kind == "succeeded":
            diagnosis = replace(diagnosis, summary="The log shows no failure (its exit status was not given).",
                                kind="exit_code")
    return LogDiagnosis(diagnosis, unknown)


__all__ = ["LogDiagnosis", "diagnose_logs"]

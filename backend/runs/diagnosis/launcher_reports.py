"""What the launchers print about how their ranks ended, read back from the log.

A launcher that loses a rank says so in its own words and then exits with a code of its own: torchrun's
ChildFailedError table names the first failed rank, its host, exit code and signal ("Root Cause (first observed
failure)") and torchrun exits 1; DeepSpeed's launch.py logs "<the rank's command> exits with return code = -9" and
exits with that code; torch elastic logs "failed (exitcode: 1) local_rank: 1 (pid: 13597)". Where the supervisor
did not see a rank end (a log from elsewhere, a rank on another node), these reports are the evidence of which rank
died and how, so the launcher that relays a rank's -11 is not taken for the crash. The formats are those of torch's
own torch/distributed/elastic/multiprocessing/errors/__init__.py and api.py, and DeepSpeed's launcher/launch.py.
A launcher that receives SIGINT or SIGTERM says so too, before it ends its ranks: DeepSpeed's launch.py
(sigkill_handler) logs "Killing subprocess PID" for each rank, then "Main process received SIGTERM, exiting" and
exits 1 (or, where a rank had already returned, "<cmd> exits with return code = N" and exits N; the launcher calls
that handler itself only for a rank that failed, so N = 0 is a signal too); torch elastic's agent logs "Received
SIGTERM death signal, shutting down workers" ("Received 15 ..." on Python 3.11+) and ends with its SignalException.
Pure functions over lines.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

# A node's name put before each line by pdsh ("node-1: "), and torch's own rank tags ("[default1]:" from torchrun
# --tee, "[rank1]:" on tracebacks), read past to find a report's fields.
_PREFIX = re.compile(r"^(?:[\w.-]+: )?(?:\[(?:default|rank)\d+\]:\s?)*")
_ENTRY = re.compile(r"^\s*\[(\d+)\]:\s*$")
_FIELD = re.compile(r"^\s{2}(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_RANK = re.compile(r"(\d+) \(local_rank: (\d+)\)")
_EXITCODE = re.compile(r"(-?\d+) \(pid: (\d+)\)")
_DS_RETURN = re.compile(r"\[(?P<cmd>.*)\] exits with return code = (?P<code>-?\d+)")
_LOCAL_RANK_ARG = re.compile(r"--local_rank[= ]'?,? ?'?(\d+)")
_ELASTIC_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
# The launchers' signal handlers (deepspeed/launcher/launch.py sigkill_handler; torch/distributed/elastic/agent/
# server/api.py on its SignalException), quoted from the log line's own timestamp where it has one.
_STAMP = r"(?:\[[\d\- :,]+\] \[\w+\] )?"
_DS_RECEIVED = re.compile(_STAMP + r"(?:\[launch\.py:\d+:sigkill_handler\] )?Main process received (SIG[A-Z]+), exiting")
_DS_KILLING = re.compile(r"\[launch\.py:\d+:sigkill_handler\] Killing subprocess \d+")
_ELASTIC_RECEIVED = re.compile(r"Received (?:Signals\.)?(SIG[A-Z]+|\d+) death signal, shutting down workers")


@dataclass(frozen=True)
class RankReport:
    """One rank's end as a launcher reported it."""

    rank: int  # torchrun: the global rank; DeepSpeed and torch elastic's line: the local rank
    exitcode: int  # negative: killed by that signal
    pid: int | None
    launcher: str  # "torchrun" | "deepspeed" in words for the evidence
    host: str = ""
    root: bool = False  # torchrun's "Root Cause (first observed failure)": the rank that failed first
    line: str = ""  # the report's own words, for the evidence


def rank_reports(lines: list[str]) -> list[RankReport]:
    """Every rank end the launchers reported in `lines`, in the order reported; torchrun's root cause is marked."""
    reports: list[RankReport] = []
    section = ""
    entry: dict[str, str] | None = None

    def close() -> None:
        nonlocal entry
        if entry is not None:
            made = _table_entry(entry, section == "root")
            if made is not None:
                reports.append(made)
        entry = None

    for raw in lines:
        line = _PREFIX.sub("", raw.rstrip("\n"))
        if line.startswith("Failures:"):
            close()
            section = "others"
            continue
        if line.startswith("Root Cause (first observed failure):"):
            close()
            section = "root"
            continue
        if section:
            if _ENTRY.match(line):
                close()
                entry = {}
                continue
            field = _FIELD.match(line)
            if field and entry is not None:
                entry[field.group(1)] = field.group(2).strip()
                continue
            if line.startswith(("=====", "-----")) or not line.strip():
                close()
                if line.startswith("====="):
                    section = ""
                continue
            if entry is not None and line.startswith("  "):  # a traceback's further lines
                continue
            close()
            section = ""
        match = _DS_RETURN.search(line)
        if match:
            local = _LOCAL_RANK_ARG.search(match.group("cmd"))
            if local:
                code = int(match.group("code"))
                reports.append(RankReport(int(local.group(1)), code, None, "DeepSpeed's launcher",
                                          line=f"exits with return code = {code} (--local_rank={local.group(1)})"))
            continue
        match = _ELASTIC_FAILED.search(line)
        if match:
            reports.append(RankReport(int(match.group(2)), int(match.group(1)), int(match.group(3)), "torchrun",
                                      line=match.group(0)))
    close()
    return reports


def _table_entry(entry: dict[str, str], root: bool) -> RankReport | None:
    rank = _RANK.search(entry.get("rank", ""))
    code = _EXITCODE.search(entry.get("exitcode", ""))
    if rank is None or code is None:
        return None
    said = f"rank {rank.group(1)}: exitcode {entry['exitcode'].strip()}"
    if entry.get("traceback") and not entry["traceback"].startswith("To enable traceback"):
        said += f"; {entry['traceback']}"
    return RankReport(int(rank.group(1)), int(code.group(1)), int(code.group(2)), "torchrun",
                      host=entry.get("host", ""), root=root, line=said)


@dataclass(frozen=True)
class LauncherSignal:
    """A launcher's own word that it received a signal and ended its ranks."""

    launcher: str  # "The DeepSpeed launcher" | "torchrun"
    signal: str  # "SIGTERM", "SIGINT"; "" where the line does not name it
    line: str  # the launcher's line, for the evidence
    said: str  # that line in short, for the summary ("its 'Main process received SIGTERM' line")


def launcher_signal(lines: list[str]) -> LauncherSignal | None:
    """The last signal a launcher logged receiving in `lines` (DeepSpeed's launch.py, torch elastic's agent)."""
    found: LauncherSignal | None = None
    killing = False
    for raw in lines:
        line = _PREFIX.sub("", raw.rstrip("\n"))
        if _DS_KILLING.search(line):
            killing = True
            continue
        match = _DS_RECEIVED.search(line)
        if match:
            found = LauncherSignal("The DeepSpeed launcher", match.group(1), match.group(0).strip(),
                                   f"its 'Main process received {match.group(1)}' line")
            continue
        match = _DS_RETURN.search(line)
        if match and killing and int(match.group("code")) == 0:
            found = LauncherSignal("The DeepSpeed launcher", "", line.strip(),
                                   "its 'exits with return code = 0' line after 'Killing subprocess'")
            continue
        match = _ELASTIC_RECEIVED.search(line)
        if match:
            name = match.group(1)
            if name.isdigit():
                try:
                    name = signal.Signals(int(name)).name
                except ValueError:
                    name = f"signal {name}"
            found = LauncherSignal("torchrun", name, match.group(0), f"its 'Received {name} death signal' line")
    return found


def first_reported(reports: list[RankReport]) -> RankReport | None:
    """The rank the launchers name as the first to fail: torchrun's root cause, else the first bad end reported."""
    root = [r for r in reports if r.root]
    if root:
        return root[0]
    return next((r for r in reports if r.exitcode != 0), None)


__all__ = ["LauncherSignal", "RankReport", "first_reported", "launcher_signal", "rank_reports"]

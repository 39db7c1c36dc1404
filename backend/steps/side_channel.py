"""Reads the ranks' step files (<run dir>/steps/rank<R>.jsonl) as they grow, without following symbolic links; and
appends the lines of ranks on other machines, which the run's node agents send back (`RelayedSteps`).

The supervisor calls `read_new` about once a second; each call returns only complete lines written since the last,
at most `budget` bytes a call, so a rank that wrote a flood is caught up over several calls, never in one stall.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from traindeck.backend.steps.records import MAX_LINE, HookReport, StepRecord, parse_line

STEPS_FOLDER = "steps"
_RANK_FILE = re.compile(r"rank(\d{1,6})\.jsonl")


class StepFiles:
    """The incremental reader of one run's step files."""

    def __init__(self, run_dir: Path | str, budget: int = 4 << 20) -> None:
        self.folder = Path(run_dir) / STEPS_FOLDER
        self.budget = budget
        self.offsets: dict[int, int] = {}

    def read_new(self) -> tuple[list[StepRecord], list[HookReport]]:
        steps: list[StepRecord] = []
        reports: list[HookReport] = []
        try:
            names = sorted(os.listdir(self.folder))
        except OSError:
            return steps, reports
        left = self.budget
        for name in names:
            match = _RANK_FILE.fullmatch(name)
            if not match or left <= 0:
                continue
            rank = int(match.group(1))
            data = self._read(rank, self.folder / name, left)
            left -= len(data)
            for line in data.splitlines():
                item = parse_line(line, rank)
                if isinstance(item, StepRecord):
                    steps.append(item)
                elif isinstance(item, HookReport):
                    reports.append(item)
        return steps, reports

    def _read(self, rank: int, path: Path, limit: int) -> bytes:
        offset = self.offsets.get(rank, 0)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return b""
        try:
            size = os.fstat(fd).st_size
            if size < offset:  # rewritten (a resumed run's rank started the file again): read it whole
                offset = 0
            data = os.pread(fd, min(limit, size - offset), offset) if size > offset else b""
        except OSError:
            return b""
        finally:
            os.close(fd)
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) > MAX_LINE:  # one line longer than any of ours: skip it
                self.offsets[rank] = offset + len(data)
            return b""
        self.offsets[rank] = offset + end + 1
        return data[: end + 1]


class RelayedSteps:
    """The step lines of ranks on other machines, sent back by the run's node agents, appended to
    <run dir>/steps/rank<R>.jsonl as a rank here writes its own (the supervisor reads them from there).

    The supervisor reads the files a last time when the run's launcher has ended, which may come before the last
    lines of a rank far away: `records_since` gives what was appended lately, for the run's node watch to add to
    the store at its own end (a step stored twice is one row)."""

    KEPT_S = 120.0  # how long an append is remembered for `records_since`

    def __init__(self, run_dir: Path | str) -> None:
        self.folder = Path(run_dir) / STEPS_FOLDER
        self.appends: list[tuple[float, int, int, int]] = []  # (time, rank, offset, bytes)

    def append(self, rank: int, lines: object) -> int:
        """Appends the lines that are a step or hook line of ours (anything else is dropped); how many."""
        if not isinstance(lines, list):
            return 0
        kept = [line for line in lines if isinstance(line, str) and "\n" not in line
                and parse_line(line, rank) is not None]
        if not kept:
            return 0
        data = "".join(line + "\n" for line in kept).encode()
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.folder / f"rank{rank}.jsonl",
                         os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return 0
        try:
            offset = os.fstat(fd).st_size  # the one writer of this rank's file: the watch's reader of its node
            os.write(fd, data)
        except OSError:  # a full disk: these steps are lost, the run is not
            return 0
        finally:
            os.close(fd)
        now = time.time()
        self.appends = [a for a in self.appends if a[0] >= now - self.KEPT_S]
        self.appends.append((now, rank, offset, len(data)))
        return len(kept)

    def records_since(self, t: float) -> list[StepRecord]:
        """The step records appended at or after `t` (within the last KEPT_S seconds)."""
        out: list[StepRecord] = []
        for when, rank, offset, size in list(self.appends):
            if when < t:
                continue
            try:
                fd = os.open(self.folder / f"rank{rank}.jsonl", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                data = os.pread(fd, size, offset)
            except OSError:
                data = b""
            finally:
                os.close(fd)
            for line in data.splitlines():
                item = parse_line(line, rank)
                if isinstance(item, StepRecord):
                    out.append(item)
        return out

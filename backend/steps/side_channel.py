"""Reads the ranks' step files (<run dir>/steps/rank<R>.jsonl) as they grow, without following symbolic links.

The supervisor calls `read_new` about once a second; each call returns only complete lines written since the last,
at most `budget` bytes a call, so a rank that wrote a flood is caught up over several calls, never in one stall.
"""

from __future__ import annotations

import os
import re
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

"""scheduler_end.json: a batch scheduler's own account of how a run's job ended (written by backend/slurm's job
follower), read into the run's evidence. Here, not in backend/slurm, so the supervisor and the diagnosis need
nothing from the floors above them: the file carries either a whole diagnosis (summary, kind, memory, evidence,
advice) for ends only the scheduler can explain (out of memory, time limit, node failure), or evidence lines only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEDULER_END = "scheduler_end.json"


def read_scheduler_end(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / SCHEDULER_END).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}

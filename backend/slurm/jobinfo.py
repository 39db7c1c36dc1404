"""slurm.json in a Slurm run's directory: the job id, its state and the nodes, as the job follower last saw them;
read by `runs show` (slurm_job_id, slurm_state, nodes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SLURM_JSON = "slurm.json"
MAX_BYTES = 1 << 20


def read_info(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / SLURM_JSON
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def slurm_fields(run_dir: str | Path) -> dict[str, Any]:
    """{} for a run that is not a Slurm job; else slurm_job_id, slurm_state, slurm_reason and nodes (per node:
    host, and while it ran sstat's per-step peaks: step, max_rss, ave_cpu, tasks)."""
    info = read_info(run_dir)
    if info is None:
        return {}
    end = info.get("end") or {}
    return {"slurm_job_id": info.get("job_id"), "slurm_state": info.get("state"),
            "slurm_reason": info.get("reason") or "", "slurm_end_source": end.get("source"),
            "nodes": info.get("nodes") or []}

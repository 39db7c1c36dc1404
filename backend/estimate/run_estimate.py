"""The estimate a run was launched with, kept in its run directory, and set beside what the run really used.

Before launch the estimate warns (prelaunch.check_preset); after the run, `runs show` and the dashboard put the same
figures next to the recorded peaks, so users learn how far to trust the estimate on their own jobs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindeck.backend.core.fileio import atomic_write_text

if TYPE_CHECKING:
    from traindeck.backend.estimate.prelaunch import LaunchMemoryCheck

ESTIMATE_FILE = "estimate.json"


def estimate_record(check: LaunchMemoryCheck) -> dict[str, Any]:
    row = check.row
    return {
        "model": check.shape.source,
        "params": check.shape.total_params,
        "strategy": row.strategy,
        "label": row.label,
        "gpu_bytes_per_device": row.gpu_bytes_per_device,  # model states (DeepSpeed's arithmetic)
        "gpu_total_bytes_per_device": row.gpu_total_bytes_per_device,  # + activations + overhead
        "cpu_bytes_per_node": row.cpu_bytes_per_node,
        "verdict": check.verdict,
        "warnings": list(check.warnings),
        "assumptions": list(check.assumptions),
        "row": row.to_dict(),  # the whole estimate row, to compare with the run's peaks afterwards
    }


def save_estimate(run_dir: Path | str, check: LaunchMemoryCheck) -> Path:
    path = Path(run_dir) / ESTIMATE_FILE
    atomic_write_text(path, json.dumps(estimate_record(check), indent=2))
    return path


def load_estimate(run_dir: Path | str) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(run_dir) / ESTIMATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def estimate_vs_measured(estimate: dict[str, Any], resources: dict[str, Any]) -> list[dict[str, Any]]:
    """The advisor's comparison (GPU per device, host RAM per rank, host RAM per node) of the kept estimate with a
    run's recorded peaks: [{what, estimated_bytes, measured_bytes (None: not recorded), measured_over_estimate}]."""
    from traindeck.backend.estimate.advisor import compare_with_measured
    from traindeck.backend.estimate.estimator import EstimateRow

    try:
        row = EstimateRow(**{**estimate["row"], "notes": tuple(estimate["row"].get("notes", ()))})
    except (KeyError, TypeError):  # written by another version: nothing to compare with
        return []
    return [{"what": c.what, "estimated_bytes": c.estimated, "measured_bytes": c.measured,
             "measured_over_estimate": None if c.ratio is None else round(c.ratio, 3)}
            for c in compare_with_measured(row, resources)]

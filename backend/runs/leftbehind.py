"""What `runs show` adds about what a run leaves behind: lineage, provenance, the kind of stop it supports."""

from __future__ import annotations

from typing import Any

from traindeck.backend.runs.provenance import load as load_provenance
from traindeck.backend.runs.resume import load_lineage
from traindeck.backend.runs.savestop import stop_kind


def summary_fields(run_dir: str) -> dict[str, Any]:
    lineage = load_lineage(run_dir) if run_dir else None
    return {
        "parent": lineage.parent if lineage else None,
        "resumed_from": lineage.resumed_from if lineage else None,
        "provenance": load_provenance(run_dir) if run_dir else None,
        "stop": stop_kind(run_dir) if run_dir else "signals",
    }

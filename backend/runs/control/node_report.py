"""A multi-node run's nodes as `runs show` prints them: per node its host, ranks and peaks (from the node watch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traindeck.backend.nodes.node_plan import read_nodes
from traindeck.backend.runs.supervisor.node_sampler import read_state


def nodes_summary(run_dir: Path, *, now: bool = False) -> list[dict[str, Any]] | None:
    """None for a one-machine run; else one entry per node (peaks empty before the watch has reported).
    `now`: each entry also gets `now`, the node's latest sample (the Monitor page shows it while the run runs)."""
    plan = read_nodes(run_dir)
    if plan is None:
        return None
    whole = read_state(run_dir) or {}
    state = {str(n.get("host")): n for n in whole.get("nodes", [])}
    out = []
    for host in plan["hosts"]:
        seen = state.get(str(host.get("host")), {})
        entry = {"host": host.get("host"), "ranks": host.get("ranks"), "peaks": seen.get("peaks") or {},
                 "reachable": seen.get("reachable", True), "unreachable": seen.get("unreachable") or "",
                 "ended_ranks": sorted(int(r) for r in (seen.get("ended") or {}))}
        if now:
            entry["now"] = _latest(seen.get("live") or {}, whole.get("t"))
        out.append(entry)
    return out


def _latest(live: dict[str, Any], written_at: Any) -> dict[str, Any]:
    """A node's latest sample in the peaks' names, and when the watch received it (None: no sample yet)."""
    ranks = [r for r in live.get("ranks") or [] if isinstance(r, dict)]
    gpus = [g for g in live.get("gpus") or [] if isinstance(g, dict)]
    return {"ranks_rss_bytes": sum(int(r.get("rss") or 0) for r in ranks) if ranks else None,
            "ranks_cpu_percent": sum(float(r.get("cpu") or 0.0) for r in ranks) if ranks else None,
            "cpu_percent": live.get("cpu"), "ram_used_bytes": live.get("ram_used"),
            "ram_total_bytes": live.get("ram_total"),
            "gpu_memory_bytes": max((g.get("used") or 0 for g in gpus), default=None) if gpus else None,
            "ranks_running": len(ranks), "written_at": live.get("at", written_at) if live else None}


def node_text(node: dict[str, Any]) -> str:
    peaks = node.get("peaks") or {}

    def gib(key: str) -> str:
        value = peaks.get(key)
        return f"{value / 2**30:.2f} GiB" if isinstance(value, (int, float)) else "-"

    ranks = ",".join(str(r) for r in node.get("ranks") or [])
    text = (f"{node.get('host')}  ranks {ranks}: peak ranks RSS {gib('ranks_rss_bytes')}, peak RAM used "
            f"{gib('ram_used_bytes')} of {gib('ram_total_bytes')}")
    if isinstance(peaks.get("cpu_percent"), (int, float)):
        text += f", peak CPU {peaks['cpu_percent']:.0f}%"
    if peaks.get("gpu_memory_bytes") is not None:
        text += f", peak GPU memory {gib('gpu_memory_bytes')}"
    if not node.get("reachable", True):
        text += f"; UNREACHABLE ({node.get('unreachable')})"
    return text

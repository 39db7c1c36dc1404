"""What the node watch saw, for the supervisor's end-of-run diagnosis: the remote ranks' ends (with their exit
codes from the node's own launch.py line) and which node each rank ran on, and the nodes that became unreachable.

Remote ranks are not the supervisor's descendants, so without this the diagnosis would know only the launcher.
A rank's end is stamped by the watch when its node's agent reports it (agents poll their ranks every 50 ms), on
the one clock of this machine: two nodes' clocks need not agree.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from traindeck.backend.runs.diagnosis.diagnose import Diagnosis, ProcessEnd

# pdsh's "HOST: " prefix, then DeepSpeed launch.py's "[...'--local_rank=K'...] exits with return code = N".
_REMOTE_EXIT = re.compile(r"^(\S+): .*--local_rank=(\d+).*exits with return code = (-?\d+)")


def _state(run_dir: Path) -> dict[str, Any] | None:
    from traindeck.backend.runs.supervisor.node_sampler import read_state

    return read_state(run_dir)


def rank_hosts(state: dict[str, Any]) -> dict[int, str]:
    return {int(r): str(n["host"]) for n in state["nodes"] for r in n.get("ranks") or []}


def remote_ends(run_dir: Path, log_lines: Sequence[str]) -> list[ProcessEnd]:
    state = _state(run_dir)
    if state is None:
        return []
    codes: dict[tuple[str, int], int] = {}
    for line in log_lines:
        m = _REMOTE_EXIT.match(line)
        if m:
            codes[(m.group(1), int(m.group(2)))] = int(m.group(3))
    ends = []
    for node in state["nodes"]:
        ranks = [int(r) for r in node.get("ranks") or []]
        pids = node.get("rank_pids") or {}
        for rank_text, when in (node.get("ended") or {}).items():
            rank = int(rank_text)
            local = ranks.index(rank) if rank in ranks else -1
            code = codes.get((str(node["host"]), local))
            ends.append(ProcessEnd(int(pids.get(rank_text, 0)), "rank", rank, float(when), code))
    return ends


def with_nodes(run_dir: Path, diagnosis: Diagnosis, state_name: str) -> Diagnosis:
    """The diagnosis with the blamed rank's node named, and unreachable nodes said."""
    state = _state(run_dir)
    if state is None:
        return diagnosis
    summary, evidence = diagnosis.summary, list(diagnosis.evidence)
    node = ""
    if diagnosis.rank is not None:
        node = rank_hosts(state).get(diagnosis.rank, "")
        if node:
            named = re.sub(rf"\b([Rr]ank {diagnosis.rank})\b", rf"\1 (node {node})", summary, count=1)
            summary = named if named != summary else f"{summary} (rank {diagnosis.rank} ran on node {node})"
    lost = [n for n in state["nodes"] if not n.get("reachable", True)]
    for n in lost:
        evidence.append(f"node {n['host']} became unreachable: {n.get('unreachable') or 'its agent stopped answering'}")
    if lost and state_name == "failed":
        summary += " " + " ".join(f"Node {n['host']} became unreachable during the run." for n in lost)
    return dataclasses.replace(diagnosis, summary=summary, evidence=evidence, node=node)

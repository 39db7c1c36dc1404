"""A run's stacks with its collectives ledger, taken together: each living rank is asked for its Python stack
(stacks.py) and its flight recorder buffer (collectives.py) at once, and the report keeps both. Apart from the two,
so that neither imports the other. A multi-node run's ranks on its nodes are asked through the run's node watch and
their agents (nodes/stack_requests.py) meanwhile, and added with their host; the flight recorder dumps the nodes
send back join this machine's in one ledger, which names each rank's node."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from traindeck.backend.launch.extension_locks import waited_locks
from traindeck.backend.nodes import stack_requests
from traindeck.backend.nodes.node_plan import read_nodes
from traindeck.backend.runs.diagnosis import collectives
from traindeck.backend.runs.diagnosis.collectives import Ledger
from traindeck.backend.runs.diagnosis.stacks import (
    BUILD_LOCK_WAIT,
    StackReport,
    add_node_stacks,
    armed_processes,
    save_report,
    stack_targets,
    summarize,
    take_stacks,
)


def take_run_stacks(run_dir: Path, processes: Sequence[dict[str, Any]], *, reason: str = "request",
                    keep_as: str = "stacks.json") -> StackReport | None:
    """Stacks of a run's living ranks (without ranks: of every process that armed dumps), kept in its directory
    as `keep_as`; None when there is nobody to ask. Ranks waiting on an op build lock are told who holds it, and a
    stale one is removed (extension_locks.waited_locks)."""
    targets = [t for t in stack_targets(processes) if t[1] is not None] or armed_processes(run_dir) \
        or stack_targets(processes)
    nodes = read_nodes(run_dir)
    if not targets and nodes is None:
        return None
    request = stack_requests.ask(run_dir) if nodes is not None and stack_requests.watch_running(run_dir) else None
    asked_at = time.monotonic()
    refused = collectives.request_dumps(run_dir, targets)
    report = take_stacks(run_dir, targets, reason=reason, build_locks=waited_locks)
    remote: dict[int, str] = {}  # rank on a node -> "" (its dump came back) or why not
    hosts: dict[int, str] = {}
    if nodes is not None:
        for node in _add_nodes(report, run_dir, nodes, request):
            remote.update(node.ledger_missing())
            remote.update({rank: "" for rank, why in node.ledgers.items() if not why})
            hosts.update({rank: node.host for rank in [*node.ranks_planned, *node.ledgers]})
    ledger = collectives.collect_dumps(run_dir, targets, refused, started=asked_at, remote=remote, hosts=hosts)
    if ledger.groups or remote or any(rank is not None for _pid, rank in targets):  # no process groups: no ledger
        add_ledger(report, ledger)
    save_report(run_dir / keep_as, report)
    return report


def _add_nodes(report: StackReport, run_dir: Path, nodes: dict[str, Any],
               request: str | None) -> list[stack_requests.NodeStacks]:
    """The ranks on the run's nodes, as the node watch answers `request` (None: the watch is not running); the
    answer, per node."""
    answer = stack_requests.wait_answer(run_dir, request) if request is not None else None
    if answer is None:
        why = (f"the run's node watch did not answer within {stack_requests.ANSWER_WAIT_S:g} s" if request is not None
               else "the run's node watch is not running, so its nodes could not be asked")
        answer = [stack_requests.NodeStacks(str(h.get("host")), i, False, why,
                                            ranks_planned=[int(r) for r in h.get("ranks") or []])
                  for i, h in enumerate(nodes.get("hosts") or [])]
    add_node_stacks(report.ranks, answer)
    local = [r.pid for r in report.ranks if not r.host and r.waits_in == BUILD_LOCK_WAIT]
    report.summary = summarize(report.ranks, waited_locks(local) if local else ())
    return answer


def add_ledger(report: StackReport, ledger: Ledger) -> None:
    """Keep the ledger in the report; where ranks part, its line leads the summary, then who is where: "rank 1
    never entered all_reduce #37 (process group 0) that ranks 0, 2 wait in; rank 1 is in train.py:88 load_batch;
    ranks 0, 2 wait in all_reduce (train.py:40 step)"."""
    report.collectives = ledger.to_json()
    if any(g.divergence for g in ledger.groups):
        report.summary = f"{ledger.summary}; {report.summary}"


__all__ = ["add_ledger", "take_run_stacks"]

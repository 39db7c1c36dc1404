"""Asking a multi-node run's node watch for the stacks of the ranks on its nodes, and its answer: files in the run
directory, so that any process on the launching machine can ask (`traindeck stacks`, the dashboard's Stacks button,
the supervisor's stall detector).

The asker writes node_stacks/<ID>.request; the watch (runs/supervisor/node_sampler.py, which polls the folder) tells
every reachable node's agent `stacks ID` (agent.py), gathers what each sends back and writes node_stacks/<ID>.json:
per node its host, whether it answered (else why not), per rank its pid, dump text and error, and per rank whether
its flight recorder dump came back: the watch writes each one into the run directory's collectives/rank<R>.pkl
before the answer (so the asker reads it with the ranks of this machine, collectives.py), or says why not. The
asker waits for the answer a bounded time (a node that cannot answer is said so, never waited on for long) and
removes both files.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text

FOLDER = "node_stacks"
ANSWER_WAIT_S = 10.0  # the asker's longest wait for the watch's answer
LEDGER_MAX = 4 << 20  # the most of one rank's flight recorder dump a node sends back (agent.py's own LEDGER_MAX)
NODES_WAIT_S = 7.0  # the watch's longest wait for the agents' answers (an agent waits at most 5 s for the dumps)
WATCH_STATE = "nodes_state.json"  # the watch rewrites it every 0.5 s while it runs
WATCH_FRESH_S = 5.0
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass
class NodeRankStack:
    rank: int
    pid: int
    text: str = ""  # faulthandler's dump as the rank appended it on its node
    error: str = ""


@dataclass
class NodeStacks:
    host: str
    node_rank: int
    answered: bool
    error: str = ""  # why the node did not answer
    ranks: list[NodeRankStack] = field(default_factory=list)
    ranks_planned: list[int] = field(default_factory=list)  # the node's ranks in the run's plan
    # rank -> "" (its flight recorder dump is the run directory's collectives/rank<R>.pkl) or why there is none
    ledgers: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "node_rank": self.node_rank, "answered": self.answered, "error": self.error,
                "ranks_planned": self.ranks_planned,
                "ranks": [{"rank": r.rank, "pid": r.pid, "text": r.text, "error": r.error} for r in self.ranks],
                "ledgers": {str(rank): why for rank, why in sorted(self.ledgers.items())}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeStacks:
        ranks = [NodeRankStack(int(r["rank"]), int(r["pid"]), str(r.get("text") or ""), str(r.get("error") or ""))
                 for r in data.get("ranks") or []]
        ledgers = {int(rank): str(why or "") for rank, why in (data.get("ledgers") or {}).items()}
        return cls(str(data["host"]), int(data.get("node_rank", 0)), bool(data.get("answered")),
                   str(data.get("error") or ""), ranks, [int(r) for r in data.get("ranks_planned") or []], ledgers)

    def ledger_missing(self) -> dict[int, str]:
        """rank -> why the node sent no flight recorder dump of it, for each planned rank without one."""
        why = "not running on its node" if self.answered else self.error or "its node did not answer"
        out = {rank: reason for rank, reason in self.ledgers.items() if reason}
        out.update({rank: why for rank in self.ranks_planned if rank not in self.ledgers})
        return out


def valid_id(request_id: str) -> bool:
    return bool(_ID.match(request_id))


def watch_running(run_dir: Path) -> bool:
    """Whether the run's node watch is there to answer (it rewrote its state file lately)."""
    try:
        return time.time() - (Path(run_dir) / WATCH_STATE).stat().st_mtime < WATCH_FRESH_S
    except OSError:
        return False


def ask(run_dir: Path) -> str:
    """Leave a request for the watch; its id."""
    request_id = uuid.uuid4().hex[:16]
    folder = Path(run_dir) / FOLDER
    folder.mkdir(mode=0o700, exist_ok=True)
    atomic_write_text(folder / f"{request_id}.request", json.dumps({"t": time.time()}) + "\n")
    return request_id


def requests(run_dir: Path) -> list[str]:
    """The ids of the requests waiting for the watch."""
    try:
        names = os.listdir(Path(run_dir) / FOLDER)
    except OSError:
        return []
    return sorted(name[: -len(".request")] for name in names
                  if name.endswith(".request") and valid_id(name[: -len(".request")]))


def answer(run_dir: Path, request_id: str, nodes: list[NodeStacks], took_s: float) -> None:
    """The watch's answer to a request (which it removes); none when the asker gave up waiting (it removed it)."""
    folder = Path(run_dir) / FOLDER
    if not (folder / f"{request_id}.request").exists():
        return
    atomic_write_text(folder / f"{request_id}.json",
                      json.dumps({"took_s": round(took_s, 3), "nodes": [n.to_json() for n in nodes]}) + "\n")
    _remove(folder / f"{request_id}.request")


def wait_answer(run_dir: Path, request_id: str, timeout_s: float = ANSWER_WAIT_S, *,
                sleep: Callable[[float], None] = time.sleep) -> list[NodeStacks] | None:
    """The watch's answer, or None when it gave none within `timeout_s`; the request and answer files removed."""
    folder = Path(run_dir) / FOLDER
    path = folder / f"{request_id}.json"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                return [NodeStacks.from_json(n) for n in data.get("nodes") or []]
            except FileNotFoundError:
                pass
            except (OSError, ValueError, KeyError, TypeError):
                return None
            if time.monotonic() >= deadline:
                return None
            sleep(0.05)
    finally:
        _remove(folder / f"{request_id}.request")
        _remove(path)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass

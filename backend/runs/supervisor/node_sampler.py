"""The node watch: one detached process per multi-node run, `python -m traindeck.backend.runs.supervisor.node_sampler RUN_DIR STORE`.

Started beside the supervisor (launch.py, like the sidecar) when the run has a nodes.json. It starts the agent
(backend/nodes/agent.py) on every node over ssh, the same way the run reaches the nodes, and:

- keeps nodes_state.json in the run directory (atomic, every second): per node its host, ranks (pid, RSS, CPU),
  host CPU/RAM, GPUs, the peaks so far, the ranks that ended and when (stamped here, on one clock for all nodes),
  and whether the node is reachable (an agent's ssh that ends while the run runs: the node is unreachable);
- passes a stop on to every node: when the run's stop file appears it sends SIGINT to the run's processes on each
  node through its agent, SIGTERM after the grace period, then SIGKILL (as the supervisor does here);
- appends the step timing the agents send back (each node's ranks write it on their node) to the run
  directory's steps/, where the supervisor reads it as a local rank's; what comes after the supervisor's last
  read (the last steps of a rank far away) the watch adds to the store itself at its end;
- answers requests for the stacks of the nodes' ranks (nodes/stack_requests.py: `traindeck stacks`, the stall
  detector): it polls the run directory's node_stacks/ every 0.1 s, tells every reachable agent `stacks ID`, and
  writes what each node sent back (or why it did not) as the answer, at most NODES_WAIT_S after the request. The
  ranks' flight recorder dumps the agents send with their stacks are written (bytes as sent, at most
  stack_requests.LEDGER_MAX each, never unpickled here) to the run directory's collectives/rank<R>.pkl before the
  answer names them, where `take_run_stacks` reads them with this machine's ranks' (diagnosis/collectives.py);
- when the run has ended, asks every agent what is left of the run on its node, records per node "nothing
  left" / what is left / "unreachable: not confirmed" as run events, and closes the agents (which end leftovers
  and remove the run's folder on their node).

The supervisor reads nodes_state.json at the end (nodes/diagnose.py) to name the node of the first failing rank.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from traindeck.backend.core.fileio import atomic_write_bytes, atomic_write_text
from traindeck.backend.nodes import stack_requests
from traindeck.backend.nodes.envfile import node_run_dir
from traindeck.backend.nodes.node_plan import read_nodes
from traindeck.backend.nodes.ssh_argv import ssh_argv
from traindeck.backend.runs.diagnosis.collectives import COLLECTIVES_DIR
from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.supervisor.diary import log_to_stderr
from traindeck.backend.steps import RelayedSteps

STATE_FILE = "nodes_state.json"
LOG = "nodes.log"
AGENT_SOURCE = Path(__file__).parents[2] / "nodes" / "agent.py"  # sent over ssh as source: nothing to install there
logger = logging.getLogger("traindeck.nodes")


class Node:
    def __init__(self, index: int, host: str, ranks: list[int]) -> None:
        self.index, self.host, self.ranks = index, host, ranks
        self.proc: subprocess.Popen[str] | None = None
        self.live: dict[str, Any] = {}
        self.peaks: dict[str, float] = {}
        self.rank_pids: dict[int, int] = {}
        self.ended: dict[int, float] = {}  # rank -> when the watch heard of its end
        self.reachable = True
        self.said_unreachable = ""
        self.left: list[int] | None = None
        self.answered = threading.Event()
        self.lock = threading.Lock()

    def to_json(self) -> dict[str, Any]:
        with self.lock:
            return {"host": self.host, "node_rank": self.index, "ranks": self.ranks,
                    "rank_pids": {str(k): v for k, v in self.rank_pids.items()},
                    "ended": {str(k): v for k, v in self.ended.items()}, "reachable": self.reachable,
                    "unreachable": self.said_unreachable, "live": self.live, "peaks": self.peaks, "left": self.left}

    def take(self, data: dict[str, Any]) -> None:
        event = data.get("event")
        with self.lock:
            if event == "rank_started":
                self.rank_pids[int(data["rank"])] = int(data["pid"])
            elif event == "rank_ended":
                self.ended.setdefault(int(data["rank"]), time.time())
            elif event == "left":
                self.left = [int(p) for p in data.get("pids") or []]
                self.answered.set()
            elif event == "sample":
                self.live = {k: data.get(k) for k in ("ranks", "cpu", "ram_used", "ram_total", "gpus")}
                self.live["at"] = time.time()  # this node's own freshness, on the watch's clock (not the node's)
                rss = sum(int(r.get("rss") or 0) for r in data.get("ranks") or [])
                figures = {"ranks_rss_bytes": rss, "cpu_percent": data.get("cpu"),
                           "ram_used_bytes": data.get("ram_used"),
                           "gpu_memory_bytes": max((g.get("used") or 0 for g in data.get("gpus") or []), default=None)}
                for key, value in figures.items():
                    if isinstance(value, (int, float)) and value > self.peaks.get(key, -1):
                        self.peaks[key] = value
                if data.get("ram_total"):
                    self.peaks["ram_total_bytes"] = data["ram_total"]


class NodeWatch:
    def __init__(self, run_dir: Path, store_path: str) -> None:
        self.run_dir = RunDir(Path(run_dir))
        self.store = RunStore(store_path)
        doc = read_nodes(self.run_dir.path) or {"hosts": []}
        self.ssh_port = doc.get("ssh_port")
        self.python = str(doc.get("python") or sys.executable)
        self.nodes = [Node(i, str(h["host"]), [int(r) for r in h["ranks"]]) for i, h in enumerate(doc["hosts"])]
        self.run_env = self._run_env()
        self.steps = RelayedSteps(self.run_dir.path)
        self.steps_lock = threading.Lock()
        self.relayed: dict[int, int] = {}  # rank -> step lines its node sent back
        self.stack_lock = threading.Lock()
        self.tell_lock = threading.Lock()
        # request id -> (when asked, per node index: the ranks' stacks sent so far, and whether it said it is done)
        self.stack_asks: dict[str, tuple[float, dict[int, list[stack_requests.NodeRankStack]], set[int]]] = {}
        # request id -> node index -> rank -> "" (its flight recorder dump is written) or why there is none
        self.ledger_asks: dict[str, dict[int, dict[int, str]]] = {}
        self.ledger_sizes: dict[int, int] = {}  # rank -> bytes of its newest dump written (for the log)

    def _run_env(self) -> dict[str, str]:
        """The ssh options the run's pdsh got (PDSH_SSH_ARGS_APPEND, from the recorded command)."""
        import os

        try:
            recorded = json.loads(self.run_dir.command.read_text()).get("env") or {}
        except (OSError, ValueError):
            recorded = {}
        env = dict(os.environ)
        if isinstance(recorded.get("PDSH_SSH_ARGS_APPEND"), str):
            env["PDSH_SSH_ARGS_APPEND"] = recorded["PDSH_SSH_ARGS_APPEND"]
        return env

    def start(self) -> None:
        source = AGENT_SOURCE.read_text(encoding="utf-8")
        for node in self.nodes:
            remote = [self.python, "-c", source, self.run_dir.run_id, str(node.index), ",".join(map(str, node.ranks)),
                      node_run_dir(self.run_dir.run_id)]
            argv = ssh_argv(node.host, remote, port=self.ssh_port, env=self.run_env)
            try:
                node.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True, bufsize=1, env=self.run_env)
            except OSError as exc:
                self._unreachable(node, f"ssh could not start: {exc}")
                continue
            threading.Thread(target=self._read, args=(node,), daemon=True).start()

    def _read(self, node: Node) -> None:
        assert node.proc is not None and node.proc.stdout is not None
        for line in node.proc.stdout:
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if not isinstance(data, dict):
                continue
            if data.get("event") == "steps":
                rank = data.get("rank")
                if isinstance(rank, int) and rank in node.ranks:  # a node speaks for its own ranks only
                    with self.steps_lock:
                        self.relayed[rank] = self.relayed.get(rank, 0) + self.steps.append(rank, data.get("lines"))
            elif data.get("event") in ("stacks", "stacks_done"):
                self._take_stacks(node, data)
            elif data.get("event") == "collectives":
                self._take_ledger(node, data)
            else:
                node.take(data)
        code = node.proc.wait()
        err = (node.proc.stderr.read() if node.proc.stderr else "").strip().splitlines()
        if not self.closing:
            self._unreachable(node, f"the agent's ssh ended (exit {code}"
                              + (f": {err[-1]}" if err else "") + ")")
        node.answered.set()

    closing = False

    def _take_stacks(self, node: Node, data: dict[str, Any]) -> None:
        with self.stack_lock:
            asked = self.stack_asks.get(str(data.get("id")))
            if asked is None:
                return  # answered already (too late), or never asked
            _at, sent, done = asked
            if data.get("event") == "stacks_done":
                done.add(node.index)
                return
            rank, pid = data.get("rank"), data.get("pid")
            if isinstance(rank, int) and rank in node.ranks and isinstance(pid, int):  # its own ranks only
                sent.setdefault(node.index, []).append(stack_requests.NodeRankStack(
                    rank, pid, str(data.get("text") or "")[:1 << 20], str(data.get("error") or "")[:500]))

    def _take_ledger(self, node: Node, data: dict[str, Any]) -> None:
        """A rank's flight recorder dump as its node sent it (base64): written to collectives/rank<R>.pkl in the
        run directory, as this machine's ranks write theirs; its bytes are not unpickled here."""
        request_id, rank = str(data.get("id")), data.get("rank")
        if not isinstance(rank, int) or rank not in node.ranks:  # a node speaks for its own ranks only
            return
        with self.stack_lock:
            if request_id not in self.stack_asks:
                return  # answered already (too late), or never asked
        why = str(data.get("error") or "")[:500]
        dump = data.get("dump")
        if not why:
            try:
                raw = base64.b64decode(dump if isinstance(dump, str) else "", validate=True)
            except (binascii.Error, ValueError):
                raw = b""
            if not raw or len(raw) > stack_requests.LEDGER_MAX:
                why = "its node sent no readable flight recorder dump"
            else:
                try:
                    folder = self.run_dir.path / COLLECTIVES_DIR
                    folder.mkdir(mode=0o700, exist_ok=True)
                    atomic_write_bytes(folder / f"rank{rank}.pkl", raw)
                    self.ledger_sizes[rank] = len(raw)
                except OSError as exc:
                    why = f"its flight recorder dump could not be written here ({exc.strerror or exc})"
        with self.stack_lock:
            if request_id in self.stack_asks:
                self.ledger_asks.setdefault(request_id, {}).setdefault(node.index, {})[rank] = why

    def serve_stacks(self) -> None:
        """Forever (a daemon thread): new requests are passed to the agents, and answered once every reachable
        node has said it is done, or NODES_WAIT_S after they were asked."""
        while True:
            try:
                self._serve_stacks_once()
            except Exception:  # noqa: BLE001 - a request left unanswered is said so by the asker
                logger.exception("answering a stacks request failed:")
            time.sleep(0.1)

    def _serve_stacks_once(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for request_id in stack_requests.requests(self.run_dir.path):
            with self.stack_lock:
                if request_id in self.stack_asks:
                    continue
                self.stack_asks[request_id] = (now, {}, set())
            for node in self.nodes:
                self.tell(node, f"stacks {request_id}")
        with self.stack_lock:
            ready = [(request_id, asked) for request_id, asked in self.stack_asks.items()
                     if all(n.index in asked[2] or not n.reachable for n in self.nodes)
                     or now - asked[0] >= stack_requests.NODES_WAIT_S]
            ledgers = {request_id: self.ledger_asks.pop(request_id, {}) for request_id, _asked in ready}
            for request_id, _asked in ready:
                del self.stack_asks[request_id]
        for request_id, (at, sent, done) in ready:
            nodes = []
            for node in self.nodes:
                answered = node.index in done
                error = "" if answered else (f"unreachable ({node.said_unreachable})" if not node.reachable else
                                             f"its agent did not answer within {stack_requests.NODES_WAIT_S:g} s")
                nodes.append(stack_requests.NodeStacks(node.host, node.index, answered, error,
                                                       sorted(sent.get(node.index, []), key=lambda r: r.rank),
                                                       list(node.ranks), ledgers[request_id].get(node.index, {})))
            took = now - at
            stack_requests.answer(self.run_dir.path, request_id, nodes, took)
            logger.info("stacks from the nodes (request %s, %.2f s): %s; flight recorder dumps: %s", request_id, took,
                        "; ".join(f"{n.host}: " + (", ".join(f"rank {r.rank}" + (f" ({r.error})" if r.error else "")
                                                            for r in n.ranks) or "no rank")
                                  if n.answered else f"{n.host}: {n.error}" for n in nodes),
                        ", ".join(f"rank {rank} " + (why or f"{self.ledger_sizes.get(rank, 0)} bytes")
                                  for n in nodes for rank, why in sorted(n.ledgers.items())) or "none")

    def _unreachable(self, node: Node, why: str) -> None:
        with node.lock:
            node.reachable, node.said_unreachable = False, why
        self.store.add_event(self.run_dir.run_id, "node_unreachable", f"node {node.host} became unreachable: {why}")
        logger.warning("node %s unreachable: %s", node.host, why)

    def _store_late_steps(self) -> None:
        """The steps appended from a little before the run was seen ended (the supervisor's last read of the files
        came at its end, shortly before): stored again where they were (one row a step), added where not."""
        since = (self.ended_seen or time.time()) - 30.0
        with self.steps_lock:
            late = self.steps.records_since(since)
            hosts = {rank: node.host for node in self.nodes for rank in node.ranks}
            logger.info("step timing lines sent back by the nodes: %s", ", ".join(
                f"rank {rank} from {hosts.get(rank)}: {count}" for rank, count in sorted(self.relayed.items()))
                or "none")
        if late:
            try:
                self.store.add_steps(self.run_dir.run_id, late)
            except Exception as exc:  # noqa: BLE001 - the files keep them; `traindeck steps` reads those too
                logger.warning("could not store the last relayed steps: %r", exc)

    def tell(self, node: Node, text: str) -> None:
        stdin: IO[str] | None = node.proc.stdin if node.proc is not None else None
        if stdin is None or not node.reachable:
            return
        try:
            with self.tell_lock:  # the loop and the stacks server both tell
                stdin.write(text + "\n")
                stdin.flush()
        except (OSError, ValueError):
            pass

    def save(self) -> None:
        try:
            atomic_write_text(self.run_dir.path / STATE_FILE,
                              json.dumps({"nodes": [n.to_json() for n in self.nodes], "t": time.time()}))
        except OSError as exc:
            logger.warning("could not write %s: %s", STATE_FILE, exc)

    def loop(self) -> None:
        stop_at: float | None = None
        phase = -1
        grace = 10.0
        while True:
            record = self.store.get_run(self.run_dir.run_id)
            if record is None or record.finished:
                self.ended_seen = time.time()
                break
            request = self.run_dir.stop_request()
            if request is not None and stop_at is None:
                stop_at = time.monotonic()
                try:
                    grace = max(0.0, float(request.get("grace_s", 10.0)))
                except (TypeError, ValueError):
                    pass
            if stop_at is not None:
                elapsed = time.monotonic() - stop_at
                due = 2 if elapsed >= grace + min(grace, 10.0) else 1 if elapsed >= grace else 0
                if due > phase:
                    phase = due
                    name = ("SIGINT", "SIGTERM", "SIGKILL")[due]
                    for node in self.nodes:
                        self.tell(node, f"signal {name}")
                    self.store.add_event(self.run_dir.run_id, "stop_signal",
                                         f"sent {name} to the run's processes on {len(self.nodes)} node(s)")
            self.save()
            time.sleep(0.5)
        self.confirm()

    ended_seen: float | None = None

    def confirm(self) -> None:
        """Per node: is anything of the run left there? Asked of each agent (which first sends its ranks' last
        step lines), said as a run event. Then the step records that came after the supervisor's last read."""
        self.closing = True
        for node in self.nodes:
            node.answered.clear()
            self.tell(node, "left")
        for node in self.nodes:
            node.answered.wait(timeout=15.0)
        self._store_late_steps()
        for node in self.nodes:
            if not node.reachable:
                text, kind = f"node {node.host}: unreachable, so nothing could be confirmed there", "unconfirmed"
            elif node.left is None:
                text, kind = f"node {node.host}: its agent did not answer; not confirmed", "unconfirmed"
            elif node.left:
                text, kind = f"node {node.host}: {len(node.left)} process(es) of the run left: {node.left}; " \
                             "its agent ends them", "leftovers"
            else:
                text, kind = f"node {node.host}: nothing of the run remains", "confirmed"
            self.store.add_event(self.run_dir.run_id, kind, text)
        self.save()
        for node in self.nodes:
            if node.proc is not None and node.proc.stdin is not None:
                try:
                    node.proc.stdin.close()  # the agent ends what is left and exits
                except OSError:
                    pass
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=10.0)
                except subprocess.TimeoutExpired:
                    node.proc.kill()


def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(run_dir) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("nodes"), list) else None


def start_watch(run_dir: Path, store_path: Path) -> int | None:
    """Start the node watch for a multi-node run just started; its pid, or None (the run goes on unwatched)."""
    from traindeck.backend.runs.supervisor.beside import start_beside

    if read_nodes(run_dir) is None:
        return None
    return start_beside("traindeck.backend.runs.supervisor.node_sampler", run_dir, store_path, LOG)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m traindeck.backend.runs.supervisor.node_sampler RUN_DIR STORE", file=sys.stderr)
        return 2
    log_to_stderr(logger)
    watch = NodeWatch(Path(args[0]), args[1])
    watch.start()
    threading.Thread(target=watch.serve_stacks, name="stacks", daemon=True).start()
    try:
        watch.loop()
    except Exception:
        logger.exception("node watch failed:")
        watch.confirm()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

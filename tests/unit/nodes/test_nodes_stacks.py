"""The stacks of a multi-node run's ranks on their own machines, without ssh: a rank armed by the real site hook
dumping into its node folder, the agent's `stacks` command signalling only the ranks that catch SIGUSR2 and sending
their dumps back, its clean-up at the end, the watch's handling of a request (a node speaks for its own ranks; a
node that does not answer is said so, after a bounded wait) and the report that names each rank's node. With them,
the ranks' flight recorder dumps: asked through each rank's FIFO in the node folder (a real gloo rank), sent back
as bytes, written into the run directory by the watch and compared with the other nodes' in one ledger."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from traindeck.backend.nodes import agent as agent_module
from traindeck.backend.nodes import stack_requests
from traindeck.backend.runs.diagnosis.collectives import collect_dumps, load_dump
from traindeck.backend.runs.diagnosis.run_stacks import take_run_stacks
from traindeck.backend.runs.diagnosis.stacks import RankStack, add_node_stacks, summarize
from traindeck.backend.runs.supervisor.node_sampler import NodeWatch

REPO = Path(__file__).parents[3]
HOOK_DIR = REPO / "backend" / "launch" / "site_hook"
RANK_CODE = """
import time
def load_batch():
    while True:
        time.sleep(0.05)
load_batch()
"""
DUMP = ('Thread 0x00007f00 (most recent call first):\n  File "/x/lib/python3.11/threading.py", line 320 in wait\n'
        'Current thread 0x00007f01 (most recent call first):\n  File "/w/train.py", line {line} in {function}\n'
        '  File "/w/train.py", line 90 in <module>\n')
COLLECTIVE = ('Current thread 0x00007f01 (most recent call first):\n'
              '  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 2501 in all_reduce\n'
              '  File "/w/train.py", line 40 in main\n  File "/w/train.py", line 90 in <module>\n')


def _wait(predicate: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return predicate()


def _rank(node_dir: Path, rank: int) -> subprocess.Popen[bytes]:
    """A rank on a node: the run's site hook with the node folder (no run directory on this machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINDECK_")}
    env.update(PYTHONPATH=str(HOOK_DIR), TRAINDECK_NODE_DIR=str(node_dir), RANK=str(rank), TRAINDECK_STEP_TIMING="0",
               TRAINDECK_FLIGHT_RECORDER="0")
    return subprocess.Popen([sys.executable, "-c", RANK_CODE], env=env)


def _events(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_agent_dumps_its_armed_ranks_on_its_node_leaves_the_others_alone_and_cleans_up(tmp_path: Path) -> None:
    node_dir = tmp_path / "node-runs" / "run-1"
    armed = _rank(node_dir, 0)
    unarmed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # catches no SIGUSR2
    try:
        dump = node_dir / "stacks" / f"{armed.pid}.txt"
        assert _wait(lambda: dump.exists() and agent_module._catches(armed.pid)), "the site hook armed no dump"
        out = io.StringIO()
        agent = agent_module.Agent("run-1", 1, [0, 1], out, node_dir=str(node_dir))
        agent.ranks_seen = {armed.pid: 0, unarmed.pid: 1}
        agent.take_stacks("req-1")
        events = _events(out)
        assert [e["event"] for e in events] == ["stacks", "stacks", "collectives", "collectives", "stacks_done"], \
            events
        by_rank = {e["rank"]: e for e in events if e["event"] == "stacks"}
        assert by_rank[0]["pid"] == armed.pid and by_rank[0]["error"] == ""
        assert "in load_batch" in by_rank[0]["text"] and by_rank[0]["text"].count("(most recent call first)") >= 1
        assert "did not arm stack dumps" in by_rank[1]["error"] and by_rank[1]["text"] == ""
        assert events[-1]["id"] == "req-1"
        assert unarmed.poll() is None and armed.poll() is None  # nobody was stopped by the signal
        agent.remove_stacks()
        assert dump.exists()  # its rank still runs
    finally:
        for proc in (armed, unarmed):
            proc.kill()
            proc.wait()
    agent.remove_stacks()
    assert not node_dir.exists()  # nothing of the run stays on the node


GLOO_RANK = """
import sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
open(sys.argv[1], "w").close()
while True:
    time.sleep(0.05)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ledger_rank(node_dir: Path, rank: int, code: str, *args: str) -> subprocess.Popen[bytes]:
    """A rank on a node with its flight recorder armed by the real site hook (world of one: its own gloo group)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINDECK_")}
    env.update(PYTHONPATH=str(HOOK_DIR), TRAINDECK_NODE_DIR=str(node_dir), RANK=str(rank), WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), TORCH_FR_BUFFER_SIZE="2000",
               TRAINDECK_STEP_TIMING="0")
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env)


def test_the_agent_sends_each_ranks_flight_recorder_dump_from_its_fifo_or_why_not_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node_dir = tmp_path / "node-runs" / "run-1"
    ready = tmp_path / "ready"
    grouped = _ledger_rank(node_dir, 0, GLOO_RANK, str(ready))
    lonely = _ledger_rank(node_dir, 1, "import time\nwhile True: time.sleep(0.05)")  # no process group yet
    unarmed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    folder = node_dir / "collectives"
    try:
        assert _wait(lambda: ready.exists() and (folder / f"{lonely.pid}.fifo").exists(), timeout=120), \
            "the ranks did not start"
        out = io.StringIO()
        agent = agent_module.Agent("run-1", 0, [0, 1, 2], out, node_dir=str(node_dir))
        agent.ranks_seen = {grouped.pid: 0, lonely.pid: 1, unarmed.pid: 2}
        agent.rank_pids = set(agent.ranks_seen)
        agent.take_stacks("req-1")
        events = _events(out)
        assert events[-1]["event"] == "stacks_done"
        sent = {e["rank"]: e for e in events if e["event"] == "collectives"}
        assert [(r, sent[r]["pid"], sent[r]["error"]) for r in sorted(sent)] == [
            (0, grouped.pid, ""), (1, lonely.pid, "no process group yet"),
            (2, unarmed.pid, "the flight recorder dump is not armed in this rank")]
        dump = base64.b64decode(sent[0]["dump"])
        assert len(dump) == sent[0]["size"] == (folder / "rank0.pkl").stat().st_size
        entries = load_dump(dump)["entries"]  # the launching machine's refusing unpickler reads it whole
        assert [(e["collective_seq_id"], e["profiling_name"]) for e in entries] == [
            (n, "gloo:all_reduce") for n in (1, 2, 3)]
        assert sent[1]["dump"] == sent[2]["dump"] == ""
        monkeypatch.setattr(agent_module, "LEDGER_MAX", len(dump) - 1)  # too large: no bytes, and why
        out.seek(0), out.truncate()
        agent.take_stacks("req-2")
        too_big = next(e for e in _events(out) if e["event"] == "collectives" and e["rank"] == 0)
        assert (too_big["dump"], too_big["size"]) == ("", 0)
        assert too_big["error"].startswith("its flight recorder dump is 0.0 MB, more than the 0 MB a node sends "
                                           "back"), too_big
        agent.remove_ledgers()
        assert (folder / f"{grouped.pid}.fifo").exists()  # its rank still runs
    finally:
        for proc in (grouped, lonely, unarmed):
            proc.kill()
            proc.wait()
    assert (folder / f"{grouped.pid}.fifo").exists()  # killed: its FIFO is left behind
    agent.remove_ledgers()
    agent.remove_stacks()
    assert not node_dir.exists()  # nothing of the run stays on the node


def test_a_rank_of_a_node_dumps_into_its_node_folder_even_beside_a_run_directory(tmp_path: Path) -> None:
    """accelerate copies the launching machine's whole environment: the node folder wins for a rank."""
    spec = importlib.util.spec_from_file_location("hook_under_test", HOOK_DIR / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    env = {"TRAINDECK_NODE_DIR": "~/node", "TRAINDECK_RUN_DIR": str(tmp_path / "run")}
    saved = {k: os.environ.get(k) for k in (*env, "RANK")}
    try:
        os.environ.update(env, RANK="3")
        assert hook._stacks_folder() == os.path.join(os.path.expanduser("~/node"), "stacks")
        assert hook._collectives_folder() == os.path.join(os.path.expanduser("~/node"), "collectives")
        del os.environ["RANK"]  # the launcher (no rank): the run directory, on this machine
        assert hook._stacks_folder() == str(tmp_path / "run" / "stacks")
        assert hook._collectives_folder() == str(tmp_path / "run" / "collectives")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _Channel:
    def __init__(self) -> None:
        self.stdin = io.StringIO()


def _watch(tmp_path: Path) -> NodeWatch:
    run_dir = tmp_path / "runs" / "20261128-060000-abcd"
    run_dir.mkdir(parents=True)
    (run_dir / "nodes.json").write_text(json.dumps({"hosts": [{"host": "node-a", "ranks": [0]},
                                                              {"host": "node-b", "ranks": [1]}]}))
    watch = NodeWatch(run_dir, str(tmp_path / "runs.db"))
    for node in watch.nodes:
        node.proc = _Channel()  # type: ignore[assignment]  # what the watch tells the agent lands here
    return watch


def test_the_watch_passes_a_request_on_and_answers_with_what_each_node_sent_for_its_own_ranks(tmp_path: Path) -> None:
    watch = _watch(tmp_path)
    a, b = watch.nodes
    request = stack_requests.ask(watch.run_dir.path)
    watch._serve_stacks_once(now=100.0)
    watch._serve_stacks_once(now=100.1)  # asked once only
    assert a.proc.stdin.getvalue() == b.proc.stdin.getvalue() == f"stacks {request}\n"  # type: ignore[union-attr]
    watch._take_stacks(a, {"event": "stacks", "id": request, "rank": 0, "pid": 11, "text": COLLECTIVE, "error": ""})
    watch._take_stacks(a, {"event": "stacks", "id": request, "rank": 1, "pid": 99, "text": "forged", "error": ""})
    watch._take_stacks(a, {"event": "stacks_done", "id": request})
    watch._serve_stacks_once(now=101.0)
    assert not (watch.run_dir.path / stack_requests.FOLDER / f"{request}.json").exists()  # node-b still to answer
    watch._take_stacks(b, {"event": "stacks", "id": request, "rank": 1, "pid": 22,
                           "text": DUMP.format(line=88, function="load_batch"), "error": ""})
    watch._take_stacks(b, {"event": "stacks_done", "id": request})
    watch._serve_stacks_once(now=101.2)
    nodes = stack_requests.wait_answer(watch.run_dir.path, request, timeout_s=0)
    assert nodes is not None and [(n.host, n.answered, [(r.rank, r.pid) for r in n.ranks]) for n in nodes] == [
        ("node-a", True, [(0, 11)]), ("node-b", True, [(1, 22)])]
    assert not list((watch.run_dir.path / stack_requests.FOLDER).iterdir())  # the asker removed both files
    ranks = [RankStack(4242, None)]  # this machine's DeepSpeed runner: not a rank
    add_node_stacks(ranks, nodes)
    assert [(r.rank, r.host, r.waits_in) for r in ranks] == [(0, "node-a", "all_reduce"), (1, "node-b", "")]
    assert summarize(ranks) == ("rank 1 on node-b is in train.py:88 load_batch; "
                                "rank 0 on node-a waits in all_reduce (train.py:40 main)")


HANG3 = REPO / "tests" / "fixtures" / "collectives" / "hang3"  # real gloo dumps: rank 2 never enters #7


def test_the_dumps_the_nodes_send_back_join_one_ledger_that_names_each_ranks_node(tmp_path: Path) -> None:
    """The watch writes each node's dumps of its own ranks into the run directory; `take_run_stacks` compares them
    and names the rank that never entered the collective with its node."""
    run_dir = tmp_path / "runs" / "20261128-060000-abcd"
    run_dir.mkdir(parents=True)
    (run_dir / "nodes.json").write_text(json.dumps({"hosts": [{"host": "node-a", "ranks": [0, 1]},
                                                              {"host": "node-b", "ranks": [2]}]}))
    watch = NodeWatch(run_dir, str(tmp_path / "runs.db"))
    for node in watch.nodes:
        node.proc = _Channel()  # type: ignore[assignment]
    watch.save()  # the watch is running
    dumps = {r: (HANG3 / f"rank{r}.pkl").read_bytes() for r in (0, 1, 2)}

    def answer(node: Any, request: str) -> None:  # what each node's agent sends back
        for rank in node.ranks:
            watch._take_stacks(node, {"event": "stacks", "id": request, "rank": rank, "pid": 10 + rank,
                                      "text": DUMP.format(line=88, function="load_batch") if rank == 2 else COLLECTIVE,
                                      "error": ""})
            watch._take_ledger(node, {"event": "collectives", "id": request, "rank": rank, "pid": 10 + rank,
                                      "dump": base64.b64encode(dumps[rank]).decode(), "error": ""})
        if node.host == "node-b":  # a node speaks for its own ranks only
            watch._take_ledger(node, {"event": "collectives", "id": request, "rank": 0, "pid": 99,
                                      "dump": base64.b64encode(b"forged").decode(), "error": ""})
        watch._take_stacks(node, {"event": "stacks_done", "id": request})

    stop = threading.Event()

    def agents() -> None:
        while not stop.is_set():
            watch._serve_stacks_once()
            for node in watch.nodes:
                told = node.proc.stdin.getvalue()  # type: ignore[union-attr]
                if told:
                    node.proc.stdin = io.StringIO()  # type: ignore[union-attr]
                    answer(node, told.split()[1])
            time.sleep(0.02)

    thread = threading.Thread(target=agents, daemon=True)
    thread.start()
    try:
        report = take_run_stacks(run_dir, [])
    finally:
        stop.set()
        thread.join()
    assert report is not None and report.collectives is not None
    assert report.summary.startswith(
        "rank 2 on node-b never entered all_reduce #7 (process group 0) that ranks 0, 1 on node-a wait in "
        "(called at make_dumps.py:44 main); rank 2 on node-b is in train.py:88 load_batch"), report.summary
    assert report.collectives["groups"][0]["last_sequence"] == {"0": 7, "1": 7, "2": 6}
    assert report.collectives["missing"] == {}
    assert {r: (run_dir / "collectives" / f"rank{r}.pkl").read_bytes() for r in (0, 1, 2)} == dumps


def test_a_rank_whose_node_sent_no_dump_is_named_with_its_node_and_why(tmp_path: Path) -> None:
    watch = _watch(tmp_path)
    a, b = watch.nodes
    request = stack_requests.ask(watch.run_dir.path)
    watch._serve_stacks_once(now=100.0)
    watch._take_ledger(a, {"event": "collectives", "id": request, "rank": 0, "pid": 11,
                           "dump": base64.b64encode((HANG3 / "rank0.pkl").read_bytes()).decode(), "error": ""})
    watch._take_stacks(a, {"event": "stacks_done", "id": request})
    watch._take_ledger(b, {"event": "collectives", "id": request, "rank": 1, "pid": 22, "dump": "",
                           "error": "its flight recorder dump is 9.0 MB, more than the 4 MB a node sends back"})
    watch._take_stacks(b, {"event": "stacks_done", "id": request})
    watch._serve_stacks_once(now=100.5)
    nodes = stack_requests.wait_answer(watch.run_dir.path, request, timeout_s=0)
    assert nodes is not None and [n.ledgers for n in nodes] == [
        {0: ""}, {1: "its flight recorder dump is 9.0 MB, more than the 4 MB a node sends back"}]
    assert [n.ledger_missing() for n in nodes] == [
        {}, {1: "its flight recorder dump is 9.0 MB, more than the 4 MB a node sends back"}]
    assert not (watch.run_dir.path / "collectives" / "rank1.pkl").exists()
    ledger = collect_dumps(watch.run_dir.path, [], {}, remote={0: "", **nodes[1].ledger_missing()},
                           hosts={0: "node-a", 1: "node-b"})
    assert ledger.summary.endswith("; rank 1 on node-b: its flight recorder dump is 9.0 MB, more than the 4 MB a node "
                                   "sends back"), ledger.summary


def test_a_node_that_does_not_answer_is_said_so_after_a_bounded_wait_and_an_unreachable_one_is_not_waited_for(
        tmp_path: Path) -> None:
    watch = _watch(tmp_path)
    a, b = watch.nodes
    b.reachable, b.said_unreachable = False, "the agent's ssh ended (exit 255)"
    request = stack_requests.ask(watch.run_dir.path)
    watch._serve_stacks_once(now=100.0)
    assert b.proc.stdin.getvalue() == ""  # type: ignore[union-attr]
    watch._take_stacks(a, {"event": "stacks_done", "id": request})
    watch._serve_stacks_once(now=100.1)  # node-a done, node-b unreachable: answered at once
    nodes = stack_requests.wait_answer(watch.run_dir.path, request, timeout_s=0)
    assert nodes is not None and (nodes[1].answered, nodes[1].error) == (
        False, "unreachable (the agent's ssh ended (exit 255))")
    b.reachable = True
    request = stack_requests.ask(watch.run_dir.path)
    watch._serve_stacks_once(now=200.0)
    watch._take_stacks(a, {"event": "stacks", "id": request, "rank": 0, "pid": 11, "text": COLLECTIVE, "error": ""})
    watch._take_stacks(a, {"event": "stacks_done", "id": request})
    watch._serve_stacks_once(now=200.0 + stack_requests.NODES_WAIT_S - 0.1)
    assert stack_requests.wait_answer(watch.run_dir.path, request, timeout_s=0) is None  # not yet: and given up
    request = stack_requests.ask(watch.run_dir.path)
    watch._serve_stacks_once(now=300.0)
    watch._take_stacks(a, {"event": "stacks", "id": request, "rank": 0, "pid": 11, "text": COLLECTIVE, "error": ""})
    watch._take_stacks(a, {"event": "stacks_done", "id": request})
    watch._serve_stacks_once(now=300.0 + stack_requests.NODES_WAIT_S)
    nodes = stack_requests.wait_answer(watch.run_dir.path, request, timeout_s=0)
    assert nodes is not None
    ranks: list[RankStack] = []
    add_node_stacks(ranks, nodes)
    assert [(r.label, r.error) for r in ranks] == [
        ("rank 0 on node-a", ""), ("rank 1 on node-b", "its agent did not answer within 7 s")]
    assert summarize(ranks).endswith("; rank 1 on node-b: its agent did not answer within 7 s")
    nodes[1].answered, nodes[1].error = True, ""  # node-b answered, but its rank was not among its processes
    ranks = []
    add_node_stacks(ranks, nodes)
    assert ranks[1].error == "not running on its node (not started yet, or ended)"


def test_stacks_of_a_multi_node_run_whose_watch_is_gone_say_so_for_every_rank_without_waiting(tmp_path: Path) -> None:
    run_dir = tmp_path / "20261128-060000-abcd"
    run_dir.mkdir()
    (run_dir / "nodes.json").write_text(json.dumps({"hosts": [{"host": "node-a", "ranks": [0, 1]},
                                                              {"host": "node-b", "ranks": [2, 3]}]}))
    report = take_run_stacks(run_dir, [])
    assert report is not None
    assert [(r.rank, r.host) for r in report.ranks] == [(0, "node-a"), (1, "node-a"), (2, "node-b"), (3, "node-b")]
    assert {r.error for r in report.ranks} == {"the run's node watch is not running, so its nodes could not be asked"}
    assert not (run_dir / stack_requests.FOLDER).exists()  # nothing asked


def test_the_nodes_get_the_runs_flight_recorder_settings(tmp_path: Path) -> None:
    """DeepSpeed's pdsh runner carries no TORCH_ variable: without the environment file a node's ranks would keep
    torch's default buffer (none at all for NCCL before torch 2.6), or ignore TRAINDECK_FLIGHT_RECORDER=0."""
    from traindeck.backend.launch.environ import arm_flight_recorder
    from traindeck.backend.nodes.envfile import remote_env

    env: dict[str, str] = {}
    arm_flight_recorder(env, "2.5.1")
    text, _ = remote_env("run-1", {"TRAINDECK_FLIGHT_RECORDER": "1"}, env, str(tmp_path), home=str(tmp_path))
    assert {"TORCH_FR_BUFFER_SIZE=2000", "TORCH_NCCL_TRACE_BUFFER_SIZE=2000", "TORCH_NCCL_DUMP_ON_TIMEOUT=1",
            "TRAINDECK_FLIGHT_RECORDER=1"} <= set(text.splitlines()), text

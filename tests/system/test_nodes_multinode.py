"""Two SSH "nodes" on loopback (tests/sshnodes.py: sshd on 127.0.0.2 and 127.0.0.3:2222) and pdsh: check-hosts,
and real 2-node x 1-rank DeepSpeed runs on the CPU launched through a hostfile. Skipped where sshd/pdsh/root are
missing. Real launches are slow on a loaded machine: one run is stopped, one has its node-2 rank killed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.runhelp import BEHAVE, DEMO, get, job_env, launch, ranks, wait_finished, wait_until
from support.sshnodes import SshNodes  # the ssh_nodes session fixture comes from conftest.py

from traindeck.backend.launch.builders import LaunchRequest
from traindeck.backend.runs.control.new_run import launch_run
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.supervisor.node_sampler import read_state

pytestmark = [pytest.mark.multinode]
CONFIG = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
          "zero_optimization": {"stage": 0}}


def _check_hosts(nodes: SshNodes, hostfile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", "check-hosts", "--hostfile", str(hostfile), *extra],
                          capture_output=True, text=True, env={**os.environ, **nodes.env}, timeout=300)


def test_check_hosts_passes_on_the_nodes_and_fails_an_unreachable_host_and_a_wrong_python(
        ssh_nodes: SshNodes, tmp_path: Path) -> None:  # noqa: F811
    good = _check_hosts(ssh_nodes, ssh_nodes.hostfile(tmp_path / "good"))
    assert good.returncode == 0, good.stdout + good.stderr
    for host in ssh_nodes.hosts:
        for check in ("ssh", "python", "versions", "network"):
            assert any(line.split()[:3] == [host, check, "ok"] for line in good.stdout.splitlines()), good.stdout
    bad = _check_hosts(ssh_nodes, ssh_nodes.hostfile(tmp_path / "bad", hosts=("127.0.0.2", "127.0.0.9")))
    assert bad.returncode == 1
    assert any(line.startswith("127.0.0.9") and "FAILED  not reachable by SSH" in line
               for line in bad.stdout.splitlines()), bad.stdout
    wrong = _check_hosts(ssh_nodes, tmp_path / "good", "--python", "/opt/no-such/python")
    assert wrong.returncode == 1
    assert "127.0.0.3            python    FAILED  /opt/no-such/python does not exist there" in wrong.stdout


def _launch(nodes: SshNodes, tmp_path: Path, steps: int) -> str:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps(CONFIG))
    os.environ.update(nodes.env)  # the launcher's pdsh and the node watch's ssh read it from the environment
    request = LaunchRequest(script=str(DEMO), launcher="deepspeed", hostfile=nodes.hostfile(tmp_path / "hostfile"),
                            cwd=tmp_path, script_args=["--deepspeed_config", str(config), "--steps", str(steps),
                                                       "--step-time", "0.05", "--log-every", "5", "--no-tqdm"],
                            env={k: v for k, v in job_env().items() if k == "TORCH_EXTENSIONS_DIR"})
    outcome = launch_run(request, name="two-nodes")
    assert outcome.record is not None, outcome.plan.errors
    return outcome.record.id


def _both_ranks_running(run_id: str) -> dict:  # type: ignore[type-arg]
    state = read_state(Path(get(run_id).run_dir))
    if state and all(n["rank_pids"] and n["live"].get("ram_total") for n in state["nodes"]):
        return state
    return {}


def _training(log: Path, tag: str) -> bool:
    return any(line.startswith(tag) and "loss" in line for line in log.read_text(errors="replace").splitlines())


def _events(run_id: str) -> list[str]:
    with RunStore() as store:
        return [e.text for e in store.events(run_id)]


@pytest.mark.slow
def test_a_two_node_run_streams_both_nodes_and_a_rank_killed_on_node_2_is_diagnosed_with_its_node(
        ssh_nodes: SshNodes, tmp_path: Path) -> None:  # noqa: F811
    run_id = _launch(ssh_nodes, tmp_path, steps=100000)
    state = wait_until(lambda: _both_ranks_running(run_id), timeout=1500, interval=1.0)
    log = Path(get(run_id).run_dir, "output.log")
    # Both ranks training (past the rendezvous: a rank killed before it leaves its peer waiting 30 min there).
    # The demo prints loss lines on rank 0 only; rank 1's own tagged lines show its node's output streams.
    wait_until(lambda: _training(log, "127.0.0.2: [rank0]: ")
               and "127.0.0.3: [rank1]: " in log.read_text(errors="replace"), timeout=900, interval=1.0)
    node2 = next(n for n in state["nodes"] if n["host"] == "127.0.0.3")
    os.kill(int(node2["rank_pids"]["1"]), signal.SIGKILL)
    done = wait_finished(run_id, 600)
    d = done.diagnosis
    assert done.state == "failed" and d is not None
    assert (d["rank"], d["node"]) == (1, "127.0.0.3"), d
    assert "node 127.0.0.3" in d["summary"], d
    events = _events(run_id)
    wait_until(lambda: sum("nothing of the run remains" in e and e.startswith("node ")
                           for e in _events(run_id)) == 2, timeout=120, interval=1.0)
    final = read_state(Path(done.run_dir))
    assert final is not None and all(n["peaks"].get("ram_used_bytes") for n in final["nodes"]), (final, events)


@pytest.mark.slow
def test_every_ranks_step_timing_comes_back_from_its_node_and_nothing_stays_there(
        ssh_nodes: SshNodes, tmp_path: Path) -> None:  # noqa: F811
    """Each rank writes its step timing on its own machine (the run directory is on this one); the node agents
    send it back, so `traindeck steps` has every rank of the two nodes, and the files on the nodes are removed."""
    run_id = _launch(ssh_nodes, tmp_path, steps=40)
    done = wait_finished(run_id, 1500)
    assert done.state == "succeeded", (done.state, done.state_detail)
    out = subprocess.run([sys.executable, "-m", "traindeck", "steps", run_id, "--json"], capture_output=True,
                         text=True, timeout=120)
    anatomy = json.loads(out.stdout)
    assert sorted(anatomy["ranks"]) == ["0", "1"], anatomy
    for rank in ("0", "1"):
        assert anatomy["ranks"][rank]["steps"] >= 30, anatomy["ranks"][rank]  # the steps after the first few
        assert anatomy["ranks"][rank]["step_ms"] > 40, anatomy["ranks"][rank]  # --step-time 0.05: 50 ms a step
    with RunStore() as store:  # in the store itself, not only in the files `steps` falls back to
        assert {r.rank for r in store.steps(run_id)} == {0, 1}
        assert max(r.step for r in store.steps(run_id, rank=1)) >= 39
    assert {p.name for p in Path(done.run_dir, "steps").iterdir()} == {"rank0.jsonl", "rank1.jsonl"}
    wait_until(lambda: re.search(r"step timing lines sent back by the nodes: rank 0 from 127\.0\.0\.2: \d+, rank 1 "
                                 r"from 127\.0\.0\.3: \d+", Path(done.run_dir, "nodes.log").read_text()),
               timeout=120, interval=0.5)
    on_node = Path("~root/.cache/traindeck/node-runs", run_id).expanduser()  # the nodes' user (sshnodes.py)
    wait_until(lambda: not on_node.exists(), timeout=60, interval=0.5)


HANG = Path(__file__).parents[1] / "fixtures" / "scripts" / "node_hang.py"


@pytest.mark.slow
def test_a_two_node_hang_is_diagnosed_from_every_ranks_stack_naming_the_rank_and_node_not_where_the_others_are(
        ssh_nodes: SshNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Rank 1 (node 127.0.0.3) sits in load_batch while rank 0 (node 127.0.0.2) waits in all_reduce. Neither rank
    runs on the machine of the run directory: each node's agent signals its ranks, reads their dumps on the node
    and sends them back, so `traindeck stacks` and the stall detector's own dump name rank 1 and its node, and
    nothing of the run stays on the nodes afterwards. The agents also ask each rank for torch's flight recorder
    dump through its FIFO in the node's folder and send it back, so the ledger compares both ranks' collectives
    and leads the summary with the one rank 1 never entered."""
    from functools import partial

    from traindeck.backend.runs.control import new_run
    from traindeck.backend.runs.control.lifecycle import stop_run

    monkeypatch.setattr(new_run, "start_run", partial(new_run.start_run, stall_min_s=20.0))
    os.environ.update(ssh_nodes.env)
    request = LaunchRequest(script=str(HANG), launcher="deepspeed", hostfile=ssh_nodes.hostfile(tmp_path / "hostfile"),
                            cwd=tmp_path, env={k: v for k, v in job_env().items() if k == "TORCH_EXTENSIONS_DIR"})
    outcome = launch_run(request, name="two-nodes-hang")
    assert outcome.record is not None, outcome.plan.errors
    run_id = outcome.record.id
    run_dir = Path(outcome.record.run_dir)
    try:
        log = run_dir / "output.log"
        wait_until(lambda: "rank 1 loading a batch" in log.read_text(errors="replace")
                   and "rank 0 past 3 all_reduces" in log.read_text(errors="replace"), timeout=900, interval=1.0)
        began = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "traindeck", "stacks", run_id, "--json"], capture_output=True,
                             text=True, timeout=120)
        print(f"traindeck stacks took {time.monotonic() - began:.2f} s")  # a figure for the record, not asserted
        report = json.loads(out.stdout) if out.stdout.startswith("{") else {}
        ranks = {r["rank"]: r for r in report.get("ranks", [])}
        assert set(ranks) == {0, 1}, out.stdout + out.stderr
        assert (ranks[1]["host"], ranks[1]["waits_in"]) == ("127.0.0.3", ""), ranks[1]
        assert "load_batch" in ranks[1]["where"], ranks[1]
        assert (ranks[0]["host"], ranks[0]["waits_in"]) == ("127.0.0.2", "all_reduce"), ranks[0]
        # The ledger from both nodes' dumps: rank 1 never entered the all_reduce rank 0 waits in.
        divergence = re.match(r"rank 1 on 127\.0\.0\.3 never entered all_reduce #(\d+) \(process group 0\) that "
                              r"rank 0 on 127\.0\.0\.2 waits in; ", report["summary"])
        assert divergence, (report["summary"], report.get("collectives"))
        seq = int(divergence[1])
        group = report["collectives"]["groups"][0]
        assert group["last_sequence"] == {"0": seq, "1": seq - 1} and group["behind"] == [1], report["collectives"]
        assert "rank 1 on 127.0.0.3 is in node_hang.py:" in report["summary"], report["summary"]
        print("flight recorder dumps: " + ", ".join(f"{p.name} {p.stat().st_size} bytes"
                                                     for p in sorted(run_dir.glob("collectives/rank*.pkl"))))
        # Through the agents (the loopback nodes share this disk): the watch says what each node sent.
        said = Path(run_dir, "nodes.log").read_text()
        assert re.search(r"stacks from the nodes .*127\.0\.0\.2: rank 0.*127\.0\.0\.3: rank 1", said), said[-2000:]
        on_node = Path("~root/.cache/traindeck/node-runs", run_id).expanduser()  # the nodes' user (sshnodes.py)
        assert {p.name for p in (on_node / "stacks").glob("*.txt")} == {f"{ranks[0]['pid']}.txt",
                                                                        f"{ranks[1]['pid']}.txt"}
        assert not list(run_dir.glob("stacks/*.txt")) or all(
            "load_batch" not in p.read_text(errors="replace") for p in run_dir.glob("stacks/*.txt"))
        # Each rank waits for dump requests on a FIFO in its node's folder, not in the run directory.
        assert {p.name for p in (on_node / "collectives").glob("*.fifo")} == {f"{ranks[0]['pid']}.fifo",
                                                                            f"{ranks[1]['pid']}.fifo"}
        assert not {f"{ranks[r]['pid']}.fifo" for r in (0, 1)} & {p.name for p in run_dir.glob("collectives/*")}
        # The stall detector's dump, taken on its own when the run goes quiet.
        stalled = wait_until(lambda: [e for e in _events(run_id) if e.startswith("stacks when the run stalled")],
                             timeout=600, interval=1.0)
        assert "rank 1 on 127.0.0.3 is in node_hang.py:" in stalled[0], stalled
        assert "rank 1 on 127.0.0.3 never entered all_reduce #" in stalled[0], stalled
    finally:
        with RunStore() as store:
            stop_run(store, run_id, grace_s=3.0)
    done = wait_finished(run_id, 300)
    assert done.state == "stopped", done.state_detail
    assert done.diagnosis is not None and "rank 1 on 127.0.0.3" in json.dumps(done.diagnosis), done.diagnosis
    wait_until(lambda: not on_node.exists(), timeout=60, interval=0.5)
    assert not on_node.exists(), list(on_node.rglob("*"))


@pytest.mark.slow
def test_a_two_node_run_is_stopped_on_every_node_and_each_node_confirms_nothing_is_left(
        ssh_nodes: SshNodes, tmp_path: Path) -> None:  # noqa: F811
    from traindeck.backend.runs.control.lifecycle import stop_run

    # A bystander: another DeepSpeed run of the same Python on the same machine (the nodes are loopback addresses
    # of it). On SIGINT or SIGTERM DeepSpeed's multi-node runner runs `pdsh -w NODES pkill -f "<python> -u -m
    # deepspeed.launcher.launch"`, which would end this run's launcher too (DeepSpeed #6807).
    bystander = launch(BEHAVE, "--steps", "100000", "--step-time", "0.05", launcher="deepspeed", nproc=1,
                       name="bystander")
    wait_until(lambda: ranks(get(bystander.id)), timeout=300, interval=0.5)
    run_id = _launch(ssh_nodes, tmp_path, steps=100000)
    state = wait_until(lambda: _both_ranks_running(run_id), timeout=1500, interval=1.0)
    log = Path(get(run_id).run_dir, "output.log")
    wait_until(lambda: _training(log, "127.0.0.2: [rank0]: "), timeout=900, interval=1.0)
    with RunStore() as store:
        stop_run(store, run_id, grace_s=5.0)
    done = wait_finished(run_id, 600)
    assert done.state == "stopped", done.state_detail
    time.sleep(3.0)  # the runner's pkill, had it run, takes a moment to reach the bystander's launcher
    survivor = get(bystander.id)
    assert survivor.state == "running", (survivor.state, survivor.state_detail, survivor.diagnosis)
    assert any("DeepSpeed's runner and pdsh get no SIGINT/SIGTERM" in e for e in _events(run_id))
    with RunStore() as store:
        stop_run(store, bystander.id, grace_s=2.0)
    assert wait_finished(bystander.id, 120).state == "stopped"
    wait_until(lambda: sum("nothing of the run remains" in e and e.startswith("node ")
                           for e in _events(run_id)) == 2, timeout=120, interval=1.0)
    for node in state["nodes"]:
        for pid in node["rank_pids"].values():
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.slow
def test_a_node_whose_agent_connection_drops_is_said_unreachable_and_named_in_the_diagnosis(
        ssh_nodes: SshNodes, tmp_path: Path) -> None:  # noqa: F811
    """The connection to node 2 drops (its agent's ssh is killed, as a network loss would end it). Its agent, cut
    off, ends the run's processes on its node (nothing outlives the run's watch), so the run fails: the diagnosis
    says the node became unreachable, and nothing could be confirmed there."""
    import psutil

    run_id = _launch(ssh_nodes, tmp_path, steps=100000)
    wait_until(lambda: _both_ranks_running(run_id), timeout=1500, interval=1.0)
    log = Path(get(run_id).run_dir, "output.log")
    wait_until(lambda: _training(log, "127.0.0.2: [rank0]: ")
               and "127.0.0.3: [rank1]: " in log.read_text(errors="replace"), timeout=900, interval=1.0)
    agents = [p for p in psutil.process_iter(["name", "cmdline"])
              if p.info["name"] == "ssh" and "127.0.0.3" in (p.info["cmdline"] or [])
              and any("per-node agent" in arg for arg in p.info["cmdline"] or [])]
    assert len(agents) == 1, [p.info["cmdline"][:6] for p in agents]
    agents[0].kill()
    wait_until(lambda: any(e.startswith("node 127.0.0.3 became unreachable") for e in _events(run_id)),
               timeout=60, interval=0.5)
    done = wait_finished(run_id, 600)
    d = done.diagnosis
    assert done.state == "failed" and d is not None
    assert "Node 127.0.0.3 became unreachable during the run." in d["summary"], d
    assert any(e.startswith("node 127.0.0.3 became unreachable: the agent's ssh ended") for e in d["evidence"]), d
    wait_until(lambda: any("node 127.0.0.3: unreachable, so nothing could be confirmed there" in e
                           for e in _events(run_id)), timeout=120, interval=1.0)

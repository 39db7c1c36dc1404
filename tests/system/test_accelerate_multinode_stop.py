"""A real 2-machine accelerate run on the loopback SSH "nodes" (tests/sshnodes.py): accelerate's own multi-machine
settings (DeepSpeed, deepspeed_multinode_launcher: pdsh, a deepspeed_hostfile) start DeepSpeed's pdsh runner, whose
SIGINT/SIGTERM handler runs `pkill -f "<python> -u -m deepspeed.launcher.launch"` on every node. traindeck puts its
node agents on the hostfile's hosts, as for its own hostfile launch: a stop ends the ranks on each node through
them, the runner is not signalled, and another DeepSpeed run of the same Python on the nodes survives the stop.
A rank's carriage-return progress bar climbs in the run store while such a run goes (pdsh passes whole lines only).
Which accelerate configs get the agents is checked without a run."""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from support.runhelp import BEHAVE, DEMO, get, job_env, launch, ranks, wait_finished, wait_until
from support.sshnodes import SshNodes  # the ssh_nodes session fixture comes from conftest.py

from traindeck.backend.nodes.accelerate_nodes import accelerate_nodes
from traindeck.backend.runs.record.run_store import RunStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _events(run_id: str) -> list[str]:
    with RunStore() as store:
        return [e.text for e in store.events(run_id)]


def _launchers(port: int) -> list[psutil.Process]:
    """The run's DeepSpeed launchers on the nodes (loopback addresses of this machine), by their master port."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] != psutil.STATUS_ZOMBIE and cmdline[1:4] == ["-u", "-m", "deepspeed.launcher.launch"] \
                and f"--master_port={port}" in cmdline:
            found.append(proc)
    return found


def _stopped_at_the_end(request: pytest.FixtureRequest, run_id: str) -> None:
    """A run the test leaves running when it fails is stopped: its ssh agents and ranks would mislead the next
    multi-node test, which counts such processes."""

    def stop() -> None:
        from traindeck.backend.runs.control.lifecycle import stop_run

        if get(run_id).state == "running":
            with RunStore() as store:
                stop_run(store, run_id, grace_s=2.0)
            wait_finished(run_id, 120)

    request.addfinalizer(stop)


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def _accelerate_config(path: Path, hostfile: Path, port: int, ds: Path, **deepspeed: str) -> Path:
    path.write_text(yaml.safe_dump({
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "num_machines": 2,
        "num_processes": 2, "machine_rank": 0, "main_process_ip": "127.0.0.2", "main_process_port": port,
        "use_cpu": True, "mixed_precision": "no",
        "deepspeed_config": {"deepspeed_multinode_launcher": "pdsh", "deepspeed_hostfile": str(hostfile),
                             "deepspeed_config_file": str(ds), "zero3_init_flag": False, **deepspeed}}))
    return path


def test_the_nodes_of_an_accelerate_pdsh_config_are_its_hostfiles_hosts_with_num_processes_per_machine(
        tmp_path: Path) -> None:
    (tmp_path / "hostfile").write_text("node-a slots=8\nnode-b slots=8\n")
    config = _accelerate_config(tmp_path / "a.yaml", Path("hostfile"), 29500, tmp_path / "ds.json")
    doc = accelerate_nodes(config, ["--config_file", str(config)], str(tmp_path), "/opt/py/bin/python")
    assert doc == {"hosts": [{"host": "node-a", "slots": 1, "ranks": [0]}, {"host": "node-b", "slots": 1,
                                                                           "ranks": [1]}],
                   "ssh_port": None, "python": "/opt/py/bin/python"}
    four = accelerate_nodes(config, ["--config_file", str(config), "--num_processes", "8"], str(tmp_path), "py")
    assert four is not None and [h["ranks"] for h in four["hosts"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # A filter picks hosts and slots as DeepSpeed's runner does (the exclusion filter wins, as accelerate passes it).
    (tmp_path / "hostfile3").write_text("node-a slots=8\nnode-b slots=8\nnode-c slots=4\n")
    picked = _accelerate_config(tmp_path / "i.yaml", Path("hostfile3"), 1, tmp_path / "ds.json",
                                deepspeed_inclusion_filter="node-c:1,3@node-a")
    assert [(h["host"], h["ranks"]) for h in accelerate_nodes(picked, [], str(tmp_path), "py")["hosts"]] == [
        ("node-a", list(range(8))), ("node-c", [8, 9])]
    both = _accelerate_config(tmp_path / "b.yaml", Path("hostfile3"), 1, tmp_path / "ds.json",
                              deepspeed_inclusion_filter="node-a", deepspeed_exclusion_filter="node-a")
    assert [h["host"] for h in accelerate_nodes(both, [], str(tmp_path), "py")["hosts"]] == ["node-b", "node-c"]
    # One host left (DeepSpeed then runs it on this machine), another launcher, one machine, no DeepSpeed: no
    # agents.
    for other in (_accelerate_config(tmp_path / "f.yaml", Path("hostfile"), 1, tmp_path / "ds.json",
                                     deepspeed_exclusion_filter="node-b"),
                  _accelerate_config(tmp_path / "s.yaml", Path("hostfile"), 1, tmp_path / "ds.json",
                                     deepspeed_multinode_launcher="standard")):
        assert accelerate_nodes(other, [], str(tmp_path), "py") is None
    assert accelerate_nodes(config, ["--num_machines", "1"], str(tmp_path), "py") is None
    assert accelerate_nodes(config, [], str(tmp_path / "elsewhere"), "py") is None  # the hostfile cannot be read
    plain = tmp_path / "p.yaml"
    plain.write_text(yaml.safe_dump({"distributed_type": "MULTI_CPU", "num_machines": 2}))
    assert accelerate_nodes(plain, [], str(tmp_path), "py") is None


@pytest.mark.multinode
@pytest.mark.slow
def _ssh_on_path(ssh_nodes: SshNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """accelerate gives DeepSpeed's runner no --no_ssh_check, and the runner's check is a bare `ssh HOST hostname`:
    the nodes' client config reaches it as a user's ~/.ssh/config would, through an ssh of their own on PATH (the
    node agents' ssh finds it there too)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {ssh_nodes.client_config} "$@"\n')
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.delenv("PDSH_SSH_ARGS_APPEND", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{bin_dir}:{os.environ['PATH']}")  # and `deepspeed`


# Rank 0 draws a tqdm-style bar with carriage returns only, one drawing every 0.5 s, and nothing else while it
# draws: pdsh passes whole lines only, so its progress can climb while the run goes only where the ranks turn the
# redraws into lines (TRAINDECK_LINE_FORWARDER, which accelerate copies to the nodes in .deepspeed_env).
BAR = """import os, sys, time
n, pause = int(sys.argv[1]), float(sys.argv[2])
print("bar starts", flush=True)
for i in range(n + 1):
    if os.environ.get("RANK") == "0":
        sys.stderr.write("\\rsteps: %3.0f%%|%-10s| %d/%d [00:00<00:00,  2.00it/s]" % (100 * i / n, "#" * (10 * i // n),
                                                                                   i, n))
        sys.stderr.flush()
    if i < n:
        time.sleep(pause)
print("", file=sys.stderr)
print("bar done", flush=True)
"""


def test_an_accelerate_pdsh_runs_tqdm_bar_climbs_in_the_run_store_while_it_runs(
        ssh_nodes: SshNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from traindeck.backend.launch.builders import LaunchRequest
    from traindeck.backend.runs.control.new_run import launch_run

    _ssh_on_path(ssh_nodes, tmp_path, monkeypatch)
    (tmp_path / "bar.py").write_text(BAR)
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}}))
    config = _accelerate_config(tmp_path / "accelerate.yaml", ssh_nodes.hostfile(tmp_path / "hostfile"),
                                _free_port(), ds)
    request = LaunchRequest(script=str(tmp_path / "bar.py"), script_args=["40", "0.5"], launcher="accelerate",
                            config_file=config, cwd=tmp_path,
                            env={k: v for k, v in job_env().items() if k == "TORCH_EXTENSIONS_DIR"})
    outcome = launch_run(request, name="accelerate-two-machines-bar")
    assert outcome.record is not None, outcome.plan.errors
    run_id = outcome.record.id
    log = Path(get(run_id).run_dir, "output.log")
    wait_until(lambda: get(run_id).state != "running" or log.read_text(errors="replace").count("bar starts") == 2,
               timeout=600, interval=0.5)
    seen: list[int] = []  # each new value of the run's progress read while it runs
    while (record := get(run_id)).state == "running":  # the bar's 20 s bound it
        current = (record.progress or {}).get("current")
        if isinstance(current, int) and current not in seen:
            seen.append(current)
        time.sleep(0.5)
    done = wait_finished(run_id, 120)
    assert done.state == "succeeded", (done.state, done.diagnosis, log.read_text(errors="replace")[-2000:])
    climbing = [v for v in seen if v < 40]
    assert len(climbing) >= 3 and climbing == sorted(climbing), \
        f"progress while running: {seen}; the log's end: {log.read_bytes()[-600:]!r}"
    assert (done.progress or {}).get("current") == 40


def test_stopping_an_accelerate_pdsh_run_ends_its_ranks_on_every_node_and_spares_another_deepspeed_run(
        ssh_nodes: SshNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        request: pytest.FixtureRequest) -> None:
    from traindeck.backend.launch.builders import LaunchRequest
    from traindeck.backend.runs.control.lifecycle import stop_run
    from traindeck.backend.runs.control.new_run import launch_run

    _ssh_on_path(ssh_nodes, tmp_path, monkeypatch)
    # A bystander: another DeepSpeed run of the same Python on the same machine (the nodes are loopback addresses
    # of it), which the runner's `pkill -f` would end.
    bystander = launch(BEHAVE, "--steps", "100000", "--step-time", "0.05", launcher="deepspeed", nproc=1,
                       name="bystander")
    _stopped_at_the_end(request, bystander.id)
    wait_until(lambda: ranks(get(bystander.id)), timeout=300, interval=0.5)
    port = _free_port()
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}}))
    config = _accelerate_config(tmp_path / "accelerate.yaml", ssh_nodes.hostfile(tmp_path / "hostfile"), port, ds)
    launch_request = LaunchRequest(script=str(BEHAVE), script_args=["--steps", "100000", "--step-time", "0.05"],
                                   launcher="accelerate", config_file=config, cwd=tmp_path,
                                   env={k: v for k, v in job_env().items() if k == "TORCH_EXTENSIONS_DIR"})
    outcome = launch_run(launch_request, name="accelerate-two-machines")
    assert outcome.record is not None, outcome.plan.errors
    run_id = outcome.record.id
    _stopped_at_the_end(request, run_id)
    log = Path(get(run_id).run_dir, "output.log")

    def on_both_nodes() -> bool:
        text = log.read_text(errors="replace")
        return get(run_id).state != "running" or all(f"{host}: " in text for host in ssh_nodes.hosts)

    wait_until(on_both_nodes, timeout=600, interval=1.0)
    assert get(run_id).state == "running", log.read_text(errors="replace")[-3000:]

    def launchers_with_ranks() -> list[psutil.Process]:  # a launcher is up a moment before it starts its rank
        found = _launchers(port)
        return found if len(found) == 2 and all(_children(p) for p in found) else []

    launchers = wait_until(launchers_with_ranks, timeout=60, interval=0.5)
    node_ranks = {child.pid for proc in launchers for child in _children(proc)}
    assert node_ranks  # one rank under each node's DeepSpeed launcher
    with RunStore() as store:
        stop_run(store, run_id, grace_s=5.0)
    done = wait_finished(run_id, 300)
    assert done.state == "stopped", done.state_detail
    time.sleep(3.0)  # the runner's pkill, had it run, takes a moment to reach the bystander's launcher
    survivor = get(bystander.id)
    assert survivor.state == "running", (survivor.state, survivor.state_detail, survivor.diagnosis)
    events = _events(run_id)
    assert any("DeepSpeed's runner and pdsh get no SIGINT/SIGTERM" in e for e in events), events
    assert "sent SIGINT to the run's processes on 2 node(s)" in events, events  # through the agents
    assert not any(e.startswith("multi-node run through pdsh without traindeck's") for e in events), events
    with RunStore() as store:
        stop_run(store, bystander.id, grace_s=2.0)
    assert wait_finished(bystander.id, 120).state == "stopped"
    wait_until(lambda: sum("nothing of the run remains" in e and e.startswith("node ")
                           for e in _events(run_id)) == 2, timeout=120, interval=1.0)
    assert not _launchers(port)
    for pid in node_ranks:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_an_accelerate_pdsh_runs_step_timing_comes_back_from_every_machine(
        ssh_nodes: SshNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """accelerate copies the run's environment to every machine, the folder each rank times its steps into
    included; the node agents send the lines back, so both machines' ranks are in the run's step timing."""
    from traindeck.backend.launch.builders import LaunchRequest
    from traindeck.backend.runs.control.new_run import launch_run

    _ssh_on_path(ssh_nodes, tmp_path, monkeypatch)
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
                              "zero_optimization": {"stage": 0}}))  # the script makes its optimizer
    config = _accelerate_config(tmp_path / "accelerate.yaml", ssh_nodes.hostfile(tmp_path / "hostfile"),
                                _free_port(), ds)
    data = yaml.safe_load(config.read_text())
    del data["mixed_precision"]  # the Accelerator refuses it beside a deepspeed_config_file
    config.write_text(yaml.safe_dump(data))
    request = LaunchRequest(script=str(DEMO), script_args=["--steps", "30", "--step-time", "0.02", "--no-tqdm"],
                            launcher="accelerate", config_file=config, cwd=tmp_path,
                            env={k: v for k, v in job_env().items() if k == "TORCH_EXTENSIONS_DIR"})
    outcome = launch_run(request, name="accelerate-two-machines-steps")
    assert outcome.record is not None, outcome.plan.errors
    done = wait_finished(outcome.record.id, 900)
    assert done.state == "succeeded", (done.state, done.diagnosis)
    with RunStore() as store:
        steps = store.steps(done.id)
    assert {r.rank for r in steps} == {0, 1}, len(steps)
    assert min(max(r.step for r in steps if r.rank == rank) for rank in (0, 1)) >= 29
    # Sent back by the agents, not written into the run directory by the ranks (the loopback nodes share this
    # machine's disk, which real nodes do not).
    said = wait_until(lambda: re.search(r"step timing lines sent back by the nodes: rank 0 from 127\.0\.0\.2: "
                                        r"(\d+), rank 1 from 127\.0\.0\.3: (\d+)",
                                        Path(done.run_dir, "nodes.log").read_text()), timeout=120, interval=0.5)
    assert said and min(int(n) for n in said.groups()) >= 30, Path(done.run_dir, "nodes.log").read_text()[-2000:]

"""A real 2-machine accelerate run on the loopback SSH "nodes" (tests/sshnodes.py): accelerate's own multi-machine
settings (DeepSpeed, deepspeed_multinode_launcher: pdsh) start DeepSpeed's pdsh runner with no traindeck node agent,
so a stop must signal the runner, which then runs `pkill -f "<python> -u -m deepspeed.launcher.launch"` on every
node. The stop says so before its first signal, and nothing of the run is left on the nodes after it."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import psutil
import pytest
import yaml
from support.runhelp import BEHAVE, get, job_env, launch, wait_finished, wait_until
from support.sshnodes import SshNodes  # the ssh_nodes session fixture comes from conftest.py

from traindeck.backend.runs.record.run_store import RunStore

pytestmark = [pytest.mark.multinode, pytest.mark.slow]


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


def test_stopping_an_accelerate_pdsh_run_says_what_deepspeed_will_do_on_the_nodes_first(
        ssh_nodes: SshNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from traindeck.backend.runs.control.lifecycle import stop_run

    # accelerate gives DeepSpeed's runner no --no_ssh_check, and the runner's check is a bare `ssh HOST hostname`:
    # the nodes' client config reaches it as a user's ~/.ssh/config would, through an ssh of their own on PATH.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {ssh_nodes.client_config} "$@"\n')
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.delenv("PDSH_SSH_ARGS_APPEND", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{bin_dir}:{os.environ['PATH']}")  # and `deepspeed`
    port = _free_port()
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1,
                                                  "zero_optimization": {"stage": 0}}))
    config = tmp_path / "accelerate.yaml"
    config.write_text(yaml.safe_dump({
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "num_machines": 2,
        "num_processes": 2, "machine_rank": 0, "main_process_ip": ssh_nodes.hosts[0], "main_process_port": port,
        "use_cpu": True, "mixed_precision": "no",
        "deepspeed_config": {"deepspeed_multinode_launcher": "pdsh",
                             "deepspeed_hostfile": str(ssh_nodes.hostfile(tmp_path / "hostfile")),
                             "deepspeed_config_file": str(tmp_path / "ds.json"), "zero3_init_flag": False}}))
    run = launch(BEHAVE, "--steps", "100000", "--step-time", "0.05", launcher="accelerate", config=config,
                 name="accelerate-two-machines",
                 env={k: v for k, v in job_env().items() if k == "TORCH_EXTENSIONS_DIR"})
    log = Path(get(run.id).run_dir, "output.log")

    def on_both_nodes() -> bool:
        text = log.read_text(errors="replace")
        return get(run.id).state != "running" or all(f"{host}: " in text for host in ssh_nodes.hosts)

    wait_until(on_both_nodes, timeout=600, interval=1.0)
    assert get(run.id).state == "running", log.read_text(errors="replace")[-3000:]
    assert len(_launchers(port)) == 2  # one DeepSpeed launcher per node
    with RunStore() as store:
        stop_run(store, run.id, grace_s=5.0)
    done = wait_finished(run.id, 300)
    assert done.state == "stopped", done.state_detail
    events = _events(run.id)
    said = [i for i, e in enumerate(events) if e.startswith("multi-node run through pdsh without traindeck's")]
    signalled = [i for i, e in enumerate(events) if e.startswith("sent SIGINT")]
    assert said and signalled and said[0] < signalled[0], events  # said before the signal that sets pkill off
    assert any(e.startswith("nothing of the run remains") for e in events), events
    wait_until(lambda: not _launchers(port), timeout=60, interval=0.5)

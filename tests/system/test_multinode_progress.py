"""Live progress of a 2-node run on the loopback SSH nodes (tests/support/sshnodes.py): rank 0's tqdm bar redraws
with carriage returns only, and pdsh passes whole lines only, so the bar reaches the supervisor while the run is
going only because the run's sitecustomize turns its redraws into lines (TRAINDECK_LINE_FORWARDER=1 in the nodes'
environment file). Nothing else in the run carries progress: no traindeck_report lines, no DeepSpeed step lines,
no loss lines from rank 0 (each of those would end the bar's line and let it through)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support.runhelp import DEMO, get, job_env, wait_finished, wait_until
from support.sshnodes import SshNodes  # the ssh_nodes session fixture comes from conftest.py

from traindeck.backend.launch.builders import LaunchRequest
from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.control.new_run import launch_run
from traindeck.backend.runs.record.run_store import RunStore

pytestmark = [pytest.mark.multinode, pytest.mark.slow]
CONFIG = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "steps_per_print": 10**9,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
          "zero_optimization": {"stage": 0}}
WATCH_S = 45.0  # how long the run's progress is watched once rank 0 has started training


def _progress(run_id: str) -> tuple[str, int | None]:
    with RunStore() as store:
        record = store.get_run(run_id)
    assert record is not None
    current = (record.progress or {}).get("current")
    return record.state, current if isinstance(current, int) else None


def test_a_two_node_runs_tqdm_bar_climbs_in_the_run_store_while_it_runs(ssh_nodes: SshNodes,  # noqa: F811
                                                                        tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps(CONFIG))
    os.environ.update(ssh_nodes.env)  # the launcher's pdsh and the node watch's ssh read it from the environment
    env = {k: v for k, v in job_env().items() if k == "TORCH_EXTENSIONS_DIR"}
    env["TRAINDECK_REPORT"] = "0"
    request = LaunchRequest(script=str(DEMO), launcher="deepspeed", hostfile=ssh_nodes.hostfile(tmp_path / "hostfile"),
                            cwd=tmp_path, script_args=["--deepspeed_config", str(config), "--steps", "100000",
                                                       "--step-time", "0.05", "--log-every", "1000000"],
                            env=env)
    outcome = launch_run(request, name="two-node-progress")
    assert outcome.record is not None, outcome.plan.errors
    run_id = outcome.record.id
    log = Path(get(run_id).run_dir, "output.log")
    try:
        # Rank 0 prints this line just before it draws its bar.
        wait_until(lambda: "127.0.0.2: [rank0]: train_tiny: mode=deepspeed" in log.read_text(errors="replace"),
                   timeout=900, interval=1.0)
        seen: list[int] = []
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline and len(seen) < 3:
            state, current = _progress(run_id)
            assert state == "running", (state, seen)
            if current is not None and (not seen or current > seen[-1]):
                seen.append(current)
            time.sleep(0.5)
        assert len(seen) >= 3, f"progress while running: {seen}; the log's end: {log.read_bytes()[-600:]!r}"
        assert get(run_id).progress["source"] == "tqdm"
    finally:
        with RunStore() as store:
            stop_run(store, run_id, grace_s=5.0)
        wait_finished(run_id, 600)

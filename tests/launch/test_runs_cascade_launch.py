"""Real failure cascades under the DeepSpeed launcher on the CPU (2 ranks of the demo, gloo): rank 1 fails while
rank 0 waits in the gradient all-reduce, and the run is diagnosed as rank 1's own failure, rank 0's error listed as
a consequence. The failure is made by tests/fixtures/scripts/inject_failure.py (TRAINDECK_INJECT)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from support.cgrouphelp import make_memory_cgroup, remove_cgroup
from support.runhelp import DEMO, SCRIPTS, leftovers, ranks, wait_finished

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run
from traindeck.backend.runs.record.run_store import RunRecord

deepspeed = pytest.importorskip("deepspeed", reason="needs the train extra (deepspeed)")

INJECT = SCRIPTS / "inject_failure.py"
IN_CGROUP = SCRIPTS / "in_cgroup.py"
# ZeRO-0 with torch's own AdamW: no DeepSpeed op to build, so the test spends its time on the failure.
CONFIG = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
          "zero_optimization": {"stage": 0}}


def _launch(tmp_path: Path, inject: str, cgroup: Path | None = None) -> RunRecord:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps(CONFIG))
    run_dir = new_run_dir()
    plan = build_plan(LaunchRequest(
        script=str(INJECT), launcher="deepspeed", nproc=2, cwd=run_dir.path,
        script_args=[str(DEMO), "--deepspeed_config", str(config), "--steps", "300", "--step-time", "0.02",
                     "--log-every", "5"],
        env={"TRAINDECK_INJECT": inject, "TRAINDECK_INJECT_TIMEOUT": "20"}), run_dir.path)
    assert plan.ok, plan.errors
    if cgroup is not None:  # the launcher and its ranks in the cgroup, as under a Slurm job or a container
        plan = dataclasses.replace(plan, argv=[sys.executable, str(IN_CGROUP), str(cgroup), *plan.argv])
    return start_run(plan, run_dir, name=f"cascade-{inject.split(':')[0]}")


def _finished(run: RunRecord) -> tuple[RunRecord, dict, str]:  # type: ignore[type-arg]
    done = wait_finished(run.id, 400)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert done.state == "failed" and done.diagnosis is not None, (done.state, log[-3000:])
    assert sorted(ranks(done)) == [0, 1], done.processes  # compilers, loader workers: never ranks
    assert leftovers(done) == []
    return done, done.diagnosis, log


def test_a_rank_that_raises_while_its_peer_waits_in_a_collective_is_the_cause(tmp_path: Path) -> None:
    done, d, log = _finished(_launch(tmp_path, "raise:1:3"))
    assert "Connection closed by peer" in log or "Connection reset" in log, log[-3000:]
    assert d["kind"] == "exception" and d["rank"] == 1, (d, log[-3000:])
    assert d["summary"] == "Rank 1 raised RuntimeError: injected failure in rank 1.", d
    assert any(f.startswith("rank 0: ") and ("Connection closed by peer" in f or "Connection reset" in f)
               for f in d["follow_ons"]), d
    assert not any("Connection" in e for e in d["evidence"]), d


def test_an_allocator_failure_on_one_rank_is_that_ranks_host_memory_failure(tmp_path: Path) -> None:
    done, d, log = _finished(_launch(tmp_path, "alloc:1:3"))
    assert "DefaultCPUAllocator: can't allocate memory" in log
    assert (d["kind"], d["rank"], d["memory"]) == ("cpu_alloc", 1, "host"), (d, log[-3000:])
    assert "ran out of host memory" in d["summary"] and "16384.0 GiB" in d["summary"], d
    assert any(f.startswith("rank 0") for f in d["follow_ons"]), d


def test_a_run_killed_at_its_cgroup_memory_limit_is_reported_as_that_limit(tmp_path: Path) -> None:
    cgroup = make_memory_cgroup("traindeck-test", 2 << 30)
    if isinstance(cgroup, str):
        pytest.skip(f"no memory cgroup can be made here ({cgroup}); the replay test covers the diagnosis")
    try:
        done, d, log = _finished(_launch(tmp_path, "grow:1:3", cgroup=cgroup))
    finally:
        remove_cgroup(cgroup)
    assert (d["kind"], d["rank"], d["memory"]) == ("cgroup_oom", 1, "cgroup"), (d, log[-3000:])
    assert "at the run's memory limit (2.0 GiB, set by cgroup " in d["summary"], d
    assert "not because the host ran out of RAM" in d["summary"] and "add RAM" not in d["advice"]

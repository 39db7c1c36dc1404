"""Real launchers on the CPU: DeepSpeed (2 ranks, ZeRO-2 with optimizer offload), accelerate, plain python.

The demo script trains for real (torch); the DeepSpeed rank-death and stop cases use the stdlib stand-in script
under the real deepspeed launcher (runner -> launch.py -> 2 ranks), which is what matters for the process tree.
The first DeepSpeed run JIT-builds its CPU ops (~90 s, kept in TORCH_EXTENSIONS_DIR).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from support.runhelp import (
    BEHAVE,
    DEMO,
    events,
    get,
    launch,
    leftovers,
    metrics,
    ranks,
    wait_finished,
    wait_until,
)

from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.record.run_store import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.train]
deepspeed = pytest.importorskip("deepspeed", reason="needs the train extra")

ZERO2_OFFLOAD = {
    "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "steps_per_print": 5,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
}


def test_cpu_demo_preset_trains_two_deepspeed_ranks_with_optimizer_offload() -> None:
    # The preset a newcomer's first click starts: ZeRO-2 + CPU optimizer offload, 2 ranks on DeepSpeed's CPU
    # accelerator, exported from the preset store into the run directory.
    run = launch(DEMO, "--deepspeed_config", "{ds_config}", "--steps", "12", "--step-time", "0",
                 "--log-every", "4", launcher="deepspeed", preset="cpu-demo", name="ds-demo")
    done = wait_finished(run.id, 540)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert done.state == "succeeded", (done.diagnosis, log[-3000:])
    assert "train_tiny: mode=deepspeed world_size=2" in log
    ds_config = json.loads(Path(done.run_dir, "ds_config.json").read_text())
    assert ds_config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "DeepSpeedCPUAdam" in log or "cpu_adam" in log.lower()
    # steps_per_print 1 with log_level info: DeepSpeed's own step line for every optimizer step (0.19 prints
    # none without log_level info), which is what shows progress for scripts without a bar.
    assert sum(f"step={n}," in log for n in range(1, 13)) == 12, log[-3000:]
    assert done.progress is not None and done.progress["current"] == 12 and done.progress["total"] == 12
    values = metrics(run.id)
    assert {"loss", "learning_rate"} <= set(values)
    # A rank's exit code is seen only if the supervisor catches it as a zombie before the launcher reaps it; on a
    # loaded machine the launcher can win that race (None). Never a non-zero code, though.
    assert set(ranks(done)) == {0, 1} and all(p["returncode"] in (0, None) for p in ranks(done).values())
    assert leftovers(done) == []
    # DeepSpeed's CPU all-reduce buffers (64 MiB a rank in /dev/shm, never unlinked by DeepSpeed) are freed
    port = next(arg.split("=", 1)[1] for arg in Path(done.run_dir, "output.log").read_text(errors="replace").split()
                if arg.startswith("--master_port="))
    assert not [p.name for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*")]
    assert any("shared-memory buffer" in text for kind, text in events(run.id) if kind == "shm_freed"), events(run.id)
    # The supervisor recorded the ranks' resources at 1 Hz; `runs show --json` reports them (real CLI).
    shown = subprocess.run([sys.executable, "-m", "traindeck", "runs", "show", run.id, "--json"],
                           capture_output=True, text=True, check=True)
    resources = json.loads(shown.stdout)["resources"]
    assert resources["samples"] >= 3, resources
    assert resources["peak_rank_rss_bytes"] > 100 * 2**20  # a rank holding torch + DeepSpeed: hundreds of MiB
    assert resources["peak_ranks_rss_bytes"] > resources["peak_rank_rss_bytes"]  # both ranks were measured
    assert resources["peak_gpu_mem_bytes"] is None and resources["gpu_error"]  # no GPU here: said, not zero
    assert 0 < resources["peak_host_used_bytes"] <= resources["ram_total_bytes"]


def test_accelerate_single_process() -> None:
    run = launch(DEMO, "--steps", "15", "--step-time", "0", "--log-every", "5", launcher="accelerate", nproc=1,
                 name="acc-demo")
    done = wait_finished(run.id, 300)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert done.state == "succeeded", (done.diagnosis, log[-3000:])
    assert "train_tiny: mode=accelerate world_size=1" in log
    assert done.progress is not None and done.progress["current"] == 15
    assert "loss" in metrics(run.id)
    assert leftovers(done) == []


def test_plain_python_demo() -> None:
    run = launch(DEMO, "--steps", "15", "--step-time", "0", "--log-every", "5", launcher="python", name="py-demo")
    done = wait_finished(run.id, 300)
    assert done.state == "succeeded", done.diagnosis
    assert "train_tiny: mode=python" in Path(done.run_dir, "output.log").read_text()
    assert done.progress is not None and done.progress["current"] == 15 and done.progress["total"] == 15
    assert metrics(run.id)["loss"] > 0
    assert leftovers(done) == []


@pytest.mark.parametrize(("end", "kind", "words"), [
    ("sigkill", "killed", "Rank 1 was killed by SIGKILL"),
    ("exception", "exception", "RuntimeError: boom on rank 1"),
    ("exit:7", "exit_code", "Rank 1 exited with code 7"),
    ("cuda_oom", "cuda_oom", "out of GPU memory"),
])
def test_deepspeed_rank_death_is_diagnosed_and_nothing_remains(end: str, kind: str, words: str) -> None:
    run = launch(BEHAVE, "--steps", "200", "--step-time", "0.05", "--die-rank", "1", "--die-at", "5", "--end", end,
                 launcher="deepspeed", nproc=2)
    done = wait_finished(run.id, 180)
    assert done.state == "failed"
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert done.diagnosis is not None and done.diagnosis["kind"] == kind, (done.diagnosis, log[-3000:])
    assert words in done.diagnosis["summary"] + " | ".join(done.diagnosis["evidence"]), done.diagnosis
    assert done.diagnosis["rank"] == 1
    assert "[rank1]: behave: rank 1 starting" in log and "[rank0]: behave: rank 0 starting" in log  # tagged
    assert leftovers(done) == []


def test_a_rank_dead_within_a_scan_is_still_the_one_blamed() -> None:
    # Rank 1 ends ~30 ms after it starts, before the supervisor's 4 Hz scan can read its RANK: the launcher's own
    # log names it, and rank 0 (ended by the launcher a second later) is not blamed.
    run = launch(BEHAVE, "--steps", "200", "--step-time", "0.05", "--die-rank", "1", "--die-at", "1", "--end",
                 "exit:7", launcher="deepspeed", nproc=2)
    done = wait_finished(run.id, 180)
    assert done.diagnosis is not None and done.diagnosis["kind"] == "exit_code", done.diagnosis
    assert done.diagnosis["rank"] == 1 and "Rank 1 exited with code 7" in done.diagnosis["summary"], done.diagnosis
    assert sorted(p["rank"] for p in done.processes if p["role"] == "rank") == [0, 1]
    assert leftovers(done) == []


def _deepspeed_job_running():  # type: ignore[no-untyped-def]
    run = launch(BEHAVE, "--steps", "2000", "--step-time", "0.05", launcher="deepspeed", nproc=2)
    record = wait_until(lambda: len(ranks(r := get(run.id))) == 2 and (r.progress or {}).get("current", 0) >= 2
                        and r, timeout=120)
    return record


def test_deepspeed_stop_ends_every_rank() -> None:
    record = _deepspeed_job_running()
    messages: list[str] = []
    outcome = stop_run(RunStore(), record.id, grace_s=5, report=messages.append)
    assert outcome.state == "stopped" and outcome.remaining == [], messages
    assert messages[-1] == "confirmed: no process of the run remains"
    assert leftovers(get(record.id)) == []


def test_deepspeed_runner_killed_leaves_no_rank() -> None:
    record = _deepspeed_job_running()
    os.kill(record.launcher_pid, signal.SIGKILL)  # launch.py and both ranks are orphaned
    done = wait_finished(record.id, 60)
    assert done.state == "failed" and done.exit_code == -signal.SIGKILL
    assert any(kind == "leftovers" for kind, _ in events(record.id))
    assert leftovers(done) == []


def test_deepspeed_supervisor_killed_leaves_no_rank() -> None:
    record = _deepspeed_job_running()
    job = [p["pid"] for p in record.processes]
    os.kill(record.supervisor_pid, signal.SIGKILL)  # type: ignore[arg-type]
    done = wait_finished(record.id, 60)
    assert done.state == "lost"
    wait_until(lambda: not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in job),
               timeout=20)
    assert leftovers(done) == []


def test_deepspeed_batch_size_assertion_is_diagnosed(tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({**ZERO2_OFFLOAD, "train_batch_size": 64}))  # 8 x 1 x 2 != 64
    run = launch(DEMO, "--deepspeed_config", "{ds_config}", "--steps", "5", "--step-time", "0",
                 launcher="deepspeed", nproc=2, config=config)
    done = wait_finished(run.id, 300)
    assert done.state == "failed"
    assert done.diagnosis is not None and done.diagnosis["kind"] == "deepspeed_batch_size", done.diagnosis
    assert "64 != 8 * 1 * 2" in done.diagnosis["evidence"][0]
    assert leftovers(done) == []

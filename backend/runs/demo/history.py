"""Finished runs that never ran: realistic records for the dashboard's screenshots (`traindeck gui --screenshot`).

Each demo run is written the way a real one is: a run directory with the preset's config files (the launcher's own
renderer) and command.json, a run-store row with progress, diagnosis and metrics, and the monitor's resource
samples. Write them into a store of their own (never the user's): `create_demo_runs(tmp / "runs.sqlite3", tmp)`.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.monitor.sample_store import ResourceWriter
from traindeck.backend.monitor.snapshots import (
    GpuSnapshot,
    HostSnapshot,
    ResourceSample,
    RunProcess,
    RunSnapshot,
)
from traindeck.backend.presets import load_builtin
from traindeck.backend.runs.diagnosis.diagnose import Diagnosis
from traindeck.backend.runs.diagnosis.kinds import DiagnosisKind
from traindeck.backend.runs.record.run_store import RunRecord, RunStore

GIB = 1024**3
T_END = 1_767_628_800.0  # 2026-01-05 16:00 UTC: the newest demo run ended then


@dataclass(frozen=True)
class DemoRun:
    """What one demo run was like."""

    name: str
    preset: str
    state: str  # succeeded | failed | stopped
    steps: int  # reached
    total: int
    seconds_per_step: float
    gpus: int
    gpu_mem_gib: float  # peak per GPU
    rank_rss_gib: float  # peak resident memory per rank
    loss_end: float
    ended_hours_ago: float
    summary: str = ""
    kind: DiagnosisKind = "succeeded"


DEMO_RUNS = (
    DemoRun("gpt2-finetune-zero3", "zero3", "succeeded", 2000, 2000, 0.61, 2, 11.2, 5.4, 2.93, 1.0),
    DemoRun("gpt2-finetune-zero2", "zero2", "succeeded", 2000, 2000, 0.42, 2, 17.8, 6.1, 2.91, 4.5),
    DemoRun("llama-1b-offload", "zero2-offload", "stopped", 640, 3000, 1.85, 2, 9.6, 27.5, 2.35, 26.0,
            "stopped by the user after 640 steps", "stopped"),
    DemoRun("llama-1b", "zero2", "failed", 3, 3000, 0.9, 2, 23.9, 7.2, 3.8, 27.0,
            "rank 1 ran out of GPU memory (CUDA out of memory)", "cuda_oom"),
)


def _sample(t: float, i: int, n: int, run: DemoRun) -> ResourceSample:
    """A one-second look at the run: memory climbs to its peak in the first tenth, then breathes."""
    rise = min(1.0, (i + 1) / max(1, n // 10))
    wave = 0.5 + 0.5 * math.sin(i / 5.0)
    gpu_used = int(run.gpu_mem_gib * GIB * rise * (0.97 + 0.03 * wave))
    rss = int(run.rank_rss_gib * GIB * rise * (0.98 + 0.02 * wave))
    gpus = tuple(
        GpuSnapshot(t=t, index=g, name="NVIDIA RTX A5000", uuid=f"GPU-demo-{g}", utilization_percent=92.0 * rise,
                    memory_used_bytes=gpu_used, memory_total_bytes=24564 * 1024**2, power_w=190.0 * rise + 30,
                    power_limit_w=230.0, temperature_c=45 + 25 * rise, sm_clock_mhz=1695,
                    pcie_h2d_bytes_per_s=2e9 * wave, pcie_d2h_bytes_per_s=1.5e9 * wave, pcie_t=t)
        for g in range(run.gpus)
    )
    processes = (RunProcess(5000, 4990, "accelerate", "accelerate launch train.py", "launcher", None, None, 0.5,
                            300 * 1024**2, 0, 0, 0),) + tuple(
        RunProcess(5001 + r, 5000, "python", f"python train.py --local_rank={r}", "rank", r, r, 110.0, rss,
                   0, 10**9, 10**8, gpu_used) for r in range(run.gpus))
    used = run.gpus * rss + 6 * GIB
    host = HostSnapshot(t=t, cpu_percent=35.0, per_core_percent=(35.0,) * 16, ram_total_bytes=64 * GIB,
                        ram_used_bytes=used, ram_available_bytes=64 * GIB - used, swap_total_bytes=8 * GIB,
                        swap_used_bytes=0, disk_read_bytes_per_s=1e6, disk_write_bytes_per_s=2e6, disks=(),
                        net_rx_bytes_per_s=1e4, net_tx_bytes_per_s=1e4)
    return ResourceSample(t=t, host=host, gpus=gpus, gpu_error=None,
                          run=RunSnapshot(t=t, root_pid=5000, processes=processes))


def create_demo_runs(store_path: Path | str, runs_root: Path | str, runs: tuple[DemoRun, ...] = DEMO_RUNS,
                     t_end: float = T_END) -> list[str]:
    """Write the demo runs (run directories under runs_root, rows in the store at store_path); their ids, newest
    first."""
    from traindeck.backend.launch.builders import render_config_files

    runs_root = Path(runs_root)
    ids = []
    with RunStore(store_path) as store:
        for index, run in enumerate(runs):
            ended = t_end - run.ended_hours_ago * 3600
            started = ended - run.steps * run.seconds_per_step - 45  # start-up before the first step
            run_id = "demo-" + "-".join(("20260105", f"{index:04d}"))
            run_dir = runs_root / run_id
            run_dir.mkdir(parents=True, exist_ok=True)
            preset = load_builtin(run.preset)
            for name, text in render_config_files(preset, run_dir).items():
                atomic_write_text(run_dir / name, text)
            port = 29500 + index
            argv = ["accelerate", "launch", "--config_file", str(run_dir / "accelerate_config.yaml"),
                    "--main_process_port", str(port), "train.py", "--model", run.name.split("-")[0]]
            command = {"argv": argv, "command_line": shlex.join(argv), "cwd": "/home/demo/project",
                       "launcher": "accelerate", "nproc": run.gpus, "master_port": port, "python": "/usr/bin/python3",
                       "env": {}}
            atomic_write_text(run_dir / "command.json", json.dumps(command, indent=2, sort_keys=True) + "\n")
            atomic_write_text(run_dir / "output.log", f"demo run {run.name}: no output recorded\n")
            diagnosis = None if run.state == "succeeded" else Diagnosis(run.summary, run.kind).to_json()
            store.add_run(RunRecord(
                id=run_id, run_dir=str(run_dir), created_at=started - 2, name=run.name, preset=run.preset,
                launcher="accelerate", script="train.py", argv=argv, cwd="/home/demo/project", started_at=started,
                progress={"current": run.steps, "total": run.total, "rate": 1 / run.seconds_per_step,
                          "eta_s": None, "unit": "it", "updated": ended}))
            first_step = started + 45
            metrics = []
            for step in range(10, run.steps + 1, 10):
                loss = run.loss_end + 4.0 * math.exp(-step / 300) + 0.02 * math.sin(step)
                metrics.append(("loss", step, first_step + step * run.seconds_per_step, loss, None))
            if run.state == "succeeded":
                metrics.append(("train_samples_per_second", run.steps, ended, 8 * run.gpus / run.seconds_per_step,
                                None))
            store.add_metrics(run_id, metrics)
            writer = ResourceWriter(store.path, run_id, interval_s=max(1.0, (ended - started) / 120),
                                    started_at=started)
            try:
                count = 120
                for i in range(count):
                    writer.write(_sample(started + i * (ended - started) / count, i, count, run), commit=False)
                writer.commit()
            finally:
                writer.close()
            store.finish_run(run_id, run.state, ended_at=ended, exit_code={"succeeded": 0, "stopped": -2}.get(run.state, 1),
                             diagnosis=diagnosis, state_detail=run.summary)
            ids.append(run_id)
    order = sorted(range(len(runs)), key=lambda k: runs[k].ended_hours_ago)
    return [ids[k] for k in order]

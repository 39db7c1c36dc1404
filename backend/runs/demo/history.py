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
from traindeck.backend.presets import load_builtin
from traindeck.backend.runs.demo.resources import ResourceStory, write_samples
from traindeck.backend.runs.diagnosis.diagnose import Diagnosis
from traindeck.backend.runs.diagnosis.kinds import DiagnosisKind
from traindeck.backend.runs.record.run_store import RunRecord, RunStore

SAMPLES = 120  # resource samples a finished demo run keeps (spread over its run: the demo store is made fast)
STARTUP_S = 45.0  # from the launch to the first step
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


def _story(run: DemoRun) -> ResourceStory:
    """The run's resources as its numbers tell: its GPUs, their memory and the ranks' host memory."""
    return ResourceStory(gpus=run.gpus, gpu_mem_gib=run.gpu_mem_gib, rank_rss_gib=run.rank_rss_gib,
                         startup_s=STARTUP_S)


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
            started = ended - run.steps * run.seconds_per_step - STARTUP_S
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
            first_step = started + STARTUP_S
            metrics = []
            for step in range(10, run.steps + 1, 10):
                loss = run.loss_end + 4.0 * math.exp(-step / 300) + 0.02 * math.sin(step)
                metrics.append(("loss", step, first_step + step * run.seconds_per_step, loss, None))
            if run.state == "succeeded":
                metrics.append(("train_samples_per_second", run.steps, ended, 8 * run.gpus / run.seconds_per_step,
                                None))
            store.add_metrics(run_id, metrics)
            write_samples(store.path, run_id, _story(run), started, ended, count=SAMPLES)
            store.finish_run(run_id, run.state, ended_at=ended, exit_code={"succeeded": 0, "stopped": -2}.get(run.state, 1),
                             diagnosis=diagnosis, state_detail=run.summary)
            ids.append(run_id)
    order = sorted(range(len(runs)), key=lambda k: runs[k].ended_hours_ago)
    return [ids[k] for k in order]

"""Runs that never ran: the run view's screenshot (`traindeck gui --screenshot`) without training.

`create_running_demo(store_path, runs_root)` writes what a two-rank `accelerate launch --tee 3` DeepSpeed ZeRO-2
fine-tune looks like four minutes in: an output.log with rank tags, start-up logging, tqdm redraws and HF Trainer
dicts, and a run-store row whose progress and metrics come from feeding that log through the real parser (so the
screenshot shows what traindeck would really make of it). `create_failed_demo` adds a run whose rank 1 ran out of
GPU memory, diagnosed by the real diagnosis from its log and exit codes. Write them into a store of their own,
never the user's. Both runs carry the resource samples their supervisor's recorder would have written
(resources.py), so their System view and Monitor charts show what a real run's do.
"""

from __future__ import annotations

import json
import math
import random
import shlex
import time
from pathlib import Path

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.logparse import LineAssembler, Metric, OutputParser, Progress
from traindeck.backend.runs.demo.resources import ResourceStory, write_samples
from traindeck.backend.runs.diagnosis.diagnose import Evidence, ProcessEnd, diagnose
from traindeck.backend.runs.record.run_store import RunRecord, RunStore

TOTAL_STEPS = 2000
STEPS_DONE = 1240
SECONDS_PER_STEP = 0.155
START_UP_S = 31.0
LOG_EVERY = 50
CHECKPOINT_STEP = 800


def _step_time(step: int) -> float:
    """Seconds after the first step that `step` ended (the log's pace)."""
    return step * SECONDS_PER_STEP * (1 + 0.03 * math.sin(step / 40))


def _bar(n: int, total: int, elapsed: float, rate: float) -> str:
    """tqdm's default format, as a 10-cell bar with eighths."""
    frac = n / total
    cells = frac * 10
    full = int(cells)
    partial = " ▏▎▍▌▋▊▉"[int((cells - full) * 8)] if full < 10 else ""
    bar = ("█" * full + partial).ljust(10)
    left = (total - n) / rate if rate else 0.0
    return f"train: {int(100 * frac):3d}%|{bar}| {n}/{total} [{_mmss(elapsed)}<{_mmss(left)}, {rate:5.2f}it/s]"


def _mmss(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60:02d}:{s % 60:02d}"


def demo_log(t0: float) -> list[tuple[float, str]]:
    """(time written, raw text) pieces of the demo run's output.log, oldest first."""
    rng = random.Random(7)
    out: list[tuple[float, str]] = []

    def stamp(t: float, style: str) -> str:
        lt = time.localtime(t)
        if style == "ds":
            return time.strftime("[%Y-%m-%d %H:%M:%S", lt) + f",{int(t * 1000) % 1000:03d}]"
        if style == "glog":
            return time.strftime("W%m%d %H:%M:%S", lt) + f".{int(t * 1e6) % 1000000:06d} 48211"
        return time.strftime("%m/%d/%Y %H:%M:%S", lt)

    def say(t: float, text: str, rank: int | None = None) -> None:
        out.append((t, (f"[default{rank}]:" if rank is not None else "") + text + "\n"))

    star = "*" * 41
    for text in ("", star, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
                 "your system being overloaded, please further tune the variable for optimal performance in your "
                 "application as needed.", star):
        say(t0 + 0.4, f"{stamp(t0 + 0.4, 'glog')} torch/distributed/run.py:874] {text}")
    for rank in (0, 1):
        t = t0 + 6.2 + rank * 0.01
        say(t, f"{stamp(t, 'ds')} [INFO] [real_accelerator.py:239:get_accelerator] Setting ds_accelerator to cuda "
               "(auto detect)", rank)
    for rank in (0, 1):
        t = t0 + 9.8 + rank * 0.02
        say(t, f"{stamp(t, 'log')} - INFO - __main__ - [RANK {rank}] Distributed environment: DEEPSPEED  Backend: "
               f"nccl", rank)
        say(t, f"Num processes: 2\nProcess index: {rank}\nLocal process index: {rank}\nDevice: cuda:{rank}"
               .replace("\n", f"\n[default{rank}]:"), rank)
    t = t0 + 12.5
    say(t, f"{stamp(t, 'log')} - INFO - __main__ - [RANK 0] loading gpt2 (124.4M parameters) and 64,000 examples", 0)
    t = t0 + 21.0
    say(t, f"{stamp(t, 'ds')} [INFO] [logging.py:107:log_dist] [Rank 0] DeepSpeed info: version=0.16.4, "
           "git-hash=unknown, git-branch=unknown", 0)
    say(t, f"{stamp(t, 'ds')} [INFO] [config.py:999:print] ZeRO stage 2: reduce_bucket_size 500000000, "
           "overlap_comm True, contiguous_gradients True", 0)
    t = t0 + 24.3
    say(t, f"{stamp(t, 'ds')} [INFO] [stage_1_and_2.py:151:__init__] Reduce bucket size 500000000", 0)
    say(t, f"{stamp(t, 'ds')} [INFO] [stage_1_and_2.py:545:__init__] optimizer state initialized", 0)
    t = t0 + 26.1
    say(t, f"{stamp(t, 'ds')} [WARNING] [stage_1_and_2.py:1880:step] [deepspeed] OVERFLOW! Rank 1 Skipping step. "
           "Attempted loss scale: 65536, reducing to 32768", 1)
    t = t0 + START_UP_S - 0.5
    for text in ("***** Running training *****", "  Num examples = 64,000", "  Num Epochs = 1",
                 "  Instantaneous batch size per device = 16", "  Gradient Accumulation steps = 2",
                 f"  Total optimization steps = {TOTAL_STEPS:,}"):
        say(t, f"{stamp(t, 'log')} - INFO - __main__ - [RANK 0] {text}", 0)
    start = t0 + START_UP_S
    say(start, f"train:   0%|          | 0/{TOTAL_STEPS} [00:00<?, ?it/s]", 0)
    for step in range(1, STEPS_DONE + 1):
        t = start + _step_time(step)
        if step % 10 == 0 or step == STEPS_DONE:
            say(t, _bar(step, TOTAL_STEPS, t - start, step / (t - start)), 0)
        if step % LOG_EVERY == 0:
            loss = 2.95 + 1.6 * math.exp(-step / 260) + 0.06 * rng.gauss(0, 1) - 0.00012 * step
            lr = 5e-5 * min(1.0, step / 100) * (1 - step / TOTAL_STEPS)
            say(t, f"{{'loss': {loss:.4f}, 'grad_norm': {abs(1.1 + 0.4 * rng.gauss(0, 1)):.3f}, "
                   f"'learning_rate': {lr:.3e}, 'epoch': {step / TOTAL_STEPS:.2f}}}", 0)
        if step == CHECKPOINT_STEP:
            say(t, f"{stamp(t, 'log')} - INFO - __main__ - [RANK 0] saving checkpoint to "
                   "/home/demo/project/out/checkpoint-800", 0)
            say(t + 0.2, f"{stamp(t + 0.2, 'log')} - INFO - __main__ - [RANK 1] checkpoint shard written", 1)
    return out


def create_running_demo(store_path: Path | str, runs_root: Path | str, now: float | None = None) -> str:
    """Write the demo run (running, four minutes in) and return its id."""
    now = time.time() if now is None else now
    steps_s = STEPS_DONE * SECONDS_PER_STEP
    t0 = now - START_UP_S - steps_s - 0.4
    run_id = time.strftime("%Y%m%d-%H%M%S", time.localtime(t0)) + "-7f3a"
    run_dir = Path(runs_root) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    pieces = demo_log(t0)
    atomic_write_text(run_dir / "output.log", "".join(text for _, text in pieces))
    shown_dir = f"/home/demo/.local/share/traindeck/runs/{run_id}"  # what a real run's command line would say
    argv = ["accelerate", "launch", "--config_file", f"{shown_dir}/accelerate_config.yaml", "--tee", "3",
            "--main_process_port", "29512", "train.py", "--model", "gpt2", "--deepspeed", f"{shown_dir}/ds_config.json"]
    command = {"argv": argv, "command_line": shlex.join(argv), "cwd": "/home/demo/project", "launcher": "accelerate",
               "nproc": 2, "master_port": 29512, "python": "/usr/bin/python3", "env": {}}
    atomic_write_text(run_dir / "command.json", json.dumps(command, indent=2, sort_keys=True) + "\n")

    # What the supervisor would have recorded: the real parser over the same bytes, at the times they were written.
    assembler, parser = LineAssembler(), OutputParser()
    metrics: list[tuple[str, int | None, float, float, int | None]] = []
    progress: Progress | None = None
    for t, text in pieces:
        for line in assembler.feed(text.encode()):
            for item in parser.feed(line, now=t):
                if isinstance(item, Metric):
                    metrics.append((item.name, item.step, t, float(item.value), item.rank))
        progress = parser.progress or progress
    with RunStore(store_path) as store:
        store.add_run(RunRecord(
            id=run_id, run_dir=str(run_dir), created_at=t0 - 0.3, name="gpt2-finetune", preset="zero2",
            launcher="accelerate", script="train.py", argv=argv, cwd="/home/demo/project", started_at=t0,
            launcher_pid=48211, processes=[
                {"pid": 48211, "started": t0, "rank": None, "role": "launcher", "name": "accelerate"},
                {"pid": 48230, "started": t0 + 1, "rank": 0, "role": "rank", "name": "python"},
                {"pid": 48231, "started": t0 + 1, "rank": 1, "role": "rank", "name": "python"}],
            progress=None if progress is None else {
                "current": progress.current, "total": progress.total, "rate": progress.rate, "eta_s": progress.eta_s,
                "unit": progress.unit, "source": progress.source, "updated": now}))
        store.add_metrics(run_id, metrics)
        store.add_event(run_id, "started", "launcher started (pid 48211)", t=t0)
    # The recorder's samples, a second apart: gpt2 in ZeRO-2 on two 24 GiB cards, a checkpoint at step 800.
    story = ResourceStory(gpus=2, gpu_mem_gib=9.4, rank_rss_gib=4.8, startup_s=START_UP_S, root_pid=48211,
                          rank_pids=(48230, 48231), checkpoints=(START_UP_S + _step_time(CHECKPOINT_STEP),))
    write_samples(store_path, run_id, story, t0, now)
    return run_id


def create_failed_demo(store_path: Path | str, runs_root: Path | str, now: float | None = None) -> str:
    """Write a finished demo run that failed (CUDA out of memory on rank 1) and return its id."""
    now = time.time() if now is None else now
    t0 = now - 3 * 3600
    run_id = time.strftime("%Y%m%d-%H%M%S", time.localtime(t0)) + "-c0de"
    run_dir = Path(runs_root) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    tail = [
        "[default0]:train:   0%|          | 3/3000 [00:04<1:02:11,  1.24s/it]",
        "[default1]:[rank1]: Traceback (most recent call last):",
        '[default1]:[rank1]:   File "/home/demo/project/train.py", line 141, in <module>',
        "[default1]:[rank1]:     loss = model(**batch).loss",
        "[default1]:[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 1 has a "
        "total capacity of 23.57 GiB of which 1.12 GiB is free. Of the allocated memory 20.9 GiB is allocated by "
        "PyTorch, and 812.4 MiB is reserved by PyTorch but unallocated.",
        "W0105 12:59:47.102000 51201 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 51229 "
        "closing signal SIGTERM",
        "E0105 12:59:47.620000 51201 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 1 (pid: 51230) of binary: /usr/bin/python3",
    ]
    atomic_write_text(run_dir / "output.log", "\n".join(tail) + "\n")
    # The diagnosis sees what the supervisor would: the exit codes and the log's last lines (tags removed).
    plain = [line.split("]:", 1)[1] if line.startswith("[default") else line for line in tail]
    ends = [ProcessEnd(51230, "rank", 1, t0 + 44.0, 1), ProcessEnd(51229, "rank", 0, t0 + 45.1, -15),
            ProcessEnd(51201, "launcher", None, t0 + 45.6, 1)]
    diagnosis = diagnose(Evidence(launcher_returncode=1, ends=ends, log_tail=plain))
    argv = ["accelerate", "launch", "--config_file", f"/home/demo/.local/share/traindeck/runs/{run_id}/"
            "accelerate_config.yaml", "train.py", "--model", "llama-1b", "--batch-size", "16"]
    with RunStore(store_path) as store:
        store.add_run(RunRecord(
            id=run_id, run_dir=str(run_dir), created_at=t0 - 0.3, name="llama-1b", preset="zero2",
            launcher="accelerate", script="train.py", argv=argv, cwd="/home/demo/project", started_at=t0,
            progress={"current": 3, "total": 3000, "rate": 0.8, "eta_s": 3745.0, "unit": "it", "updated": t0 + 40}))
        store.finish_run(run_id, "failed", ended_at=t0 + 46.0, exit_code=1, diagnosis=diagnosis.to_json(),
                         state_detail=diagnosis.summary)
    # Rank 1's GPU memory climbs to what the OOM message says (22.45 of 23.57 GiB in use) as it dies; rank 0 is
    # stopped a second later.
    story = ResourceStory(gpus=2, gpu_mem_gib=20.6, rank_rss_gib=7.2, startup_s=40.0, root_pid=51201,
                          rank_pids=(51229, 51230), rank_ends={1: 44.0, 0: 45.1},
                          gpu_mem_end_gib={1: 22.45, 0: 21.3})
    write_samples(store_path, run_id, story, t0, t0 + 46.0)
    return run_id

"""Who is on each GPU now, in words for the Launch page's GPU picker: its use (utilization, memory), whether the
queue counts it free, and each process on it with its name, its user and the traindeck run it belongs to.

The GPU snapshots come from the monitor's sampler (queue.gpus.sample_gpus); free/busy is queue.gpus's own rule, so
the picker and the queue never disagree. Processes are looked up with psutil; a PID that cannot be seen here (another
PID namespace, gone meanwhile) is said so, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psutil

from traindeck.backend.monitor.snapshots import GpuProcess, GpuSnapshot
from traindeck.backend.queue.gpus import busy_reason, gpu_is_free
from traindeck.backend.runs.record.run_store import RunRecord


@dataclass(frozen=True)
class GpuUse:
    index: int
    name: str
    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    free: bool
    state: str  # "free", or why the queue would wait for it
    who: tuple[str, ...]  # one line per process: "python (pid 4242, alice, run tiny-lr=1e-5)"

    @property
    def use_text(self) -> str:
        util = f"{self.utilization_percent:.0f}%" if self.utilization_percent is not None else "?%"
        if self.memory_used_bytes is None:
            return f"{util}, memory unknown"
        total = f" / {self.memory_total_bytes / 2**30:.1f}" if self.memory_total_bytes else ""
        return f"{util}, {self.memory_used_bytes / 2**30:.1f}{total} GiB"


def run_pids(runs: Iterable[RunRecord]) -> dict[int, str]:
    """PID -> run name for the processes traindeck knows of running runs (launcher, supervisor, ranks)."""
    owners: dict[int, str] = {}
    for run in runs:
        name = run.name or run.id
        for pid in (run.launcher_pid, run.supervisor_pid):
            if pid:
                owners[pid] = name
        for proc in run.processes or []:
            if isinstance(proc, dict) and isinstance(proc.get("pid"), int):
                owners[proc["pid"]] = name
    return owners


def describe_process(process: GpuProcess, owners: dict[int, str]) -> str:
    memory = f", {process.used_memory_bytes / 2**20:.0f} MiB" if process.used_memory_bytes is not None else ""
    try:
        proc = psutil.Process(process.pid)
        name, user = proc.name(), proc.username()
        lineage = [process.pid] + [p.pid for p in proc.parents()]
    except (psutil.Error, OSError):
        return f"pid {process.pid}{memory} (not visible from here)"
    run = next((owners[pid] for pid in lineage if pid in owners), None)
    return f"{name} (pid {process.pid}, {user}{memory})" + (f", run {run}" if run else "")


def gpu_use(gpus: Sequence[GpuSnapshot], running: Iterable[RunRecord] = ()) -> list[GpuUse]:
    owners = run_pids(running)
    found = []
    for gpu in gpus:
        free = gpu_is_free(gpu)
        who = tuple(describe_process(p, owners) for p in gpu.processes)
        if gpu.processes_unknown and not who:
            who = (f"processes not known: {gpu.processes_unknown}",)
        found.append(GpuUse(gpu.index, gpu.name or f"GPU {gpu.index}", gpu.utilization_percent,
                            gpu.memory_used_bytes, gpu.memory_total_bytes, free,
                            "free" if free else busy_reason(gpu).removeprefix(f"GPU {gpu.index} "), who))
    return found


def gpu_use_now(library: object | None = None) -> list[GpuUse]:
    """Sample every GPU and describe it (a worker-thread call: NVML and psutil take a moment)."""
    from traindeck.backend.core.paths import run_store_path
    from traindeck.backend.queue.gpus import sample_gpus

    gpus = sample_gpus(library)  # type: ignore[arg-type]
    running: list[RunRecord] = []
    if gpus:
        try:
            from pathlib import Path

            if Path(run_store_path()).exists():
                from traindeck.backend.runs.record.run_store import RunStore

                with RunStore(busy_timeout_s=2.0) as store:
                    running = store.list_runs(state="running")
        except Exception:  # noqa: BLE001 - the GPU list is worth showing without run names
            running = []
    return gpu_use(gpus, running)

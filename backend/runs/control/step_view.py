"""A run's step anatomy as the CLI and the dashboard show it: the store's step rows, the run's set-up for the
advice (its DeepSpeed config, cores and ranks, the pre-launch estimate, ZeRO-3's trace-cache invalidations in its
log, an FSDP model its ranks' hooks saw) and why a phase may be missing (what the ranks' hooks could not attach to, or timing turned off)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from traindeck.backend.core import read_json_file
from traindeck.backend.logparse import read_ds_memory
from traindeck.backend.monitor import health_during, read_gpu_health
from traindeck.backend.nodes.node_plan import read_nodes
from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.steps import (
    MemorySample,
    RunFacts,
    StepAnatomy,
    StepFiles,
    StepRecord,
    analyse,
    by_rank,
    fsdp_of,
    samples_from_deepspeed,
    with_log_memory,
)

STEP_TIMING_ENV = "TRAINDECK_STEP_TIMING"
_TIMING_EVENT = "step_timing"
_TRACE_CACHE = b"Invalidate trace cache"
_LOG_TAIL = 64 << 20  # the part of output.log searched for trace-cache invalidations




def _command(run_dir: RunDir) -> dict[str, Any]:
    data = read_json_file(run_dir.command)
    return data if isinstance(data, dict) else {}


def deepspeed_config(run_dir: RunDir, command: dict[str, Any]) -> dict[str, Any] | None:
    """The run's DeepSpeed JSON: the one traindeck wrote into the run directory, else the file the script was given
    (--deepspeed_config / --deepspeed / --deepspeed-config FILE.json)."""
    config = read_json_file(run_dir.path / "ds_config.json")
    if isinstance(config, dict):
        return config
    argv: list[Any] = command["argv"] if isinstance(command.get("argv"), list) else []
    for i, arg in enumerate(argv):
        value = None
        for flag in ("--deepspeed_config", "--deepspeed", "--deepspeed-config"):
            if arg == flag and i + 1 < len(argv):
                value = argv[i + 1]
            elif isinstance(arg, str) and arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
        if isinstance(value, str) and value.endswith(".json"):
            path = Path(value) if os.path.isabs(value) else Path(str(command.get("cwd") or run_dir.path)) / value
            config = read_json_file(path)
            if isinstance(config, dict):
                return config
    return None


# A growing log is read once: per log, how far it was read and what was counted in it.
_TRACE_READ: dict[str, tuple[int, int]] = {}


def trace_cache_invalidations(log: Path) -> int | None:
    """How many "Invalidate trace cache" lines ZeRO-3 printed (in the last 64 MiB of the log when first read; only
    what the log gained since is read on later calls, so a live view polling it costs little)."""
    key = str(log)
    try:
        with open(log, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset, count = _TRACE_READ.get(key, (0, 0))
            if size < offset:  # rewritten: count again
                offset, count = 0, 0
            start = max(offset, size - _LOG_TAIL)
            if start > offset:  # the part skipped is not counted
                count = 0
            # Back by the pattern's length: an occurrence cut by the last read's end is found whole now.
            overlap = min(start, len(_TRACE_CACHE) - 1) if offset else 0
            f.seek(start - overlap)
            tail = b""
            while chunk := f.read(8 << 20):
                data = tail + chunk
                count += data.count(_TRACE_CACHE)
                tail = data[-(len(_TRACE_CACHE) - 1):]  # shorter than the pattern: nothing in it is counted twice
            _TRACE_READ[key] = (size, count)
            return count
    except OSError:
        return None


def _cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def run_facts(record: RunRecord, records: list[StepRecord], store_path: Path | None = None) -> RunFacts:
    run_dir = RunDir(Path(record.run_dir))
    command = _command(run_dir)
    estimate = read_json_file(run_dir.path / "estimate.json")
    estimate_gpu = estimate.get("gpu_total_bytes_per_device") if isinstance(estimate, dict) else None
    params = estimate.get("params") if isinstance(estimate, dict) else None
    local_ranks = [p for p in record.processes if isinstance(p, dict) and p.get("role") == "rank"]
    ranks = len(local_ranks) or len({r.rank for r in records}) or None
    nodes = read_nodes(run_dir.path)
    rank_hosts = {int(rank): str(h.get("host")) for h in nodes["hosts"] if isinstance(h, dict)
                  for rank in h.get("ranks") or [] if isinstance(rank, int)} if nodes else None
    if rank_hosts:  # the ranks sharing one machine's cores are one node's (the nodes alike, as clusters are)
        ranks = max(Counter(rank_hosts.values()).values())
    invalidations = trace_cache_invalidations(run_dir.output)
    return RunFacts(ds_config=deepspeed_config(run_dir, command), cpu_cores=_cores(), ranks_on_host=ranks,
                    trace_cache_invalidations=invalidations or None,
                    estimate_gpu_bytes=int(estimate_gpu) if isinstance(estimate_gpu, (int, float)) else None,
                    model_params=int(params) if isinstance(params, (int, float)) and not isinstance(params, bool)
                    and params > 0 else None,
                    gpu_health=tuple(gpu_health_during_steps(store_path, record.id, records))
                    if store_path is not None else (), rank_hosts=rank_hosts or None)


def gpu_health_during_steps(store_path: Path, run_id: str, records: list[StepRecord]) -> list[str]:
    """What slowed the run's GPUs while its steps ran (throttling, a slow PCIe link, replays, XIDs), from the
    health changes its resource recorder kept."""
    changes = read_gpu_health(store_path, run_id)
    if not changes:
        return []
    windows = [(r.t - r.step_ms / 1000, r.t) for r in records]
    return health_during(changes, windows)


def timing_notes(record: RunRecord, store: RunStore, have_steps: bool) -> list[str]:
    """Why the anatomy may be empty or partial, in the user's words."""
    notes = []
    for event in store.events(record.id):
        if event.kind == _TIMING_EVENT and "could not attach" in event.text:
            notes.append(event.text)
    if not have_steps:
        env = _command(RunDir(Path(record.run_dir))).get("env")
        if isinstance(env, dict) and str(env.get(STEP_TIMING_ENV, "")).strip() == "0":
            notes.append("step timing was off for this run (--no-step-timing)")
        elif record.state == "running":
            notes.append("waiting for the first optimizer step to end")
        else:
            notes.append("no optimizer step was seen: the script never called optimizer.step() or a DeepSpeed "
                         "engine's step() in a process traindeck started")
    return notes


def _files_of(record: RunRecord) -> list[StepRecord]:
    files = StepFiles(record.run_dir)
    out: list[StepRecord] = []
    for _ in range(64):
        steps, reports = files.read_new()
        if not steps and not reports:
            break
        out.extend(steps)
    return out


def _records(record: RunRecord, store: RunStore, rank: int | None = None) -> list[StepRecord]:
    records = store.steps(record.id, rank=rank)
    if not records and record.run_dir:  # the supervisor could not store them (it died, the disk was full)
        records = [r for r in _files_of(record) if rank is None or r.rank == rank]
    return records


def _anatomy(record: RunRecord, store: RunStore, records: list[StepRecord], rank: int | None) -> StepAnatomy:
    facts = run_facts(record, records, store.path)
    fsdp = fsdp_of(e.text for e in store.events(record.id) if e.kind == _TIMING_EVENT)
    if fsdp:  # the ranks' hooks saw an FSDP-sharded model
        facts = replace(facts, fsdp=fsdp)
    anatomy = analyse(records, notes=timing_notes(record, store, bool(records)), facts=facts)
    if record.run_dir and not any(r.gpu_allocated is not None or r.gpu_peak_allocated is not None
                                  for r in records):  # no CUDA figures recorded: DeepSpeed's MA/CA lines
        logged = log_memory_samples(RunDir(Path(record.run_dir)).output)
        anatomy = with_log_memory(anatomy, {r: s for r, s in logged.items() if rank in (None, r)}, facts)
    return anatomy


def run_step_anatomy(record: RunRecord, store: RunStore | None = None, rank: int | None = None) -> StepAnatomy:
    """The anatomy of the run's recorded steps (all ranks, or one)."""
    own = store is None
    store = store or RunStore()
    try:
        return _anatomy(record, store, _records(record, store, rank), rank)
    finally:
        if own:
            store.close()


def log_memory_samples(log: Path) -> dict[int, list[MemorySample]]:
    """Per rank, DeepSpeed's MA/CA reports in the last 64 MiB of the run's log (its `see_memory_usage` lines, which
    `"memory_breakdown": true` prints around every forward, backward and step). Only the 8 MiB chunks that hold an
    MA line are decoded; a line longer than 1 MiB is dropped."""

    def lines() -> Iterator[str]:
        with open(log, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - _LOG_TAIL))
            partial = size > _LOG_TAIL  # the first line read is the end of one cut by the seek
            tail = b""
            while chunk := f.read(8 << 20):
                data = tail + chunk
                cut = data.rfind(b"\n") + 1
                data, tail = data[:cut], data[cut:] if len(data) - cut < 1 << 20 else b""
                if partial and data:
                    data, partial = data[data.find(b"\n") + 1:], False
                if b"Max_MA" in data:
                    yield from data.decode("utf-8", "replace").splitlines()
            if b"Max_MA" in tail and not partial:
                yield tail.decode("utf-8", "replace")

    try:
        return samples_from_deepspeed(read_ds_memory(lines()))
    except OSError:
        return {}


RECENT_STEPS = 60  # the steps of one rank the dashboard draws as bars


@dataclass(frozen=True)
class StepView:
    """What the dashboard's Step tab shows of a run: the anatomy of all its ranks and each rank's latest steps (at
    most `RECENT_STEPS`, in step order)."""

    anatomy: StepAnatomy
    recent: dict[int, tuple[StepRecord, ...]]


def read_step_view(store: RunStore, record: RunRecord, recent: int = RECENT_STEPS) -> StepView:
    """The run's anatomy and latest steps per rank, from one read of its step rows (the ranks' files when the store
    has none)."""
    records = _records(record, store)
    anatomy = _anatomy(record, store, records, None)
    return StepView(anatomy=anatomy, recent={rank: tuple(steps[-recent:]) for rank, steps in by_rank(records).items()})

"""DeepSpeed's own periodic lines (formats read from deepspeed 0.19 source; stable since 0.10).

Emitted through DeepSpeed's logger (`[<asctime>] [INFO] [<file>:<line>:<func>] <message>`, stdout), and only at
level INFO, which DeepSpeed does not show by default: the rank processes log at WARNING unless the config sets
`"log_level": "info"`. Without it, only the wall-clock breakdown (printed, not logged) appears.

  engine._report_progress (every steps_per_print steps, rank 0; log_dist adds "[Rank N] "):
      [Rank 0] step=10, skipped=0, lr=[0.001], mom=[(0.9, 0.999)]
  ThroughputTimer.stop (every steps_per_print steps from the 2nd on, rank 0, no rank tag):
      epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=565.37, CurrSamplesPerSec=565.33, MemAllocated=0.37GB, MaxMemAllocated=0.37GB
      epoch=0/micro_step=10/global_step=10, vm %: 45.2, swap %: 0.0          (monitor_memory only)
  SynchronizedWallClockTimer.log (wall_clock_breakdown: true; print_dist, so no logger prefix):
      [Rank 0] time (ms) | fwd_microstep: 5.68 | bwd_microstep: 25.23 | ...
  PipelineEngine.train_batch (pipeline parallelism, rank 0, print):
      steps: 10 loss: 0.6931 iter time (s): 0.123 samples/sec: 52.000
DeepSpeed prints no loss of its own outside pipeline parallelism; scripts print it (see generic.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ENGINE = re.compile(r"\[Rank (-?\d+)\] step=(\d+), skipped=(\d+), lr=\[([^\]]*)\]")
_TIMER = re.compile(r"epoch=(\d+)/micro_step=(\d+)/global_step=(\d+), (.*)")
_TIMER_PAIR = re.compile(r"(\w+)=(-?inf|nan|[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)(?:GB)?(?:,|$)")
_VM = re.compile(r"vm %: ([\d.]+), swap %: ([\d.]+)")
_WALL = re.compile(r"(?:\[Rank (-?\d+)\] )?time \(ms\)((?: \| [\w.]+: -?[\d.]+)+)")
_WALL_PAIR = re.compile(r"\| ([\w.]+): (-?[\d.]+)")
_PIPE = re.compile(r"steps: (\d+) loss: (\S+) (.*?)iter time \(s\): (\S+) samples/sec: (\S+)")
_PIPE_EXTRA = re.compile(r"(\w+): (\S+) ")
_FLOAT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_RANK_TAG = re.compile(r"\[Rank (-?\d+)\]")

_TIMER_NAMES = {
    "RunningAvgSamplesPerSec": "samples_per_sec",
    "CurrSamplesPerSec": "curr_samples_per_sec",
    "MemAllocated": "mem_allocated_gb",
    "MaxMemAllocated": "max_mem_allocated_gb",
}

_NOTES = {
    "samples_per_sec": "DeepSpeed's RunningAvgSamplesPerSec: the engine's own figure, samples over the time of its "
                       "forward, backward and step only (data loading and the script's own work left out), so it "
                       "reads above the run's throughput (step rate x global batch).",
    "curr_samples_per_sec": "DeepSpeed's CurrSamplesPerSec: the engine's figure for the last step alone, samples over "
                            "its forward, backward and step time only.",
    "mem_allocated_gb": "DeepSpeed's MemAllocated on rank 0 (GB), as its timer line prints it.",
    "max_mem_allocated_gb": "DeepSpeed's MaxMemAllocated on rank 0 (GB), as its timer line prints it.",
}


# DeepSpeed's own throughput figures: samples over the engine's forward, backward and step time only, so they read
# above the run's wall-clock throughput (step rate x global batch). Shown with ENGINE_LABEL wherever they are named.
ENGINE_FIGURES = frozenset({"samples_per_sec", "curr_samples_per_sec"})
ENGINE_LABEL = "DeepSpeed's engine figure"


def metric_note(name: str) -> str:
    """What a metric parsed from DeepSpeed's lines measures, where its name alone could mislead; "" for others."""
    return _NOTES.get(name, "")


def metric_label(name: str) -> str:
    """What to call a metric where it is shown: DeepSpeed's engine figures say so (not wall-clock throughput)."""
    return f"{name} ({ENGINE_LABEL})" if name in ENGINE_FIGURES else name


@dataclass
class DsLine:
    step: int | None = None  # the global step this line reports (progress)
    rank: int | None = None  # from "[Rank N]" (None when DeepSpeed says -1: not distributed)
    metrics: dict[str, float] = field(default_factory=dict)
    progress: bool = False  # the line is a step report (engine, timer, pipeline): progress moves to `step`


def might_be_deepspeed(text: str) -> bool:
    return "step=" in text or "time (ms)" in text or text.startswith("steps: ")


def _rank(s: str | None) -> int | None:
    if s is None:
        return None
    r = int(s)
    return r if r >= 0 else None


def _f(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def parse_deepspeed(text: str) -> DsLine | None:
    if "step=" in text:
        m = _ENGINE.search(text)
        if m:
            out = DsLine(step=int(m.group(2)), rank=_rank(m.group(1)), progress=True)
            lrs = _FLOAT.findall(m.group(4))
            if lrs:
                out.metrics["lr"] = float(lrs[0])
            out.metrics["skipped_steps"] = float(m.group(3))
            return out
        m = _TIMER.search(text)
        if m:
            out = DsLine(step=int(m.group(3)), progress=True)
            t = _RANK_TAG.search(text[: m.start()])
            out.rank = _rank(t.group(1)) if t else None
            rest = m.group(4)
            vm = _VM.match(rest)
            if vm:
                out.metrics["host_vm_percent"] = float(vm.group(1))
                out.metrics["host_swap_percent"] = float(vm.group(2))
                return out
            for key, value in _TIMER_PAIR.findall(rest):
                name = _TIMER_NAMES.get(key)
                v = _f(value)
                # Before timing starts the running average is -inf: not a measurement.
                if name and v is not None and v not in (float("inf"), float("-inf")) and v == v:
                    out.metrics[name] = v
            return out
        return None
    if "time (ms)" in text:
        m = _WALL.search(text)
        if m:
            out = DsLine(rank=_rank(m.group(1)))
            for key, value in _WALL_PAIR.findall(m.group(2)):
                v = _f(value)
                if v is not None:
                    out.metrics[f"time_ms/{key}"] = v
            return out if out.metrics else None
        return None
    if text.startswith("steps: "):
        m = _PIPE.match(text)
        if m:
            out = DsLine(step=int(m.group(1)), progress=True)
            for name, raw in (("loss", m.group(2)), ("iter_time_s", m.group(4)), ("samples_per_sec", m.group(5))):
                v = _f(raw)
                if v is not None:
                    out.metrics[name] = v
            for name, raw in _PIPE_EXTRA.findall(m.group(3)):
                v = _f(raw)
                if v is not None:
                    out.metrics[name] = v
            return out
    return None

"""GPU memory as a training log reports it: DeepSpeed's MA/CA lines, torch's CUDA out-of-memory message, the
`torch.cuda.memory_summary()` table and DeepSpeed's model-states estimate. Formats read from deepspeed 0.19 and
torch 2.13 source and from real runs' logs (tests/fixtures/logs/gpu_memory, with their sources).

  DeepSpeed `see_memory_usage(message, force=True)` (deepspeed/runtime/utils.py; the engine's "Engine before
  forward" ... "Engine after step" each step with `"memory_breakdown": true`; rank 0 only when distributed). It
  prints, or before 0.17 logs through DeepSpeed's logger, three lines:
      Engine before forward
      MA 0.02 GB         Max_MA 0.02 GB         CA 0.08 GB         Max_CA 0 GB
      CPU Virtual Memory:  used = 4.05 GB, percent = 31.9%
  GB there is 2**30 bytes; MA/CA are `memory_allocated()`/`memory_reserved()`, Max_MA/Max_CA the peaks since its
  previous report (it resets them after each), Max_CA rounded to whole GB. The CPU line is the whole host's used
  memory, not the rank's.
  torch's CUDA OOM (c10/cuda/CUDACachingAllocator.cpp), torch >= 2.1 and <= 2.0:
      CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has a total capacity of 6.00 GiB of which 0 bytes is
      free. [...] Of the allocated memory 2.93 GiB is allocated by PyTorch, [with X allocated in private pools
      (e.g., CUDA Graphs),] and 2.30 GiB is reserved by PyTorch but unallocated. If reserved but unallocated [...]
      CUDA out of memory. Tried to allocate 10.84 GiB (GPU 0; 23.65 GiB total capacity; 1.06 GiB already
      allocated; 10.26 GiB free; 12.53 GiB reserved in total by PyTorch)
  `memory_summary()` rows "Allocated memory", "GPU reserved memory", "Non-releasable memory" (current, peak, ...),
  sizes in B/KB/MB/GB (1024-based, torch < 2.0) or B/KiB/MiB/GiB.
  DeepSpeed's `estimate_zero2/3_model_states_mem_needs_*`: rows "  171.13GB |   0.49GB | <options>".

Rank tags at a line's start ("[rank1]: ", the run's own; "[default1]:", torchrun --tee) give the line's rank.
Every reader is bounded (lines longer than MAX_LINE are skipped, counts capped) and returns None or nothing for
text it does not know; none raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from .logprefix import split_message

MAX_LINE = 4096  # characters: a DeepSpeed MA line is ~130, an OOM message ~500
MAX_SAMPLES = 100_000  # MA/CA reports kept from one log (a step with memory_breakdown prints six)
GIB = 1 << 30
_UNITS = {"bytes": 1, "b": 1, "kb": 1 << 10, "kib": 1 << 10, "mb": 1 << 20, "mib": 1 << 20, "gb": 1 << 30,
          "gib": 1 << 30, "tb": 1 << 40, "tib": 1 << 40, "pb": 1 << 50, "pib": 1 << 50}

_TAG = re.compile(r"\[(rank|default)(\d{1,6})\]:\s?")
_NUM = r"(\d+(?:\.\d+)?)"
_DS_MA = re.compile(rf"MA {_NUM} GB\s+Max_MA {_NUM} GB\s+CA {_NUM} GB\s+Max_CA {_NUM} GB")
_DS_CPU = re.compile(rf"CPU Virtual Memory:\s+used = {_NUM} GB, percent = {_NUM}%")
_SIZE = r"(\d+(?:\.\d+)?) (bytes|B|KiB|MiB|GiB|TiB|PiB)"
_OOM = re.compile(
    rf"Tried to allocate {_SIZE}\. GPU (\d+) has a total capac(?:i)?ty of {_SIZE} of which {_SIZE} is free\."
    rf".{{0,300}}?Of the allocated memory {_SIZE} is allocated by PyTorch,"
    rf"(?: with {_SIZE} allocated in private pools \([^)]{{0,80}}\),)? and {_SIZE} is reserved by PyTorch but "
    r"unallocated")
_OOM_OLD = re.compile(
    rf"Tried to allocate {_SIZE} \(GPU (\d+); {_SIZE} total capacity; {_SIZE} already allocated; {_SIZE} free; "
    rf"{_SIZE} reserved in total by PyTorch\)")
_SUMMARY_ROW = re.compile(
    r"\|\s*(Allocated memory|GPU reserved memory|Non-releasable memory)\s*\|\s*(\d+)\s*(B|[KMGTP]i?B)\s*\|"
    r"\s*(\d+)\s*(B|[KMGTP]i?B)\s*\|")
_SUMMARY_HEAD = re.compile(r"PyTorch CUDA memory summary, device ID (\d+)")
_SUMMARY_OOMS = re.compile(r"CUDA OOMs: (\d+)")
_ESTIMATE_ROW = re.compile(rf"^\s*{_NUM}GB \|\s*{_NUM}GB \| (.{{1,300}})$")


def strip_rank_tag(line: str) -> tuple[str, int | None]:
    """(the line without its leading rank tags, the rank): "[rank1]: x" and "[default1]:[rank1]: x" give rank 1.
    "[rankN]" (the global rank) wins over torchrun's "[defaultN]" (the local one)."""
    rank: int | None = None
    from_rank_tag = False
    for _ in range(2):
        m = _TAG.match(line)
        if not m:
            break
        if m.group(1) == "rank" or not from_rank_tag:
            rank = int(m.group(2))
            from_rank_tag = m.group(1) == "rank"
        line = line[m.end():]
    return line, rank


def _size(number: str, unit: str) -> int:
    return int(round(float(number) * _UNITS[unit.lower()]))


def _gib(number: str) -> int:
    return int(round(float(number) * GIB))


@dataclass(frozen=True)
class DsMemoryLine:
    """One DeepSpeed `see_memory_usage` report, in bytes."""

    rank: int | None  # from the line's rank tag; None: untagged
    allocated: int  # MA
    peak_allocated: int  # Max_MA: the peak since DeepSpeed's previous report
    reserved: int  # CA
    peak_reserved: int  # Max_CA, rounded by DeepSpeed to whole GB (so it can read below CA)
    message: str | None = None  # the line printed just before: where in the step ("Engine after forward")
    host_used: int | None = None  # the "CPU Virtual Memory: used" line after it: the whole host's used memory


def parse_ds_memory(line: str) -> DsMemoryLine | None:
    """One MA/Max_MA/CA/Max_CA line (any logging prefix, rank tag), else None."""
    if len(line) > MAX_LINE or "Max_MA" not in line:
        return None
    text, rank = strip_rank_tag(line)
    m = _DS_MA.search(text)
    if not m:
        return None
    return DsMemoryLine(rank=rank, allocated=_gib(m.group(1)), peak_allocated=_gib(m.group(2)),
                        reserved=_gib(m.group(3)), peak_reserved=_gib(m.group(4)))


def read_ds_memory(lines: Iterable[str]) -> list[DsMemoryLine]:
    """Every MA/CA report in `lines` (in order, the last MAX_SAMPLES), each with the message line printed before it
    by the same rank and the host line printed after it."""
    out: list[DsMemoryLine] = []
    previous: dict[int | None, str] = {}  # each rank's last line, for the message
    last: dict[int | None, int] = {}  # each rank's last report (index in out), for the CPU line after it
    for line in lines:
        if len(line) > MAX_LINE:
            continue
        line = line.rstrip("\r\n")
        found = parse_ds_memory(line)
        text, rank = strip_rank_tag(line)
        if found is not None:
            before = previous.get(rank)
            message = split_message(before)[0].strip()[:200] if before else None
            if message and ("Max_MA" in message or "CPU Virtual Memory" in message):
                message = None
            out.append(replace(found, message=message or None))
            last[rank] = len(out) - 1
            if len(out) > 2 * MAX_SAMPLES:
                del out[:MAX_SAMPLES]
                last = {r: i - MAX_SAMPLES for r, i in last.items() if i >= MAX_SAMPLES}
        elif "CPU Virtual Memory" in text and rank in last:
            m = _DS_CPU.search(text)
            index = last.pop(rank)
            if m and out[index].host_used is None:
                out[index] = replace(out[index], host_used=_gib(m.group(1)))
        else:
            last.pop(rank, None)
        previous[rank] = text
    return out[-MAX_SAMPLES:]


@dataclass(frozen=True)
class TorchOom:
    """torch's CUDA out-of-memory message, in bytes."""

    rank: int | None
    device: int
    requested: int  # "Tried to allocate"
    allocated: int  # "is allocated by PyTorch" / "already allocated"
    reserved_unallocated: int  # "is reserved by PyTorch but unallocated" / reserved in total minus allocated
    capacity: int | None = None  # "total capacity"
    free: int | None = None  # free on the device (every process counted)

    @property
    def reserved(self) -> int:
        return self.allocated + self.reserved_unallocated


def parse_torch_oom(line: str) -> TorchOom | None:
    """The figures of a CUDA OOM message (either wording), else None."""
    if len(line) > MAX_LINE or "Tried to allocate" not in line:
        return None
    text, rank = strip_rank_tag(line)
    m = _OOM.search(text)
    if m:
        g = m.groups()
        return TorchOom(rank=rank, device=int(g[2]), requested=_size(g[0], g[1]), capacity=_size(g[3], g[4]),
                        free=_size(g[5], g[6]), allocated=_size(g[7], g[8]), reserved_unallocated=_size(g[11], g[12]))
    m = _OOM_OLD.search(text)
    if m:
        g = m.groups()
        allocated, reserved = _size(g[5], g[6]), _size(g[9], g[10])
        return TorchOom(rank=rank, device=int(g[2]), requested=_size(g[0], g[1]), capacity=_size(g[3], g[4]),
                        free=_size(g[7], g[8]), allocated=allocated,
                        reserved_unallocated=max(0, reserved - allocated))
    return None


@dataclass(frozen=True)
class MemorySummary:
    """The rows of one `torch.cuda.memory_summary()` table that say how much the allocator holds, in bytes."""

    allocated: int
    peak_allocated: int
    reserved: int
    peak_reserved: int
    non_releasable: int | None = None  # memory in blocks split for a tensor and not releasable: fragmentation
    peak_non_releasable: int | None = None
    device: int | None = None
    ooms: int | None = None
    rank: int | None = None


def read_memory_summaries(lines: Iterable[str], limit: int = 1000) -> list[MemorySummary]:
    """Every memory_summary table in `lines` that has its Allocated and GPU reserved rows (the first `limit`)."""
    out: list[MemorySummary] = []
    rows: dict[str, tuple[int, int]] = {}
    head: dict[str, int | None] = {"device": None, "ooms": None, "rank": None}

    def flush() -> None:
        if "Allocated memory" in rows and "GPU reserved memory" in rows and len(out) < limit:
            nr = rows.get("Non-releasable memory")
            out.append(MemorySummary(
                allocated=rows["Allocated memory"][0], peak_allocated=rows["Allocated memory"][1],
                reserved=rows["GPU reserved memory"][0], peak_reserved=rows["GPU reserved memory"][1],
                non_releasable=nr[0] if nr else None, peak_non_releasable=nr[1] if nr else None, **head))
        rows.clear()
        head.update(device=None, ooms=None, rank=None)

    for line in lines:
        if len(line) > MAX_LINE or "|" not in line:
            continue
        text, rank = strip_rank_tag(line)
        if m := _SUMMARY_HEAD.search(text):
            flush()
            head["device"], head["rank"] = int(m.group(1)), rank
        elif m := _SUMMARY_OOMS.search(text):
            head["ooms"] = int(m.group(1))
        elif m := _SUMMARY_ROW.search(text):
            if m.group(1) in rows:
                flush()
            rows[m.group(1)] = (_size(m.group(2), m.group(3)), _size(m.group(4), m.group(5)))
            head["rank"] = head["rank"] if head["rank"] is not None else rank
    flush()
    return out


@dataclass(frozen=True)
class EstimateRow:
    """One row of DeepSpeed's model-states estimate: bytes per CPU (node) and per GPU for one set of options."""

    cpu_bytes: int
    gpu_bytes: int
    options: str


def read_estimate_rows(lines: Iterable[str], limit: int = 64) -> list[EstimateRow]:
    """The rows under DeepSpeed's "  per CPU  |  per GPU |   Options" header (GB there is 2**30 bytes)."""
    out: list[EstimateRow] = []
    inside = False
    for line in lines:
        if len(line) > MAX_LINE:
            continue
        text = strip_rank_tag(line.rstrip("\r\n"))[0]
        if "per CPU" in text and "per GPU" in text:
            inside = True
            continue
        m = _ESTIMATE_ROW.match(text) if inside else None
        if m and len(out) < limit:
            out.append(EstimateRow(cpu_bytes=_gib(m.group(1)), gpu_bytes=_gib(m.group(2)),
                                   options=m.group(3).strip()))
        else:
            inside = False
    return out

"""Each rank's GPU memory and what it says: the allocator's reserved-minus-allocated gap (cache or fragmentation),
the pre-launch estimate against the measured peak, and the per-rank line of `traindeck steps`.

Samples come from the ranks' step records (torch's counters, read by the run's site hook after every optimizer
step) or, for a run whose records carry none (a CPU run, an older run), from DeepSpeed's MA/CA lines in its log.

Two gaps, from PyTorch's CUDA memory-management notes (docs.pytorch.org/docs/stable/notes/cuda.html):
- reserved minus allocated *now* is mostly the caching allocator's cache: blocks freed by tensors that it keeps
  for reuse instead of returning them to the driver ("unused memory managed by the allocator will still show as
  if used in nvidia-smi"). At a step's end it holds the step's activations, about to be reused; after ZeRO-Offload
  moved parameters away it holds their old place. Other processes cannot use it; this process can.
- peak reserved minus peak allocated is what the allocator had to hold beyond the most the tensors ever needed at
  once: slivers left at the ends of segments that no later request fits ("unusable free slices of memory at the
  end of these segments", the notes' explanation of `expandable_segments`). That is fragmentation, and
  `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` is the allocator's answer: segments grow instead of new ones
  being cut. Only this gap is called fragmentation here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traindeck.backend.core import format_size

if TYPE_CHECKING:
    from traindeck.backend.logparse import DsMemoryLine, TorchOom
    from traindeck.backend.steps.anatomy import RankAnatomy, StepAnatomy
    from traindeck.backend.steps.facts import RunFacts
    from traindeck.backend.steps.records import StepRecord

GiB = 1 << 30
# When the gap is fragmentation worth acting on: at least 1 GiB, and at least 20% of the peak reserved. The notes
# describe the allocator rounding every request up (to 512 bytes, large ones to 2 MiB segments or more) and
# leaving slivers per layer ("50+ layers ... this pattern might repeat 50+ times"): a few percent of the reserved
# memory is the normal price of the cache, not a problem. A fifth of it held unused at the peak is memory a run
# near its GPU's limit loses to fragmentation; under 1 GiB it is not worth restarting a run with other allocator
# settings.
FRAGMENTATION_MIN_BYTES = 1 * GiB
FRAGMENTATION_MIN_SHARE = 0.20
# The measured peak against the pre-launch estimate: outside 0.5x-1.25x the estimate misses something worth saying.
ESTIMATE_HIGH = 1.25
ESTIMATE_LOW = 0.5
# DeepSpeed prints Max_CA rounded to whole GB, so the true peak reserved is at least Max_CA - 0.5 GB.
_MAX_CA_ROUNDING = GiB // 2


def _max(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


@dataclass(frozen=True)
class MemorySample:
    """One rank's memory at one moment (bytes; None where the source does not tell)."""

    rank: int
    allocated: int | None = None
    reserved: int | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    host_rss: int | None = None
    host_pinned: int | None = None
    host_used: int | None = None  # the whole host's used memory (DeepSpeed's "CPU Virtual Memory" line)
    label: str = ""  # where it was taken ("step 12", "Engine after forward")


def samples_from_records(records: Iterable[StepRecord]) -> dict[int, list[MemorySample]]:
    """Per rank, one sample per step record (in the records' order)."""
    out: dict[int, list[MemorySample]] = {}
    for r in records:
        out.setdefault(r.rank, []).append(MemorySample(
            rank=r.rank, allocated=r.gpu_allocated, reserved=r.gpu_reserved, peak_allocated=r.gpu_peak_allocated,
            peak_reserved=r.gpu_peak_reserved, host_rss=r.host_rss, host_pinned=r.host_pinned,
            label=f"step {r.step}"))
    return out


def samples_from_deepspeed(lines: Iterable[DsMemoryLine]) -> dict[int, list[MemorySample]]:
    """Per rank, one sample per MA/CA report. An untagged report is rank 0's: DeepSpeed's `see_memory_usage` prints
    on rank 0 only once torch.distributed is up. Max_CA's rounding is undone as far as it can be: the peak reserved
    is at least the largest of CA and Max_CA - 0.5 GB."""
    out: dict[int, list[MemorySample]] = {}
    for line in lines:
        rank = line.rank if line.rank is not None else 0
        out.setdefault(rank, []).append(MemorySample(
            rank=rank, allocated=line.allocated, reserved=line.reserved, peak_allocated=line.peak_allocated,
            peak_reserved=max(line.reserved, line.peak_reserved - _MAX_CA_ROUNDING), host_used=line.host_used,
            label=line.message or ""))
    return out


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory over the run: its last sample and its peaks."""

    rank: int
    samples: int
    allocated: int | None  # at the last sample
    reserved: int | None
    peak_allocated: int | None
    peak_reserved: int | None
    cached: int | None = None  # reserved minus allocated at the last sample: the allocator's cache (and slivers)
    peak_host_rss: int | None = None
    peak_host_pinned: int | None = None
    host_used: int | None = None  # the largest whole-host figure seen
    source: str = "step records"

    @property
    def fragmentation(self) -> int | None:
        """Peak reserved minus peak allocated: what the allocator held beyond the tensors' largest need."""
        if self.peak_reserved is None or self.peak_allocated is None:
            return None
        return max(0, self.peak_reserved - self.peak_allocated)

    @property
    def has_gpu(self) -> bool:
        return self.peak_allocated is not None or self.allocated is not None


def rank_memory(rank: int, samples: Sequence[MemorySample], source: str = "step records") -> RankMemory:
    """The summary of one rank's samples (in order). Peaks are the largest of the peaks and the current figures,
    so samples whose peak counters were reset between them (DeepSpeed resets them at each report) still add up."""
    last = samples[-1] if samples else MemorySample(rank=rank)
    cached = max(0, last.reserved - last.allocated) if last.reserved is not None and last.allocated is not None \
        else None
    return RankMemory(
        rank=rank, samples=len(samples), allocated=last.allocated, reserved=last.reserved, cached=cached,
        peak_allocated=_max([s.peak_allocated for s in samples] + [s.allocated for s in samples]),
        peak_reserved=_max([s.peak_reserved for s in samples] + [s.reserved for s in samples]),
        peak_host_rss=_max(s.host_rss for s in samples), peak_host_pinned=_max(s.host_pinned for s in samples),
        host_used=_max(s.host_used for s in samples), source=source)


def rank_memory_of(anatomy: RankAnatomy) -> RankMemory:
    """A rank's memory as its anatomy holds it (peaks over the run; the gap at the last step)."""
    return RankMemory(rank=anatomy.rank, samples=anatomy.steps, allocated=None, reserved=None,
                      cached=anatomy.gpu_reserved_minus_allocated,
                      peak_allocated=anatomy.peak_gpu_allocated, peak_reserved=anatomy.peak_gpu_reserved,
                      peak_host_rss=anatomy.peak_host, peak_host_pinned=anatomy.peak_host_pinned)


@dataclass(frozen=True)
class Fragmentation:
    """The verdict on one rank's peak gap: how large, what share of the peak reserved, whether to act on it."""

    rank: int
    gap: int
    reserved: int
    flagged: bool

    @property
    def share(self) -> float:
        return self.gap / self.reserved if self.reserved else 0.0

    def text(self) -> str:
        said = (f"rank {self.rank}: the allocator reserved up to {format_size(self.reserved)} while tensors needed at most "
                f"{format_size(self.reserved - self.gap)} at once: {format_size(self.gap)} ({self.share:.0%}) held unused")
        if self.flagged:
            said += (": fragmentation; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the allocator grow "
                     "its segments instead of cutting new ones around unusable slivers (PyTorch's CUDA memory "
                     "notes)")
        return said


def _flag(gap: int, reserved: int) -> bool:
    return gap >= FRAGMENTATION_MIN_BYTES and reserved > 0 and gap >= FRAGMENTATION_MIN_SHARE * reserved


def fragmentation(memory: RankMemory) -> Fragmentation | None:
    """The peak gap's verdict, or None without both peaks."""
    gap, reserved = memory.fragmentation, memory.peak_reserved
    if gap is None or not reserved:
        return None
    return Fragmentation(rank=memory.rank, gap=gap, reserved=reserved, flagged=_flag(gap, reserved))


def oom_verdict(oom: TorchOom) -> str:
    """What a CUDA out-of-memory message says: fragmentation when the allocator held at least the requested size
    unallocated (enough free memory in total, no block large enough) and that is a large share of what it held;
    otherwise the GPU was full."""
    who = f"rank {oom.rank}" if oom.rank is not None else f"GPU {oom.device}"
    gap, reserved = oom.reserved_unallocated, oom.reserved
    said = (f"{who}: out of memory asking for {format_size(oom.requested)} with {format_size(oom.allocated)} allocated and "
            f"{format_size(gap)} reserved but unallocated")
    if gap >= oom.requested and _flag(gap, reserved):
        return (said + f" ({gap / reserved:.0%} of the {format_size(reserved)} reserved): the free memory was there but "
                f"in pieces, fragmentation; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch's CUDA "
                f"memory notes)")
    return said + ": the GPU was full; a smaller micro-batch, activation checkpointing or offload frees memory"


@dataclass(frozen=True)
class EstimateCheck:
    """A measured peak against the pre-launch estimate of one GPU's peak."""

    measured: int
    estimate: int
    measured_what: str  # "measured peak reserved", "measured peak allocated", ...
    covers: str  # "model states" (DeepSpeed's estimator) or "total" (traindeck's estimate.json)
    rank: int | None = None

    @property
    def ratio(self) -> float:
        return self.measured / self.estimate

    @property
    def direction(self) -> str:
        if self.ratio > ESTIMATE_HIGH:
            return "above"
        if self.ratio < ESTIMATE_LOW:
            return "below"
        return "within"

    def why(self) -> str:
        if self.direction == "above" and self.covers == "model states":
            return ("DeepSpeed's estimate counts parameters, gradients and optimizer states only: activations, "
                    "temporary buffers (ZeRO's reduce and all-gather buckets, prefetched parameters) and what the "
                    "caching allocator keeps reserved are not in it")
        if self.direction == "above":
            return ("more than the estimate's model states, activations and fragmentation allowance: longer "
                    "sequences or larger micro-batches than it assumed, buffers it does not model (ZeRO's buckets "
                    "and prefetch) or more fragmentation than its allowance")
        if self.direction == "below":
            return ("the run keeps less on the GPU than estimated: offload, activation checkpointing or a smaller "
                    "micro-batch or sequence than the estimate assumed")
        return "as estimated"

    def text(self) -> str:
        who = f"rank {self.rank}: " if self.rank is not None else ""
        return (f"{who}the {self.measured_what} ({format_size(self.measured)}) is {self.ratio:.1f}x the "
                f"pre-launch estimate ({format_size(self.estimate)}), {self.direction} it: {self.why()}")


def estimate_check(memory: RankMemory, estimate_bytes: int | None, covers: str = "total") -> EstimateCheck | None:
    """The rank's peak against the estimate: peak reserved (what the GPU must hold, the figure the estimate's
    fragmentation allowance aims at), else peak allocated; None without an estimate or a peak."""
    if not estimate_bytes or estimate_bytes <= 0:
        return None
    if memory.peak_reserved:
        return EstimateCheck(memory.peak_reserved, estimate_bytes, "measured peak reserved", covers, memory.rank)
    if memory.peak_allocated:
        return EstimateCheck(memory.peak_allocated, estimate_bytes, "measured peak allocated", covers, memory.rank)
    return None


def memory_line(memory: RankMemory, estimate_bytes: int | None = None) -> str:
    """`traindeck steps`' line for one rank: 'rank 0: GPU 7.2 GiB allocated, 7.2 GiB reserved (peaks 7.2 GiB /
    7.2 GiB), gap 0.0 GiB; host RSS 3.1 GiB, pinned 1.0 GiB; 0.9x the estimate'."""
    parts = []
    if memory.has_gpu:
        gpu = f"GPU {format_size(memory.allocated or 0)} allocated, {format_size(memory.reserved or 0)} reserved" \
            if memory.allocated is not None and memory.reserved is not None else "GPU"
        gpu += f" (peaks {format_size(memory.peak_allocated or 0)} / {format_size(memory.peak_reserved or 0)})"
        if memory.cached is not None:
            gpu += f", reserved-allocated gap {format_size(memory.cached)}"
        frag = fragmentation(memory)
        if frag is not None and frag.flagged:
            gpu += f", fragmentation {format_size(frag.gap)} ({frag.share:.0%})"
        parts.append(gpu)
    host = []
    if memory.peak_host_rss is not None:
        host.append(f"RSS {format_size(memory.peak_host_rss)}")
    if memory.peak_host_pinned is not None:
        host.append(f"pinned {format_size(memory.peak_host_pinned)}")
    if memory.host_used is not None:
        host.append(f"whole host used {format_size(memory.host_used)}")
    if host:
        parts.append("host " + ", ".join(host))
    check = estimate_check(memory, estimate_bytes)
    if check is not None:
        parts.append(f"{check.ratio:.1f}x the estimate")
    said = "; ".join(parts) or "no memory figures"
    return f"rank {memory.rank}: {said}" + (f" (from {memory.source})" if memory.source != "step records" else "")


def memory_verdicts(ranks: Mapping[int, RankMemory], estimate_bytes: int | None) -> list[str]:
    """The advice lines: the worst flagged fragmentation, and the estimate against the rank furthest from it."""
    out: list[str] = []
    flagged = [f for f in (fragmentation(m) for m in ranks.values()) if f is not None and f.flagged]
    if flagged:
        worst = max(flagged, key=lambda f: f.gap)
        more = len(flagged) - 1
        out.append(worst.text() + (f" (and on {more} other rank{'s' if more > 1 else ''})" if more else ""))
    checks = [c for c in (estimate_check(m, estimate_bytes) for m in ranks.values()) if c is not None]
    off = [c for c in checks if c.direction != "within"]
    if off:
        out.append(max(off, key=lambda c: max(c.ratio, 1 / c.ratio)).text())
    return out


def memory_advice(ranks: Mapping[int, RankAnatomy], facts: RunFacts | None) -> list[str]:
    """Fragmentation and estimate-vs-measured lines from the ranks' recorded CUDA memory."""
    memories = {rank: rank_memory_of(anatomy) for rank, anatomy in ranks.items()}
    return memory_verdicts(memories, facts.estimate_gpu_bytes if facts is not None else None)


def with_log_memory(anatomy: StepAnatomy, samples: Mapping[int, Sequence[MemorySample]],
                    facts: RunFacts | None) -> StepAnatomy:
    """The anatomy with memory read from the log (DeepSpeed's MA/CA lines) where the step records had none: each
    such rank's peaks filled in, and the memory verdicts added to the advice."""
    memories = {rank: rank_memory(rank, list(s), source="DeepSpeed's MA/CA lines")
                for rank, s in samples.items() if s}
    if not memories:
        return anatomy
    ranks = dict(anatomy.ranks)
    for rank, memory in memories.items():
        known = ranks.get(rank)
        if known is not None and known.peak_gpu_allocated is None:
            ranks[rank] = dataclasses.replace(
                known, peak_gpu_allocated=memory.peak_allocated, peak_gpu_reserved=memory.peak_reserved,
                gpu_reserved_minus_allocated=memory.cached)
    advice = list(anatomy.advice)
    advice += [line for line in memory_verdicts(memories, facts.estimate_gpu_bytes if facts else None)
               if line not in advice]
    return dataclasses.replace(anatomy, ranks=ranks, advice=tuple(advice))

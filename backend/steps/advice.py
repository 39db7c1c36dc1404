"""The one-line verdict on what bounds a run, and advice from rules written from DeepSpeed's and PyTorch's own docs.

Each rule names the setting it is about and the document it comes from, so the advice can be checked:
- DeepSpeed's configuration reference (deepspeed.ai/docs/config-json): `offload_optimizer.pin_memory`,
  `overlap_comm`, `stage3_prefetch_bucket_size`, `stage3_max_live_parameters`, `reduce_bucket_size`,
  `allgather_bucket_size`, the aio block for NVMe;
- DeepSpeed's ZeRO-Offload tutorial: CPU Adam's speed scales with the host cores each rank gets;
- DeepSpeed PR #6557: "Invalidate trace cache" means ZeRO-3's prefetch schedule was thrown away that step;
- PyTorch's FSDP docs: fully_shard's `reshard_after_forward`, FSDP1's `SHARD_GRAD_OP`, one all-gather and one
  reduce-scatter per FSDP unit;
- PyTorch's CUDA memory-management notes: a large reserved-but-unallocated gap is fragmentation, and
  `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` is the allocator's answer to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traindeck.backend.steps.anatomy import BOUND_WORDS, SECOND_WORDS, RankAnatomy, lagging
from traindeck.backend.steps.facts import RunFacts
from traindeck.backend.steps.memory import memory_advice


def _zero(facts: RunFacts | None) -> Mapping[str, Any]:
    config = facts.ds_config if facts is not None and isinstance(facts.ds_config, Mapping) else {}
    zero = config.get("zero_optimization")
    return zero if isinstance(zero, Mapping) else {}


def _offload_device(zero: Mapping[str, Any], key: str) -> str | None:
    block = zero.get(key)
    if isinstance(block, Mapping):
        device = block.get("device")
        return str(device) if device not in (None, "none") else None
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def cores_per_rank(facts: RunFacts | None) -> float | None:
    if facts is None or not facts.cpu_cores or not facts.ranks_on_host:
        return None
    return facts.cpu_cores / facts.ranks_on_host


def _rank(rank: int, facts: RunFacts | None) -> str:
    return facts.rank(rank) if facts is not None else f"rank {rank}"


def describe_bound(bound: str, slowest: RankAnatomy, ranks: Mapping[int, RankAnatomy], where: str,
                   facts: RunFacts | None, second: str | None = None) -> str:
    """'optimizer-bound: the optimizer step takes 61% of each step on both ranks (120 ms of 196 ms); ...', with
    '; communication close behind (100 ms, 51%)' where `second` (the slowest rank's) is close to the bound."""
    share = slowest.share(bound)
    said = (f"{bound}-bound: {BOUND_WORDS[bound]} {share:.0%} of each step{where} "
            f"({slowest.bound_ms(bound):.0f} ms of {slowest.step_ms:.0f} ms")
    said += f" on {_rank(slowest.rank, facts)})" if len(ranks) > 1 and f"rank {slowest.rank}" not in where \
        and not where.startswith((" on both", " on all")) else ")"
    if second is not None:
        said += (f"; {SECOND_WORDS[second]} close behind ({slowest.bound_ms(second):.0f} ms, "
                 f"{slowest.share(second):.0%})")
    zero = _zero(facts)
    if bound == "optimizer" and _offload_device(zero, "offload_optimizer") == "cpu":
        said += "; the optimizer runs on the CPU (offload_optimizer: cpu)"
        per = cores_per_rank(facts)
        if per is not None and facts is not None:
            said += f"; {facts.ranks_on_host} rank(s) share {facts.cpu_cores} core(s)"
    if bound == "communication" and facts is not None and facts.fsdp:
        said += f"; {facts.fsdp} gathers each unit's parameters and reduce-scatters its gradients every step"
    if bound == "swap":
        devices = [k for k in ("offload_optimizer", "offload_param") if _offload_device(zero, k) == "nvme"]
        if devices:
            said += f" ({' and '.join(devices)} on NVMe)"
    pair = lagging(ranks, slowest.rank)
    if pair is not None:
        fastest = pair[1]
        said += (f"; {_rank(slowest.rank, facts)} is the slowest: {slowest.own_work_ms:.0f} ms of its own work per "
                 f"step, {slowest.own_work_ms / fastest.own_work_ms:.1f}x {_rank(fastest.rank, facts)}'s "
                 f"{fastest.own_work_ms:.0f} ms, so rank {fastest.rank} waits for it in communication")
    return said


def _fsdp_advice(kind: str) -> list[str]:
    """What shortens an FSDP run's communication, from PyTorch's FSDP documents (fully_shard's
    reshard_after_forward and the FSDP1 sharding strategies) and accelerate's FSDP plugin settings."""
    keep = ("reshard_after_forward=False in fully_shard (accelerate: fsdp_reshard_after_forward: false)"
            if kind.startswith("FSDP2") else
            "sharding_strategy=SHARD_GRAD_OP (accelerate: fsdp_reshard_after_forward: SHARD_GRAD_OP)")
    return [f"{kind} gathers a unit's parameters in forward and again in backward: {keep} keeps them gathered "
            f"from forward to backward, one all-gather a step instead of two, for the memory of the gathered "
            f"parameters (PyTorch's FSDP docs)",
            "each FSDP unit (each fully_shard call, or each module the auto-wrap policy wraps) is its own "
            "all-gather and reduce-scatter with its own latency: fewer, larger units (wrapping whole transformer "
            "blocks, not single layers) issue fewer collectives"]


def advise(bound: str, ranks: Mapping[int, RankAnatomy], slowest: RankAnatomy, facts: RunFacts | None) -> list[str]:
    """Advice lines, most useful first; empty when nothing applies."""
    out: list[str] = []
    zero = _zero(facts)
    stage = _number(zero.get("stage"))
    optimizer_device = _offload_device(zero, "offload_optimizer")
    per = cores_per_rank(facts)
    if bound == "optimizer" and optimizer_device == "cpu":
        if per is not None and per < 4:
            out.append(f"CPU Adam has {per:.1f} core(s) per rank: its speed grows with the host cores each rank "
                       f"gets (DeepSpeed's ZeRO-Offload tutorial); fewer ranks per host or more cores shorten "
                       f"the optimizer step")
        block = zero.get("offload_optimizer")
        if isinstance(block, Mapping) and block.get("pin_memory") is not True:
            out.append("offload_optimizer.pin_memory is off: pinned host buffers make the GPU<->CPU copies of "
                       "the offloaded optimizer faster (DeepSpeed's config reference)")
        out.append("with the optimizer offloaded, a larger batch per step (or gradient accumulation) spreads the "
                   "same CPU Adam time over more samples")
    overlap = zero.get("overlap_comm")
    if overlap is True and (ranks and max(a.share("communication") for a in ranks.values()) >= 0.05):
        out.append("overlap_comm is on: communication overlaps backward, so the communication figure is an upper "
                   "bound of what it costs the step")
    if stage == 3:
        for key, default in (("stage3_prefetch_bucket_size", "5e7"), ("stage3_max_live_parameters", "1e9"),
                             ("stage3_max_reuse_distance", "1e9")):
            if key in zero and _number(zero.get(key)) == 0:
                out.append(f"{key} is 0: ZeRO-3 fetches each parameter only when it is needed, so every "
                           f"all-gather waits in the critical path (DeepSpeed's default is {default})")
    for key in ("reduce_bucket_size", "allgather_bucket_size"):
        value = _number(zero.get(key))
        if value is not None and 0 < value < 1e6 and bound == "communication":
            out.append(f"{key} is {value:.0f} elements: many small collectives, each with its own latency "
                       f"(DeepSpeed's default is 5e8)")
    if bound == "communication" and facts is not None and facts.fsdp:
        out.extend(_fsdp_advice(facts.fsdp))
    steps = max((a.steps for a in ranks.values()), default=0)
    if facts is not None and facts.trace_cache_invalidations and steps:
        per_step = facts.trace_cache_invalidations / steps
        out.append(f"ZeRO-3 invalidated its trace cache {facts.trace_cache_invalidations} time(s) over {steps} "
                   f"steps ({per_step:.1f} a step): each invalidation throws the prefetch schedule away, so that "
                   f"step's parameters are fetched one by one (DeepSpeed PR #6557); a model whose modules run in a "
                   f"different order each step (data-dependent branches) causes it")
    out.extend(memory_advice(ranks, facts))
    if bound == "data":
        # Named where it holds the others up; evenly matched ranks all load slowly.
        who = (f"rank {slowest.rank} spends most of its step" if lagging(ranks, slowest.rank) is not None or
               len(ranks) == 1 else "every rank spends most of its step")
        out.append(f"{who} outside the engine: data loading (more DataLoader workers, pin_memory, prefetch) or the "
                   f"script's own work between steps")
    return out


"""The one-line verdict on what bounds a run, and advice from rules written from DeepSpeed's and PyTorch's own docs.

Each rule names the setting it is about and the document it comes from, so the advice can be checked:
- DeepSpeed's configuration reference (deepspeed.ai/docs/config-json): `offload_optimizer.pin_memory`,
  `overlap_comm`, `stage3_prefetch_bucket_size`, `stage3_max_live_parameters`, `reduce_bucket_size`, the aio block
  for NVMe; DeepSpeed's own code where the reference leaves a default or a cost unsaid (runtime/zero/config.py,
  stage_1_and_2.py, autotuning/constants.py: each rule quotes its place);
- DeepSpeed's ZeRO-Offload tutorial: CPU Adam's speed scales with the host cores each rank gets;
- DeepSpeed PR #6557: "Invalidate trace cache" means ZeRO-3's prefetch schedule was thrown away that step;
- PyTorch's FSDP docs: fully_shard's `reshard_after_forward`, FSDP1's `SHARD_GRAD_OP`, one all-gather and one
  reduce-scatter per FSDP unit;
- PyTorch's CUDA memory-management notes: a large reserved-but-unallocated gap is fragmentation, and
  `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` is the allocator's answer to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from traindeck.backend.core import format_bytes
from traindeck.backend.steps.anatomy import BOUND_WORDS, SECOND_WORDS, RankAnatomy, lagging
from traindeck.backend.steps.facts import RunFacts
from traindeck.backend.steps.memory import memory_advice


def config_of(facts: RunFacts | None) -> Mapping[str, Any]:
    return facts.ds_config if facts is not None and isinstance(facts.ds_config, Mapping) else {}


def _zero(facts: RunFacts | None) -> Mapping[str, Any]:
    zero = config_of(facts).get("zero_optimization")
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


# ---- overlap_comm and the reduction buckets of ZeRO ---------------------------------------------------------------
# Communication is a large share of the step from a fifth of the slowest rank's step (the rank whose step the others
# wait for, so its communication is transfer rather than waiting). Hidden behind backward, a fifth of the step is a
# 1.25x speed-up at most: the least that is worth a restart and the GPU memory overlap_comm's second bucket costs;
# under it the gain is of the size of what the batch size or the bucket sizes move. DeepSpeed gives no threshold of
# its own: its autotuner simply tries overlap_comm both ways for ZeRO-2 (autotuning/constants.py,
# DEFAULT_TUNING_SPACE_ZERO_2 "overlap_comm": [True, False]).
COMMUNICATION_LARGE = 0.2

# The smallest reduce_bucket_size DeepSpeed's autotuner tries for ZeRO stages 1 and 2 (autotuning/constants.py,
# DEFAULT_TUNING_SPACE_ZERO_1/_2: "reduce_bucket_size": [5e7, 5e8, 1e9]); the config reference's default is 5e8. A
# bucket under it splits a step's gradients into more reductions than any setting DeepSpeed itself would choose,
# each a collective with its own launch and latency.
ZERO12_SMALL_BUCKET = 5e7
# ZeRO-3 buckets are small by design: its autotuner sets reduce_bucket_size to hidden_size**2 (autotuner.py's ZeRO-3
# template: 1.7e7 for a 4096-wide model), as the Hugging Face integration fills "auto". Only a bucket under 1e6
# elements (a 1000-wide layer's weight) is called small there.
ZERO3_SMALL_BUCKET = 1e6
# allgather_bucket_size is left out: ZeRO-1/2 gather the updated parameters with one all_gather_into_tensor per
# parameter group wherever torch has it (torch >= 1.13; runtime/utils.py all_gather_dp_groups returns before its
# bucketed loop), and ZeRO-3 never reads it, so its size makes no collective smaller.


def overlap_comm(zero: Mapping[str, Any], stage: float | None) -> bool | None:
    """overlap_comm as DeepSpeed reads it: the config's boolean, else its default, which depends on the stage
    (runtime/zero/config.py: `overlap_comm: Optional[bool] = None`, and the validator `overlap_comm_valid` makes
    None `stage == 3`: on for ZeRO-3, off for stages 0-2); None where the config holds something else ("auto")."""
    value = zero.get("overlap_comm")
    if isinstance(value, bool):
        return value
    return stage == 3 if value is None else None


def _elements(value: float) -> str:
    """5e8 as '5e8', 12845056 as '12,845,056'."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}" if float(f"{mantissa}e{exponent}") == value else f"{value:,.0f}"


def _bucket_bytes(config: Mapping[str, Any], elements: float) -> str:
    """A reduction bucket's bytes where the precision is known (2 bytes an element with fp16 or bf16 on, 4 with
    neither), else its elements alone."""
    enabled = [block.get("enabled") for key in ("fp16", "bf16", "bfloat16")
               if isinstance(block := config.get(key), Mapping)]
    if any(e is True for e in enabled):
        return f"{_elements(elements)} elements: {format_bytes(int(2 * elements), digits=2)} in fp16/bf16"
    if all(e is False for e in enabled):
        return f"{_elements(elements)} elements: {format_bytes(int(4 * elements), digits=2)} in fp32"
    return f"{_elements(elements)} elements"


def _overlap_advice(config: Mapping[str, Any], zero: Mapping[str, Any], stage: float | None,
                    ranks: Mapping[int, RankAnatomy], slowest: RankAnatomy, facts: RunFacts | None) -> list[str]:
    """ZeRO-1/2 with overlap_comm off and communication a large share of the step, on a GPU: "overlap_comm": true.

    The config reference says overlap_comm "attempts to overlap the reduction of the gradients with backward
    computation" (default false, as runtime/zero/config.py makes it for stages 1 and 2). With it, stage_1_and_2.py
    reduces each full gradient bucket on a stream of its own (`reduction_stream`) while backward goes on, and keeps
    a second bucket so that backward fills one while the other is reduced (`setup_buckets`: "Use double buffers to
    avoid data access conflict when overlap_comm is enabled"): the memory the config reference says the bucket size
    limits ("Limits the memory required") is then taken twice. At most backward's length can be hidden. DeepSpeed's
    CPU accelerator has no streams (cpu_accelerator.py: `Stream` and `current_stream` are None), so on the CPU it
    overlaps nothing: the rule needs GPU figures in the ranks' steps."""
    if stage not in (1, 2) or overlap_comm(zero, stage) is not False:
        return []
    if not any(a.peak_gpu_allocated is not None for a in ranks.values()):
        return []
    share, communication = slowest.share("communication"), slowest.phases_ms.get("communication", 0.0)
    hidden = min(communication, slowest.phases_ms.get("backward", 0.0))
    if share < COMMUNICATION_LARGE or hidden <= 0:
        return []
    bucket = _number(zero.get("reduce_bucket_size"))
    size = _bucket_bytes(config, bucket if bucket is not None and bucket > 0 else 5e8) \
        if zero.get("contiguous_gradients", True) is not False else None
    said = ("off (DeepSpeed's default for ZeRO stages 1 and 2)" if "overlap_comm" not in zero
            else "false in zero_optimization")
    return [f"overlap_comm is {said} and communication takes {share:.0%} of each step on "
            f"{_rank(slowest.rank, facts)} ({communication:.0f} ms of {slowest.step_ms:.0f} ms): \"overlap_comm\": true "
            f"reduces the gradient buckets while backward runs, hiding up to {hidden:.0f} ms a step; it costs GPU "
            f"memory" + (f": a second reduction bucket of reduce_bucket_size ({size})" if size else "")
            + " (DeepSpeed's config reference; stage_1_and_2.py double-buffers the bucket)"]


def _bucket_advice(zero: Mapping[str, Any], stage: float | None, slowest: RankAnatomy,
                   facts: RunFacts | None) -> list[str]:
    """A reduce_bucket_size small enough to split the step's gradients into many reductions, where communication
    is a large share of the step."""
    value = _number(zero.get("reduce_bucket_size"))
    if stage not in (1, 2, 3) or value is None or value <= 0 or slowest.share("communication") < COMMUNICATION_LARGE:
        return []
    small = ZERO12_SMALL_BUCKET if stage in (1, 2) else ZERO3_SMALL_BUCKET
    params = facts.model_params if facts is not None else None
    if value >= small or (params is not None and params <= value):  # one bucket holds every gradient
        return []
    count = (f": about {math.ceil(params / value)} reductions a step for the model's {_elements(params)} "
             f"parameters" if params is not None else "")
    why = ("the smallest DeepSpeed's autotuner tries for ZeRO stages 1 and 2 is 5e7" if stage in (1, 2)
           else "ZeRO-3's own autotuner sets hidden_size squared")
    return [f"reduce_bucket_size is {_elements(value)} elements{count}, each a collective with its own latency "
            f"({why}; the default is 5e8): larger buckets issue fewer, for the memory of the bucket"]


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
        # Only where the config turns it off: an absent key's default changed between DeepSpeed versions (0.19's
        # DeepSpeedZeroOffloadOptimizerConfig.pin_memory defaults to True, earlier ones to False), and the run's
        # version is not known here.
        if isinstance(block, Mapping) and block.get("pin_memory") is False:
            out.append("offload_optimizer.pin_memory is off: pinned host buffers make the GPU<->CPU copies of "
                       "the offloaded optimizer faster (DeepSpeed's config reference)")
        out.append("with the optimizer offloaded, a larger batch per step (or gradient accumulation) spreads the "
                   "same CPU Adam time over more samples")
    if overlap_comm(zero, stage) is True and stage in (1, 2, 3) and \
            (ranks and max(a.share("communication") for a in ranks.values()) >= 0.05):
        out.append("overlap_comm is on: communication overlaps backward, so the communication figure is an upper "
                   "bound of what it costs the step")
    if stage == 3:
        for key, default in (("stage3_prefetch_bucket_size", "5e7"), ("stage3_max_live_parameters", "1e9"),
                             ("stage3_max_reuse_distance", "1e9")):
            if key in zero and _number(zero.get(key)) == 0:
                out.append(f"{key} is 0: ZeRO-3 fetches each parameter only when it is needed, so every "
                           f"all-gather waits in the critical path (DeepSpeed's default is {default})")
    out.extend(_overlap_advice(config_of(facts), zero, stage, ranks, slowest, facts))
    out.extend(_bucket_advice(zero, stage, slowest, facts))
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


"""The advisor: the fastest strategy that fits, by the rule people follow; checks before launch and after a run.

The rule, fastest first: plain data parallel if it fits; then ZeRO-1, ZeRO-2; then ZeRO-2 with the optimizer
offloaded to CPU; then ZeRO-3; ZeRO-3 with optimizer offload; with parameter offload too; and NVMe (ZeRO-Infinity)
only when host RAM cannot hold the offloaded states. A "tight" option (over 85% of GPU memory or host RAM) is passed
over for a later one that fits comfortably, and chosen only when none does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from traindeck.backend.estimate.estimator import TIGHT_FRACTION, EstimateRow, Workload
from traindeck.backend.estimate.quantity import GIB

# The advisor's order; FSDP rows are shown by `estimate` but not chosen here (their DeepSpeed twin is).
ADVICE_ORDER: tuple[str, ...] = (
    "dp",
    "zero1",
    "zero2",
    "zero2+opt-cpu",
    "zero3",
    "zero3+opt-cpu",
    "zero3+opt-cpu+param-cpu",
    "zero3+opt-nvme",
    "zero3+opt-nvme+param-cpu",
    "zero3+opt-nvme+param-nvme",
)

# strategy -> (built-in preset, settings that differ from that preset). Preset names are from
# traindeck.backend.presets.BUILTIN_NAMES; "dp" picks single-process or ddp by the GPU count.
PRESET_FOR: dict[str, tuple[str, dict[str, Any]]] = {
    "zero1": ("zero1", {}),
    "zero2": ("zero2", {}),
    "zero2+opt-cpu": ("zero2-offload", {}),
    "zero3": ("zero3", {}),
    "zero3+opt-cpu": ("zero3-offload", {"zero_optimization.offload_param.device": "none"}),
    "zero3+opt-cpu+param-cpu": ("zero3-offload", {}),
    "zero3+opt-nvme": ("zero-infinity-nvme", {"zero_optimization.offload_param.device": "none"}),
    "zero3+opt-nvme+param-cpu": ("zero-infinity-nvme", {"zero_optimization.offload_param.device": "cpu"}),
    "zero3+opt-nvme+param-nvme": ("zero-infinity-nvme", {}),
}
# The FSDP preset with the same sharding, for people who prefer FSDP.
FSDP_ALTERNATIVE: dict[str, str] = {
    "zero2": "fsdp-shard-grad-op",
    "zero3": "fsdp-full-shard",
    "zero3+opt-cpu+param-cpu": "fsdp-offload",
}


def preset_for(row: EstimateRow) -> tuple[str, dict[str, Any]]:
    """The built-in preset that runs this row's strategy, and the settings to change in it (dotted DeepSpeed keys)."""
    if row.strategy == "dp":
        return ("single-process" if row.gpus_per_node * row.num_nodes == 1 else "ddp"), {}
    if row.strategy in PRESET_FOR:
        name, changes = PRESET_FOR[row.strategy]
        return name, dict(changes)
    if row.strategy == "fsdp-no-shard":
        return ("single-process" if row.gpus_per_node * row.num_nodes == 1 else "ddp"), {}
    fsdp = {"fsdp-shard-grad-op": "fsdp-shard-grad-op", "fsdp-full-shard": "fsdp-full-shard"}
    return fsdp.get(row.strategy, "fsdp-offload"), {}


def _get(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return None
        data = data[part]
    return data


def preset_settings(
    preset: str,
    row: EstimateRow,
    workload: Workload,
    nvme_path: str | None = None,
    fallback: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The preset's values that differ from what this estimate assumed, as {dotted key: value to set}.

    Keys start with "accelerate." or "deepspeed." (the preset's sections); a last key "training script" names
    what only the script can do (activation checkpointing). When the built-in preset cannot be read, the fallback
    (the offload changes from PRESET_FOR) is returned with the micro batch.
    """
    wanted: dict[str, Any] = {
        "accelerate.num_machines": row.num_nodes,
        "accelerate.num_processes": row.gpus_per_node * row.num_nodes,
    }
    if row.framework == "deepspeed":
        wanted["deepspeed.train_micro_batch_size_per_gpu"] = workload.micro_batch
        wanted["deepspeed.zero_optimization.stage"] = row.zero_stage
        wanted["deepspeed.bf16.enabled"] = workload.precision == "bf16"
        wanted["deepspeed.fp16.enabled"] = workload.precision == "fp16"
        if row.zero_stage >= 2:
            wanted["deepspeed.zero_optimization.offload_optimizer.device"] = row.offload_optimizer
        if row.zero_stage == 3:
            wanted["deepspeed.zero_optimization.offload_param.device"] = row.offload_param
            wanted["accelerate.deepspeed_config.zero3_init_flag"] = workload.zero_init
        if nvme_path:
            if row.offload_optimizer == "nvme":
                wanted["deepspeed.zero_optimization.offload_optimizer.nvme_path"] = nvme_path
            if row.offload_param == "nvme":
                wanted["deepspeed.zero_optimization.offload_param.nvme_path"] = nvme_path
    else:
        wanted["accelerate.mixed_precision"] = {"bf16": "bf16", "fp16": "fp16"}.get(workload.precision, "no")
    changes: dict[str, Any] = {}
    try:
        from traindeck.backend.presets import load_builtin

        loaded = load_builtin(preset)
        sections = {"accelerate": loaded.accelerate or {}, "deepspeed": loaded.deepspeed or {}}
    except Exception:  # noqa: BLE001 - a missing or unreadable built-in: say what the estimate assumed instead
        changes.update(fallback or {})
        changes["deepspeed.train_micro_batch_size_per_gpu"] = workload.micro_batch
    else:
        missing_means = {"device": "none", "enabled": False, "mixed_precision": "no", "num_machines": 1}
        for key, value in wanted.items():
            current = _get(sections, key)
            if current is None:
                current = missing_means.get(key.rsplit(".", 1)[-1])
            if current != value:
                changes[key] = value
    if workload.activation_checkpointing:
        changes["training script"] = "enable activation checkpointing (model.gradient_checkpointing_enable())"
    return changes


@dataclass(frozen=True)
class Rejection:
    strategy: str
    label: str
    verdict: str
    why: str  # one sentence

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "label": self.label, "verdict": self.verdict, "why": self.why}


@dataclass(frozen=True)
class Advice:
    row: EstimateRow | None  # None when nothing fits
    reason: str
    preset: str | None
    settings: dict[str, Any]  # preset settings to change, plus the script-side assumptions the estimate made
    rejected: tuple[Rejection, ...] = field(default=())
    alternative_preset: str | None = None

    def to_dict(self) -> dict[str, Any]:
        base: dict[str, Any]
        if self.row is not None:
            base = self.row.to_dict()
        else:
            base = {k: None for k in EstimateRow.__dataclass_fields__}
            base["fits"] = False
            base["verdict"] = "does not fit"
        base.update(
            reason=self.reason,
            preset=self.preset,
            settings=self.settings,
            alternative_preset=self.alternative_preset,
            rejected=[r.to_dict() for r in self.rejected],
        )
        return base


def _rejection_sentence(row: EstimateRow, total_gpus: int) -> str:
    if row.verdict == "tight":
        return f"tight: {row.why}; a longer sequence or a fragmentation spike would run out of memory."
    sentence = f"does not fit: {row.why}."
    if total_gpus == 1 and row.zero_stage in (1, 2, 3) and row.offload_optimizer == "none":
        sentence += " On one GPU ZeRO has nothing to partition across."
    return sentence


def advise(rows: Sequence[EstimateRow], workload: Workload | None = None, nvme_path: str | None = None) -> Advice:
    """The first row in ADVICE_ORDER whose verdict is "fits" (else the first "tight" one), with reasons.

    With the workload, `settings` lists what to change in the chosen built-in preset for this estimate to hold
    (dotted keys into the preset: "accelerate.num_processes", "deepspeed.train_micro_batch_size_per_gpu", ...).

    Raises ValueError when the rows' GPU memory is unknown: an advice without it would be a guess.
    """
    by_name = {r.strategy: r for r in rows}
    ordered = [by_name[name] for name in ADVICE_ORDER if name in by_name]
    if not ordered:
        raise ValueError("no DeepSpeed strategies among the rows to advise on")
    if any(r.verdict == "unknown" for r in ordered):
        raise ValueError("GPU memory unknown (no NVIDIA driver found): give the GPU memory, e.g. --gpu-mem 80")
    total_gpus = ordered[0].gpus_per_node * ordered[0].num_nodes
    chosen = next((r for r in ordered if r.verdict == "fits"), None)
    if chosen is None:
        chosen = next((r for r in ordered if r.verdict == "tight"), None)
    rejected = []
    for r in ordered:
        if r is chosen:
            break
        rejected.append(Rejection(r.strategy, r.label, r.verdict, _rejection_sentence(r, total_gpus)))
    if chosen is None:
        return Advice(
            row=None,
            reason="nothing fits: even with ZeRO-Infinity the GPU cannot hold the largest layer and activations, or "
            "host RAM / NVMe is too small; use more GPUs, a smaller micro batch or sequence, or activation checkpointing",
            preset=None,
            settings={},
            rejected=tuple(rejected),
        )
    preset, settings = preset_for(chosen)
    if workload is not None:
        settings = preset_settings(preset, chosen, workload, nvme_path, fallback=settings)
    # How many, not which: "Passed over" lists each with its reason right after (CLI and page alike), so naming
    # their keys here (zero2+opt-cpu, ...) would only say it twice.
    n = len(rejected)
    faster = f"; {n} faster option{'s were' if n != 1 else ' was'} passed over" if rejected else ""
    tight = " It is tight: watch memory on the first steps." if chosen.verdict == "tight" else ""
    reason = f"{chosen.label} is the fastest option that fits: {chosen.why}{faster}.{tight}"
    return Advice(
        row=chosen,
        reason=reason,
        preset=preset,
        settings=settings,
        rejected=tuple(rejected),
        alternative_preset=FSDP_ALTERNATIVE.get(chosen.strategy),
    )


def _first_known(values: int | Sequence[int | None] | None) -> int | None:
    if values is None or isinstance(values, int):
        return values
    known = [v for v in values if v is not None]
    return min(known) if known else None


def check_against_machine(
    estimate_row: EstimateRow,
    free_gpu_bytes: int | Sequence[int | None] | None,
    available_host_bytes: int | None,
    free_disk_bytes: int | None = None,
) -> list[str]:
    """Warnings (empty when all is well) from comparing an estimate with what is free right now.

    free_gpu_bytes: free memory of the GPU(s) the run will use (the smallest counts), or None when unknown.
    available_host_bytes: psutil's `available` host RAM. Offload runs that exceed it are the ones the kernel's OOM
    killer ends with nothing but "exit code -9", so that warning names the cause.
    """
    row = estimate_row
    warnings: list[str] = []
    free_gpu = _first_known(free_gpu_bytes)
    need_gpu = row.gpu_total_bytes_per_device
    if free_gpu is None:
        warnings.append("GPU: free memory unknown, so the estimate could not be checked against it")
    elif need_gpu > free_gpu:
        warnings.append(
            f"GPU: {row.label} needs about {need_gpu / GIB:.1f} GiB per GPU but only {free_gpu / GIB:.1f} GiB is free; "
            "the run would stop with CUDA out of memory (free the GPU, or choose a strategy that shards or offloads more)"
        )
    elif need_gpu > TIGHT_FRACTION * free_gpu:
        warnings.append(
            f"GPU: {row.label} needs about {need_gpu / GIB:.1f} GiB per GPU, {need_gpu / free_gpu:.0%} of the "
            f"{free_gpu / GIB:.1f} GiB free; tight, a spike could run out of memory"
        )
    need_host = row.cpu_bytes_per_node
    offload = row.offload_optimizer == "cpu" or row.offload_param == "cpu"
    purpose = "offloaded optimizer/parameter states" if offload else "loading the model in every rank"
    if available_host_bytes is None:
        warnings.append("host RAM: available memory unknown, so the estimate could not be checked against it")
    elif need_host > available_host_bytes:
        warnings.append(
            f"host RAM: {row.label} needs about {need_host / GIB:.1f} GiB per node for {purpose} but only "
            f"{available_host_bytes / GIB:.1f} GiB is available; the kernel's OOM killer would end a rank and the "
            "run would die with 'exit code -9' (close other programs, use zero_init, or offload to NVMe)"
        )
    elif need_host > TIGHT_FRACTION * available_host_bytes:
        warnings.append(
            f"host RAM: {row.label} needs about {need_host / GIB:.1f} GiB per node, {need_host / available_host_bytes:.0%} "
            f"of the {available_host_bytes / GIB:.1f} GiB available; tight, other programs could tip it into the OOM killer"
        )
    if row.disk_bytes_per_node and free_disk_bytes is not None and row.disk_bytes_per_node > free_disk_bytes:
        warnings.append(
            f"NVMe: {row.label} writes about {row.disk_bytes_per_node / GIB:.1f} GiB per node but only "
            f"{free_disk_bytes / GIB:.1f} GiB is free at the NVMe path"
        )
    return warnings


class Comparison(NamedTuple):
    """One row of (what, estimated, measured, ratio); ratio = measured / estimated, None when not measured."""

    what: str
    estimated: int
    measured: int | None
    ratio: float | None

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


def compare_with_measured(row: EstimateRow, measured: Mapping[str, Any]) -> list[Comparison]:
    """The estimate beside a finished run's peaks (the monitor's summary keys); ratio = measured / estimated.

    peak_gpu_mem_bytes: the largest GPU memory used by one device (NVML, so CUDA context included);
    peak_rank_rss_bytes: the largest resident set of one rank; peak_host_used_bytes: host RAM used on the node
    (other programs included, so its ratio is an upper bound on the run's own use).
    """
    ranks = max(1, row.gpus_per_node)
    pairs = (
        ("GPU memory per device (peak)", row.gpu_total_bytes_per_device, "peak_gpu_mem_bytes"),
        ("host RAM per rank (peak RSS)", row.cpu_bytes_per_node // ranks, "peak_rank_rss_bytes"),
        ("host RAM per node (peak used)", row.cpu_bytes_per_node, "peak_host_used_bytes"),
    )
    out = []
    for what, estimated, key in pairs:
        value = measured.get(key)
        m = int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        ratio = (m / estimated) if m is not None and estimated > 0 else None
        out.append(Comparison(what, int(estimated), m, ratio))
    return out

"""What a run's set-up says, for the step anatomy's advice: its DeepSpeed config, cores and ranks on the host,
ZeRO-3's trace-cache invalidations, the pre-launch estimate (the GPU peak and the model's parameters), whether
its model is FSDP-sharded. Filled by the
caller (backend/runs/control/step_view.py reads them from the run directory and its events); every field may be
unknown."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunFacts:
    """What the run's set-up says, for the advice (every field may be unknown)."""

    ds_config: Mapping[str, Any] | None = None
    cpu_cores: int | None = None
    ranks_on_host: int | None = None
    trace_cache_invalidations: int | None = None
    estimate_gpu_bytes: int | None = None  # the pre-launch estimate of one GPU's peak
    estimate_host_bytes: int | None = None  # ... and of the host's (offload)
    model_params: int | None = None  # the model's parameters, where the pre-launch estimate knew them
    gpu_health: tuple[str, ...] = ()  # what slowed the run's GPUs during its steps: "GPU 0 was throttled (...)"
    rank_hosts: Mapping[int, str] | None = None  # a multi-node run's machine of each rank (its nodes.json)
    fsdp: str | None = None  # "FSDP2 (fully_shard)" or "FSDP1" where the ranks' hooks saw an FSDP-sharded model

    def rank(self, rank: int) -> str:
        """'rank 3', or 'rank 3 (node-b)' in a multi-node run: the slow machine is what to look at."""
        host = (self.rank_hosts or {}).get(rank)
        return f"rank {rank} ({host})" if host else f"rank {rank}"


FSDP_KINDS = ("FSDP2 (fully_shard)", "FSDP1")


def fsdp_of(hook_reports: Iterable[str]) -> str | None:
    """The FSDP a run's ranks said their model is sharded by, from their hooks' reports ("rank 0: step timing
    attached to ..., FSDP2 (fully_shard) model: ..."), or None."""
    for text in hook_reports:
        for kind in FSDP_KINDS:
            if f"{kind} model: " in text:
                return kind
    return None

"""Plain words for figures of the estimate that look wrong at first sight.

ZeRO-2 partitions more than ZeRO-1, yet on one to three GPUs its model states can read higher. The two model-state
figures come from different arithmetic: ZeRO-1 from the ZeRO paper (every rank keeps 16-bit weights and gradients
whole, the 12 bytes of fp32 master weights and Adam moments are split: 2 + 2 + 12/N bytes per parameter), ZeRO-2
from DeepSpeed's own `estimate_zero2_model_states_mem_needs` (2 + 18/N: its optimizer also holds an fp32 copy of
the gradient partition, 4/N, beside the 16-bit one, 2/N). DeepSpeed runs stages 1 and 2 with the same optimizer
(stage_1_and_2.py), so that fp32 gradient partition exists under ZeRO-1 too: the GPU totals count it for both
(model_states.zero12_step_buffers), and there ZeRO-2 never reads above ZeRO-1."""

from __future__ import annotations

from collections.abc import Sequence

from traindeck.backend.estimate.estimator import EstimateRow

GIB = 1024**3


def _plain(rows: Sequence[EstimateRow], stage: int) -> EstimateRow | None:
    return next((r for r in rows if r.framework == "deepspeed" and r.zero_stage == stage
                 and r.offload_optimizer == "none" and r.offload_param == "none"), None)


def zero2_above_zero1(rows: Sequence[EstimateRow]) -> str | None:
    """Why the ZeRO-2 row's model states read more than the ZeRO-1 row's, when they do (else None)."""
    one, two = _plain(rows, 1), _plain(rows, 2)
    if one is None or two is None or two.gpu_bytes_per_device <= one.gpu_bytes_per_device:
        return None
    gpus = one.gpus_per_node * one.num_nodes
    return (f"Why ZeRO-2's model states ({two.gpu_bytes_per_device / GIB:.1f} GiB) read more than ZeRO-1's "
            f"({one.gpu_bytes_per_device / GIB:.1f} GiB) on {gpus} GPU{'s' if gpus != 1 else ''}: the ZeRO-2 "
            f"figure is DeepSpeed's own arithmetic, 2 + 18/{gpus} bytes per parameter, which counts an fp32 copy of "
            f"the gradient partition; the ZeRO-1 figure is the ZeRO paper's 2 + 2 + 12/{gpus}, without it. DeepSpeed "
            "runs both stages with the same optimizer, so the GPU totals add that fp32 partition to ZeRO-1 too: "
            "there ZeRO-1 needs at least as much as ZeRO-2.")

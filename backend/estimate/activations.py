"""Activation memory per GPU for a decoder-only transformer, and the GPU overhead allowance beside model states.

The per-layer formula is Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
(2022), section 4.1, without tensor or sequence parallelism, 16-bit activations:

    per layer = s*b*h*34 + 5*a*s^2*b bytes     (s sequence, b micro batch, h hidden, a heads)

i.e. s*b*h*(34 + 5*a*s/h). The 5*a*s^2*b term is the attention score/softmax/dropout matrices; fused attention
(PyTorch SDPA flash / memory-efficient kernels, FlashAttention, the Hugging Face default since transformers 4.36)
never stores them, so `attention="sdpa"` leaves that term out and `attention="eager"` keeps it.

With full activation checkpointing only each layer's input is kept (2*s*b*h bytes per layer) and one layer's
activations are rebuilt at a time during backward, so: L*2*s*b*h + one layer's full activations.

The output layer adds the logits the loss needs in fp32: 4*s*b*V bytes (the paper's output-layer term).
fp32 training doubles the 16-bit terms. Activations do not shrink with ZeRO: each rank runs its own micro batch.
"""

from __future__ import annotations

from typing import Literal

Attention = Literal["sdpa", "eager"]
ATTENTION_KINDS: tuple[str, ...] = ("sdpa", "eager")

# The GPU memory a rank holds outside torch's caching allocator, which NVML counts and torch's reserved does not:
# the CUDA context, the kernel images of the CUDA libraries loaded and NCCL's own buffers. Measured as the NVML
# peak minus torch's peak reserved on an NVIDIA H200 (torch 2.11.0+cu130, DeepSpeed 0.19.8): 1300 MiB for a
# 1.07e9-parameter ZeRO-2 run and 1298 MiB for a tiny ZeRO-2 offload run (tests/fixtures/gpu_estimate_h200.json).
CUDA_CONTEXT_BYTES = 1300 * 1024**2
# The caching allocator's fragmentation and the communication buckets, as a share of tensors allocated, for the
# strategies whose allocation pattern is not worked out (DeepSpeed's ZeRO-1/2 without offload is: see
# model_states.zero12_step_buffers and zero12_allocator_reserve).
FRAGMENTATION_FACTOR = 1.10


def layer_activation_bytes(seq_len: int, micro_batch: int, hidden: int, heads: int, attention: str = "sdpa") -> int:
    """One transformer layer's activations kept for backward, 16-bit (Korthikanti et al., eq. 1 with t = 1)."""
    s, b, h, a = seq_len, micro_batch, hidden, heads
    score_matrices = 5 * a * s * s * b if attention == "eager" else 0
    return 34 * s * b * h + score_matrices


def activation_bytes(
    seq_len: int,
    micro_batch: int,
    hidden: int,
    layers: int,
    heads: int,
    vocab: int,
    checkpointing: bool = False,
    attention: str = "sdpa",
    precision: str = "bf16",
) -> int:
    """Activation bytes per GPU for one micro batch (see the module docstring for the formula and its sources)."""
    if attention not in ATTENTION_KINDS:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {attention!r}")
    per_layer = layer_activation_bytes(seq_len, micro_batch, hidden, heads, attention)
    if checkpointing:
        body = layers * 2 * seq_len * micro_batch * hidden + per_layer
    else:
        body = layers * per_layer
    if precision == "fp32":
        body *= 2
    logits = 4 * seq_len * micro_batch * vocab
    return int(body + logits)


def gpu_total_bytes(
    model_states: int,
    activations: int,
    cuda_context: int = CUDA_CONTEXT_BYTES,
    fragmentation: float = FRAGMENTATION_FACTOR,
    reserve: int | None = None,
) -> tuple[int, int]:
    """(total bytes per GPU, overhead part): model states + activations + allocator reserve + CUDA context.

    The reserve is what the caching allocator holds beyond the tensors: `reserve` where the strategy's allocation
    pattern gives it, else (fragmentation - 1) x the tensors.
    """
    tensors = model_states + activations
    held = int(tensors * fragmentation) - tensors if reserve is None else reserve
    total = tensors + held + cuda_context
    return total, total - tensors

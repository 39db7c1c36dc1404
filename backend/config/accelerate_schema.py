"""The accelerate launch config (`accelerate config` YAML): every key it writes, what it means, what it allows.

Read from the installed accelerate 1.15.0: commands/config/config_args.py (ClusterConfig/BaseConfig fields),
commands/config/cluster.py (the questions `accelerate config` asks and the keys it writes), utils/dataclasses.py
(DistributedType, DeepSpeedPlugin, FullyShardedDataParallelPlugin, MegatronLMPlugin), commands/launch.py and
utils/launch.py (which keys become which launch flags and environment variables, and what launch refuses).
Defaults are what `accelerate launch` does when the key is absent (its argparse defaults, then the plugins').

What accelerate 1.15.0 does with keys it does not know:
  - top level: `load_config_from_file` -> `ClusterConfig.from_yaml_file` compares the keys with the dataclass
    fields and raises ValueError("... had unknown keys ([...]) ...") -> UNKNOWN = "error". Two legacy keys are
    converted first by `process_config` and so still accepted: `fp16` (true -> mixed_precision: fp16, dropped when
    mixed_precision is set) and `dynamo_backend` (moved into dynamo_config, replacing that section).
  - inside deepspeed_config / fsdp_config / megatron_lm_config / dynamo_config / fp8_config / mpirun_config /
    parallelism_config: ClusterConfig keeps the dict as is; `accelerate launch` copies each entry onto its argparse
    namespace (fsdp_config keys without the "fsdp_" prefix get it added, dynamo_config keys get "dynamo_",
    fp8_config keys get "fp8_") and only the names it has flags for reach the training processes. An unknown key
    is silently ignored -> UNKNOWN = "warning".
  - `ipex_config` (accelerate < 1.0) is not a ClusterConfig field from 1.0 on: a file with it is refused -> REMOVED.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from traindeck.backend.config.schema import Section, fields_of
from traindeck.backend.config.snapshot_merge import bind_snapshot

DISTRIBUTED_TYPES = (
    "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU", "MULTI_HPU",
    "MULTI_NEURON", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM",
)
# The launchers that start one process per accelerator device (torchrun / deepspeed), where gpu_ids applies.
DEVICE_TYPES = (
    "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU", "MULTI_HPU", "MULTI_NEURON",
    "DEEPSPEED", "FSDP", "MEGATRON_LM",
)
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
DYNAMO_BACKENDS = (
    "NO", "EAGER", "AOT_EAGER", "INDUCTOR", "AOT_TS_NVFUSER", "NVPRIMS_NVFUSER", "CUDAGRAPHS", "OFI", "FX2TRT",
    "ONNXRT", "TENSORRT", "AOT_TORCHXLA_TRACE_ONCE", "TORCHXLA_TRACE_ONCE", "TVM", "HPU_BACKEND", "NEURON",
)

_SECTION_IGNORES = "accelerate launch ignores keys it has no flag for"


def _f(*args: Any, **kwargs: Any) -> Any:
    """pydantic's Field, typed loosely: a default of None means "accelerate decides" for keys that take no null."""
    return Field(*args, **kwargs)


class DeepSpeedSection(Section):
    """`deepspeed_config:` in the accelerate YAML (accelerate's DeepSpeedPlugin builds a DeepSpeed config from it)."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = f"{_SECTION_IGNORES} in deepspeed_config"

    deepspeed_config_file: str | None = _f(
        None, description="Path to a DeepSpeed JSON config; when set, ZeRO, batch and precision settings must be in "
        "that file (accelerate refuses them here)")
    zero_stage: Literal[0, 1, 2, 3] = _f(
        2, description="ZeRO stage: 0 off, 1 shards optimizer states, 2 also gradients, 3 also the parameters")
    offload_optimizer_device: Literal["none", "cpu", "nvme"] = _f(
        "none", description="Where optimizer states live: GPU ('none'), CPU RAM, or an NVMe drive (ZeRO-3 only)",
        json_schema_extra={"stages": (1, 2, 3)})
    offload_param_device: Literal["none", "cpu", "nvme"] = _f(
        "none", description="Where parameters live between uses: GPU ('none'), CPU RAM or an NVMe drive",
        json_schema_extra={"stages": (3,)})
    offload_optimizer_nvme_path: str | None = _f(
        None, description="Folder on the NVMe drive for optimizer states (with offload_optimizer_device: nvme)",
        json_schema_extra={"applies": "offload to nvme", "stages": (3,)})
    offload_param_nvme_path: str | None = _f(
        None, description="Folder on the NVMe drive for parameters (with offload_param_device: nvme)",
        json_schema_extra={"applies": "offload to nvme", "stages": (3,)})
    gradient_accumulation_steps: int | Literal["auto"] = _f(
        1, ge=1, description="Micro-batches accumulated per optimizer step; must match what your script uses",
        json_schema_extra={"auto": True})
    gradient_clipping: float | Literal["auto"] = _f(
        None, ge=0, description="Clip the global gradient norm to this value (absent: no clipping)",
        json_schema_extra={"auto": True})
    zero3_init_flag: bool = _f(
        None, description="Build the model directly sharded with deepspeed.zero.Init (needs Hugging Face Transformers); "
        "default: on for ZeRO-3", json_schema_extra={"stages": (3,)})
    zero3_save_16bit_model: bool = _f(
        False, description="Gather the full 16-bit weights when saving a ZeRO-3 model (a loadable checkpoint)",
        json_schema_extra={"stages": (3,)})
    deepspeed_moe_layer_cls_names: str | None = _f(
        None, description="Comma-separated Mixture-of-Experts layer classes kept whole under ZeRO-3, "
        "e.g. MixtralSparseMoeBlock")
    deepspeed_hostfile: str | None = _f(
        None, description="Multi-machine: hostfile listing 'hostname slots=N' per machine (pdsh/openmpi/... "
        "launchers)", json_schema_extra={"applies": "num_machines > 1"})
    deepspeed_multinode_launcher: Literal["pdsh", "standard", "openmpi", "mvapich", "mpich", "nossh", "slurm"] = _f(
        "pdsh", description="Multi-machine launcher: 'standard' runs torchrun on each machine, the others start all "
        "machines from this one", json_schema_extra={"applies": "num_machines > 1"})
    deepspeed_exclusion_filter: str | None = _f(
        None, description="Multi-machine: hosts/GPUs to leave out, e.g. 'worker-2:0,1'",
        json_schema_extra={"applies": "num_machines > 1"})
    deepspeed_inclusion_filter: str | None = _f(
        None, description="Multi-machine: only these hosts/GPUs, e.g. 'worker-0@worker-1:0,2'",
        json_schema_extra={"applies": "num_machines > 1"})


class FsdpSection(Section):
    """`fsdp_config:` (accelerate's FullyShardedDataParallelPlugin)."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = f"{_SECTION_IGNORES} in fsdp_config"
    # accelerate adds the "fsdp_" prefix to keys written without it (commands/launch.py), so `version: 2` works;
    # the deprecated `fsdp_backward_prefetch_policy` has no flag in accelerate 1.15, which ignores it.
    # `fsdp_sharding_strategy` is NOT deprecated here although accelerate's docs say so: under `accelerate launch`
    # 1.15 it is the only FSDP1 setting that takes effect (see the fsdp1 rule), so renaming it would change training.
    DEPRECATED: ClassVar = {"fsdp_backward_prefetch_policy": "fsdp_backward_prefetch"}

    fsdp_version: Literal[1, 2] = _f(
        1, description="1: the original FullyShardedDataParallel wrapper; 2: per-parameter sharding (fully_shard, "
        "torch >= 2.6)")
    fsdp_reshard_after_forward: Literal[True, False, "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                        "HYBRID_SHARD_ZERO2"] = _f(
        None, description="FSDP2: true frees gathered parameters after forward (less memory), false keeps them "
        "(faster); FSDP1: a sharding strategy name. Default true / FULL_SHARD")
    fsdp_sharding_strategy: Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2",
                                    1, 2, 3, 4, 5] = _f(
        "FULL_SHARD", description="FSDP1 sharding: FULL_SHARD (1) params+grads+optimizer, SHARD_GRAD_OP (2) "
        "grads+optimizer, NO_SHARD (3) like DDP, HYBRID_SHARD (4) / _ZERO2 (5) within a machine")
    fsdp_offload_params: bool = _f(
        False, description="Keep parameters and gradients in CPU RAM and the optimizer step on the CPU (slow, "
        "saves GPU memory)")
    fsdp_auto_wrap_policy: Literal["TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"] = _f(
        "NO_WRAP", description="How the model is split into FSDP units: per transformer layer class, per "
        "parameter count, or one unit for the whole model")
    fsdp_transformer_layer_cls_to_wrap: str | None = _f(
        None, description="Comma-separated layer class names to wrap, e.g. 'LlamaDecoderLayer' (absent: the "
        "Hugging Face model's _no_split_modules)", json_schema_extra={"applies": "TRANSFORMER_BASED_WRAP"})
    fsdp_min_num_params: int = _f(
        100_000_000, ge=0, description="Smallest module (in parameters) that gets its own FSDP unit",
        json_schema_extra={"applies": "SIZE_BASED_WRAP"})
    fsdp_backward_prefetch: Literal["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"] = _f(
        "NO_PREFETCH", description="FSDP1: fetch the next parameters before (BACKWARD_PRE, more memory, faster) or "
        "after the current gradient computation", json_schema_extra={"applies": "fsdp_version 1"})
    fsdp_forward_prefetch: bool = _f(
        False, description="FSDP1: prefetch the next all-gather during forward (static graphs only)",
        json_schema_extra={"applies": "fsdp_version 1"})
    fsdp_state_dict_type: Literal["FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"] = _f(
        None, description="Checkpoint format: one full file gathered on rank 0, or one shard per rank (faster, "
        "less memory); default FULL (FSDP1) / SHARDED (FSDP2)")
    fsdp_cpu_ram_efficient_loading: bool = _f(
        True, description="Only rank 0 loads the pretrained weights, the others start empty (Hugging Face Transformers "
        "models; needs fsdp_sync_module_states)")
    fsdp_sync_module_states: bool = _f(
        True, description="FSDP1: broadcast rank 0's weights to all ranks at start (required by "
        "cpu_ram_efficient_loading)", json_schema_extra={"applies": "fsdp_version 1"})
    fsdp_use_orig_params: bool = _f(
        True, description="FSDP1: let the optimizer see the original parameters (needed for frozen layers and "
        "torch.compile)", json_schema_extra={"applies": "fsdp_version 1"})
    fsdp_activation_checkpointing: bool = _f(
        False, description="Recompute each wrapped layer's activations in backward instead of storing them "
        "(less memory, ~30% slower)")
    fsdp_activation_checkpointing_offload: bool = _f(
        False, description="FSDP2: also move checkpointed activations to pinned CPU memory (needs "
        "fsdp_activation_checkpointing)", json_schema_extra={"applies": "fsdp_version 2"})
    fsdp_ignored_modules: str | None = _f(
        None, description="Regular expression of module names FSDP leaves unsharded")
    # Legacy name (DEPRECATED above); its description words the replacement.
    fsdp_backward_prefetch_policy: Literal["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"] | None = _f(
        None, description="rename it to fsdp_backward_prefetch: accelerate 1.15 has no flag for the old name and "
        "ignores it", json_schema_extra={"applies": "legacy"})


# accelerate adds the prefix itself (commands/launch.py), so the short names work; we report the canonical one.
FsdpSection.DEPRECATED = {
    **{key.removeprefix("fsdp_"): key for key in fields_of(FsdpSection) if key not in FsdpSection.DEPRECATED},
    **FsdpSection.DEPRECATED,
}


class MegatronLMSection(Section):
    """`megatron_lm_config:` (accelerate's MegatronLMPlugin). Keys are copied as is: the prefix is required."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = f"{_SECTION_IGNORES} in megatron_lm_config"

    megatron_lm_tp_degree: int = _f(1, ge=1, description="Tensor parallelism: GPUs each layer is split across")
    megatron_lm_pp_degree: int = _f(1, ge=1, description="Pipeline parallelism: stages the layers are split into")
    megatron_lm_num_micro_batches: int | None = _f(
        None, ge=1, description="Micro-batches per pipeline step (with pp_degree > 1)",
        json_schema_extra={"applies": "pp_degree > 1"})
    megatron_lm_sequence_parallelism: bool = _f(
        None, description="Also split layer-norm/dropout activations along the sequence (with tp_degree > 1)",
        json_schema_extra={"applies": "tp_degree > 1"})
    megatron_lm_recompute_activations: bool = _f(
        None, description="Selective activation recomputation: recompute attention activations in backward")
    megatron_lm_use_distributed_optimizer: bool = _f(
        None, description="Shard optimizer states and gradients across the data-parallel ranks")
    megatron_lm_gradient_clipping: float = _f(
        1.0, ge=0, description="Clip the global L2 gradient norm to this value (0 disables)")
    megatron_lm_use_custom_fsdp: bool = _f(False, description="Use Megatron's own FSDP implementation")
    megatron_lm_no_load_optim: bool = _f(False, description="Do not load the optimizer state from checkpoints")
    megatron_lm_no_save_optim: bool = _f(False, description="Do not save the optimizer state in checkpoints")
    megatron_lm_eod_mask_loss: bool = _f(False, description="Mask the loss at end-of-document tokens")
    megatron_lm_optimizer_cpu_offload: bool = _f(False, description="Run the optimizer on the CPU (offload)")
    megatron_lm_overlap_cpu_optimizer_d2h_h2d: bool = _f(
        False, description="Overlap the CPU optimizer's device<->host copies with compute")
    megatron_lm_use_precision_aware_optimizer: bool = _f(
        False, description="Keep optimizer states in lower precision where safe")
    megatron_lm_decoder_last_pipeline_num_layers: int | None = _f(
        None, ge=0, description="Layers in the last pipeline stage (absent: even split)")
    megatron_lm_recompute_granularity: Literal["full", "selective"] | None = _f(
        None, description="Activation recomputation: whole layers ('full') or attention only ('selective')")
    megatron_lm_recompute_method: Literal["uniform", "block"] | None = _f(
        None, description="With full recomputation: checkpoint evenly spread layers or the first N per stage")
    megatron_lm_recompute_num_layers: int | None = _f(
        None, ge=1, description="Layers recomputed per group/stage with full recomputation")
    megatron_lm_attention_backend: bool = _f(None, description="Use Megatron's attention backend selection")
    megatron_lm_expert_model_parallel_size: int | None = _f(
        None, ge=1, description="Mixture-of-Experts: GPUs the experts are spread across")
    megatron_lm_expert_tensor_parallel_size: int | None = _f(
        None, ge=1, description="Mixture-of-Experts: tensor parallelism inside each expert")
    megatron_lm_context_parallel_size: int | None = _f(
        None, ge=1, description="Split long sequences across this many GPUs")
    megatron_lm_attention_dropout: float | None = _f(None, ge=0, le=1, description="Attention dropout rate")
    megatron_lm_hidden_dropout: float | None = _f(None, ge=0, le=1, description="Hidden-layer dropout rate")
    megatron_lm_attention_softmax_in_fp32: bool = _f(None, description="Compute the attention softmax in fp32")
    megatron_lm_calculate_per_token_loss: bool = _f(None, description="Average the loss per token, not per batch")
    megatron_lm_use_rotary_position_embeddings: bool = _f(None, description="Use rotary position embeddings")


class DynamoSection(Section):
    """`dynamo_config:` (torch.compile settings; accelerate adds the "dynamo_" prefix to keys written without it)."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = f"{_SECTION_IGNORES} in dynamo_config"

    dynamo_backend: Literal[DYNAMO_BACKENDS] = _f(  # type: ignore[valid-type]
        "NO", description="torch.compile backend: INDUCTOR is the usual choice; NO disables compilation")
    dynamo_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = _f(
        "default", description="torch.compile mode: reduce-overhead uses CUDA graphs, max-autotune searches "
        "kernels (slow to start)")
    dynamo_use_fullgraph: bool = _f(
        False, description="Fail instead of splitting the model into several graphs at unsupported code")
    dynamo_use_dynamic: bool = _f(
        False, description="Trace with dynamic shapes (fewer recompiles when batch shapes vary)")
    dynamo_use_regional_compilation: bool = _f(
        False, description="Compile one repeated block and reuse it (much faster start for deep models)")


DynamoSection.DEPRECATED = {key.removeprefix("dynamo_"): key for key in fields_of(DynamoSection)}


class MpirunSection(Section):
    """`mpirun_config:` (MULTI_CPU launched through mpirun)."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = f"{_SECTION_IGNORES} in mpirun_config"

    mpirun_hostfile: str | None = _f(
        None, description="Hostfile for mpirun; when set, accelerate starts the CPU processes with mpirun")


class Fp8Section(Section):
    """`fp8_config:` (mixed_precision: fp8; accelerate adds the "fp8_" prefix to keys written without it).

    Declared keys are the ones `accelerate launch` reads. `accelerate config` 1.15 writes `amax_history_length`,
    `amax_compute_algorithm` and `optimization_level`, which no flag reads (they are ignored: a warning suggests the
    name that works)."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = f"{_SECTION_IGNORES} in fp8_config"

    backend: Literal["AO", "TE", "MSAMP"] = _f(
        None, description="FP8 library: torchao (AO), NVIDIA Transformer Engine (TE) or MS-AMP")
    use_autocast_during_eval: bool = _f(False, description="TE: also run evaluation in FP8 (often worse metrics)")
    margin: int = _f(0, ge=0, description="TE: margin for the scaling-factor computation")
    interval: int = _f(1, ge=1, description="TE: steps between scaling-factor updates")
    fp8_format: Literal["HYBRID", "E4M3", "E5M2"] = _f(
        "HYBRID", description="TE: FP8 format: HYBRID (E4M3 forward, E5M2 backward), E4M3 or E5M2")
    amax_history_len: int = _f(1024, ge=1, description="TE: length of the amax history for scaling")
    amax_compute_algo: Literal["max", "most_recent"] = _f(
        "most_recent", description="TE: how the scaling factor is taken from the amax history")
    override_linear_precision: list[bool] | None = _f(
        None, description="TE: run fprop, dgrad, wgrad GEMMs in higher precision ([false, false, false])")
    opt_level: Literal["O1", "O2"] = _f("O1", description="MS-AMP optimization level")
    enable_fsdp_float8_all_gather: bool = _f(True, description="AO with FSDP2: all-gather weights in float8")
    pad_inner_dim: bool = _f(True, description="AO: pad matrix inner dimensions for FP8 kernels")


class ParallelismSection(Section):
    """`parallelism_config:` (N-D parallelism with FSDP2: data, tensor, context, sequence)."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = f"{_SECTION_IGNORES} in parallelism_config"

    parallelism_config_dp_replicate_size: int = _f(1, ge=1, description="Data-parallel replicas (DDP-style)")
    parallelism_config_dp_shard_size: int = _f(1, ge=1, description="Data-parallel shards (FSDP-style)")
    parallelism_config_tp_size: int = _f(1, ge=1, description="Tensor-parallel size")
    parallelism_config_cp_size: int = _f(1, ge=1, description="Context-parallel size (long sequences)")
    parallelism_config_cp_backend: Literal["torch"] = _f("torch", description="Context-parallel implementation")
    parallelism_config_cp_comm_strategy: Literal["allgather", "alltoall"] = _f(
        "allgather", description="How context-parallel ranks exchange keys/values", json_schema_extra={"applies": "cp_size > 1"})
    parallelism_config_sp_size: int = _f(1, ge=1, description="Sequence-parallel size (DeepSpeed Ulysses)")
    parallelism_config_sp_backend: Literal["deepspeed"] = _f("deepspeed", description="Sequence-parallel implementation")
    parallelism_config_sp_seq_length: int | None = _f(
        None, ge=1, description="Sequence length for sequence parallelism", json_schema_extra={"applies": "sp_size > 1"})
    parallelism_config_sp_seq_length_is_variable: bool = _f(
        None, description="Sequences vary in length", json_schema_extra={"applies": "sp_size > 1"})
    parallelism_config_sp_attn_implementation: str | None = _f(
        None, description="Attention implementation used with sequence parallelism", json_schema_extra={"applies": "sp_size > 1"})


class AccelerateConfig(Section):
    """The whole accelerate launch config (ClusterConfig)."""

    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = "accelerate refuses a config file with unknown top-level keys"
    # Converted by ClusterConfig.process_config; the fields below check the old values and word the replacement.
    DEPRECATED: ClassVar = {"fp16": "mixed_precision", "dynamo_backend": "dynamo_config.dynamo_backend"}
    REMOVED: ClassVar = {
        "ipex_config": "accelerate 1.x dropped it (Intel Extension for PyTorch is used when installed) and refuses "
        "the file: delete the section",
    }
    # `distributed_type: NO` unquoted is false, which accelerate's launcher takes as NO (accelerate_rules words it).
    RULES_WORD_BOOL: ClassVar = frozenset({"distributed_type"})

    compute_environment: Literal["LOCAL_MACHINE", "AMAZON_SAGEMAKER"] = _f(
        "LOCAL_MACHINE", description="Where the job runs: this machine/cluster, or Amazon SageMaker")
    distributed_type: Literal[DISTRIBUTED_TYPES] = _f(  # type: ignore[valid-type]
        None, description="How training is distributed: NO (one process), MULTI_GPU (DDP), DEEPSPEED, FSDP, "
        "MULTI_CPU, ... (required)")
    num_processes: int | Literal["auto"] = _f(
        None, ge=1, description="Processes in the whole job, all machines together (usually one per GPU); "
        "default 1 with NO; \"auto\" (one machine): torchrun starts one per GPU",
        json_schema_extra={"auto": True})
    num_machines: int = _f(1, ge=1, description="Machines (nodes) taking part in the job")
    machine_rank: int = _f(0, ge=0, description="This machine's index, 0 for the main machine "
                              "(each machine needs its own)", json_schema_extra={"applies": "num_machines > 1"})
    main_process_ip: str | None = _f(
        None, description="IP address of machine 0, reachable from all machines (multi-machine)",
        json_schema_extra={"applies": "num_machines > 1"})
    main_process_port: int | None = _f(
        None, ge=0, le=65535, description="TCP port on machine 0 for the rendezvous (default 29500; 0: pick a free "
        "one, single machine only)")
    rdzv_backend: Literal["static", "c10d", "etcd", "etcd-v2"] | str = _f(
        "static", description="torchrun rendezvous: static (fixed ranks) or c10d for machines on different networks",
        json_schema_extra={"applies": "num_machines > 1"})
    same_network: bool = _f(
        True, description="All machines are on the same local network (else a c10d rendezvous is used)",
        json_schema_extra={"applies": "num_machines > 1"})
    gpu_ids: str | None = _f(
        "all", description="GPUs this machine uses, 'all' or a quoted comma-separated list like '0,1' "
        "(sets CUDA_VISIBLE_DEVICES)")
    mixed_precision: Literal["no", "fp16", "bf16", "fp8"] | None = _f(
        "no", description="Compute precision: no (fp32), fp16 (with loss scaling), bf16 (Ampere+), fp8 "
        "(Hopper/Ada + FP8 library)")
    use_cpu: bool = _f(False, description="Train on the CPU even when a GPU is present (NO and MULTI_CPU)")
    debug: bool = _f(False, description="Check that all processes call the same collective operations "
                        "(finds hangs, slower)")
    enable_cpu_affinity: bool = _f(False, description="Pin each process to the CPU cores near its GPU "
                                      "(NVIDIA, NUMA machines)")
    main_training_function: str = _f(
        "main", description="Function the TPU / notebook launcher calls in your script")
    downcast_bf16: Literal[False, True, "no", "yes"] = _f(
        False, description="TPU with bf16: cast float to bfloat16 and double to float32")
    deepspeed_config: DeepSpeedSection | None = _f(
        None, description="DeepSpeed settings (with distributed_type: DEEPSPEED)")
    fsdp_config: FsdpSection | None = _f(None, description="FSDP settings (with distributed_type: FSDP)")
    megatron_lm_config: MegatronLMSection | None = _f(
        None, description="Megatron-LM settings (with distributed_type: MEGATRON_LM)")
    dynamo_config: DynamoSection | None = _f(None, description="torch.compile settings (empty: no compilation)")
    fp8_config: Fp8Section | None = _f(None, description="FP8 recipe (with mixed_precision: fp8)")
    parallelism_config: ParallelismSection | None = _f(
        None, description="N-D parallelism sizes (FSDP2 with tensor/context/sequence parallelism)")
    mpirun_config: MpirunSection | None = _f(None, description="mpirun settings (MULTI_CPU)")
    tpu_name: str | None = _f(None, description="TPU pod name (XLA with tpu_use_cluster)")
    tpu_zone: str | None = _f(None, description="Google Cloud zone of the TPU pod")
    tpu_use_cluster: bool = _f(False, description="Run on a TPU pod instead of a single TPU VM")
    tpu_use_sudo: bool = _f(False, description="Run the script with sudo on the TPU pod")
    command_file: str | None = _f(None, description="TPU pod: bash script run on each host at start")
    commands: list[str] | None = _f(None, description="TPU pod: commands run on each host at start")
    tpu_vm: list[str] | None = _f(None, description="TPU pod: names of the Compute VM instances")
    tpu_env: list[str] | None = _f(None, description="TPU pod: environment variables set on each host")
    # Legacy keys still converted by accelerate (DEPRECATED above): their descriptions word the replacement.
    fp16: bool | None = _f(
        None, description="write mixed_precision: fp16 (or 'no') instead; accelerate still turns fp16: true "
        "into mixed_precision: fp16 when mixed_precision is absent", json_schema_extra={"applies": "legacy"})
    dynamo_backend: Literal[DYNAMO_BACKENDS] | None = _f(  # type: ignore[valid-type]
        None, description="move it into dynamo_config as dynamo_backend (accelerate still moves it there, "
        "replacing the whole dynamo_config section)", json_schema_extra={"applies": "legacy"})

    @classmethod
    def unknown_key_hint(cls, key: str) -> str | None:
        home = home_section(key)
        return f"it belongs under {home} (was the indentation lost?)" if home else None


class SageMakerConfig(Section):
    """An accelerate config with compute_environment: AMAZON_SAGEMAKER (accelerate's SageMakerConfig dataclass:
    another set of top-level keys than ClusterConfig's, unknown ones refused the same way)."""

    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = "accelerate refuses a config file with unknown top-level keys"
    DEPRECATED: ClassVar = {"fp16": "mixed_precision", "dynamo_backend": "dynamo_config.dynamo_backend"}

    compute_environment: Literal["LOCAL_MACHINE", "AMAZON_SAGEMAKER"] = _f(
        "LOCAL_MACHINE", description="Where the job runs: this machine/cluster, or Amazon SageMaker")
    distributed_type: Literal["NO", "DATA_PARALLEL", "MODEL_PARALLEL"] = _f(
        None, description="SageMaker distribution: NO, DATA_PARALLEL or MODEL_PARALLEL (required)")
    mixed_precision: Literal["no", "fp16", "bf16", "fp8"] | None = _f(
        "no", description="Compute precision: no (fp32), fp16, bf16 or fp8")
    ec2_instance_type: str = _f(None, description="EC2 instance type of the training job, e.g. ml.p3.2xlarge "
                                "(required)")
    iam_role_name: str = _f(None, description="IAM role SageMaker runs the job as (required)")
    image_uri: str | None = _f(None, description="Docker image of the training job (absent: the Hugging Face DLC)")
    profile: str | None = _f(None, description="AWS profile whose credentials start the job")
    region: str = _f("us-east-1", description="AWS region of the job")
    num_machines: int = _f(1, ge=1, description="Instances the job runs on")
    gpu_ids: str | None = _f("all", description="GPUs used on each instance")
    base_job_name: str = _f(None, description="Prefix of the SageMaker job name")
    pytorch_version: str = _f(None, description="PyTorch version of the Hugging Face DLC")
    transformers_version: str = _f(None, description="Transformers version of the Hugging Face DLC")
    py_version: str = _f(None, description="Python version of the Hugging Face DLC, e.g. py38")
    sagemaker_inputs_file: str | None = _f(None, description="TSV file of the job's input channels")
    sagemaker_metrics_file: str | None = _f(None, description="TSV file of the metric definitions")
    additional_args: dict[str, Any] | None = _f(None, description="Extra arguments for the SageMaker estimator")
    dynamo_config: DynamoSection | None = _f(None, description="torch.compile settings (empty: no compilation)")
    use_cpu: bool = _f(False, description="Train on the CPU")
    debug: bool = _f(False, description="Check that all processes call the same collective operations")
    enable_cpu_affinity: bool = _f(False, description="Pin each process to the CPU cores near its GPU")


def root_for(data: Any) -> type[Section]:
    """The description of a whole accelerate config: accelerate reads a SageMaker one with another dataclass."""
    if isinstance(data, dict) and data.get("compute_environment") == "AMAZON_SAGEMAKER":
        return SageMakerConfig
    return AccelerateConfig


# Key names, their other spellings (fsdp_config's keys without "fsdp_", ...) and the unknown-key policy come from
# the snapshot of the installed accelerate (snapshot/accelerate.json, regenerated by snapshot_gen.py).
bind_snapshot(AccelerateConfig, "accelerate")
bind_snapshot(SageMakerConfig, "accelerate", "@sagemaker")


# Section keys whose own names say which section they belong to: a flattened file (indentation lost when pasted)
# has them at the top level.
_SECTIONS: dict[str, type[Section]] = {
    "deepspeed_config": DeepSpeedSection,
    "fsdp_config": FsdpSection,
    "megatron_lm_config": MegatronLMSection,
    "dynamo_config": DynamoSection,
    "fp8_config": Fp8Section,
    "parallelism_config": ParallelismSection,
    "mpirun_config": MpirunSection,
}
_PREFIXES = {"fsdp_": "fsdp_config", "megatron_lm_": "megatron_lm_config", "dynamo_": "dynamo_config",
             "parallelism_config_": "parallelism_config", "mpirun_": "mpirun_config"}


def home_section(key: str) -> str | None:
    """The section an unknown top-level key belongs to (`zero_stage` -> "deepspeed_config"), or None.

    Only keys that name their section unambiguously: a nested section's declared keys (fp8_config's short generic
    names like `margin` excepted) and the section prefixes (`fsdp_*`, `megatron_lm_*`, ...)."""
    if key in fields_of(AccelerateConfig):
        return None
    for section_key, section in _SECTIONS.items():
        if section is not Fp8Section and key in fields_of(section):
            return section_key
    for prefix, section_key in _PREFIXES.items():
        if key.startswith(prefix):
            return section_key
    return None


def section_of(key: str) -> type[Section] | None:
    """The Section class of a top-level section key (`deepspeed_config` -> DeepSpeedSection)."""
    return _SECTIONS.get(key)


def value(data: Any, *path: str, default: Any = None) -> Any:
    """data[path[0]][path[1]]... or `default` when any step is missing or not a mapping."""
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return default
        data = data[part]
    return data

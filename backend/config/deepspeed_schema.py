"""The DeepSpeed JSON config (ds_config.json), described key by key from DeepSpeed 0.19.8's own source.

Defaults, ranges and allowed values are DeepSpeed's (deepspeed/runtime/config.py, constants.py, zero/config.py,
zero/offload_config.py, precision_config.py, activation_checkpointing/config.py, swap_tensor/aio_config.py,
monitor/config.py, comm/config.py, profiling/config.py, model_checkpointing/, utils/config.py).

How DeepSpeed treats a key it does not know decides each section's UNKNOWN policy, and it comes in two flavours:
  - sections parsed by a `DeepSpeedConfigModel` (pydantic, `extra="forbid"` in runtime/config_utils.py):
    zero_optimization and its offload_param / offload_optimizer / leaf_module, fp16, bf16, tensorboard, wandb,
    csv_monitor, comet, comms_logger, hybrid_engine, timers.throughput. DeepSpeed refuses an unknown key there with
    a ValidationError at start-up -> "error". These models also drop any "auto" value before validating
    (`DeepSpeedConfigModel.__init__`, strict=False), so "auto" there means DeepSpeed's default.
  - everything read with `get_scalar_param` / `dict.get` (the top level, optimizer, scheduler, aio,
    activation_checkpointing, flops_profiler, checkpoint, data_types, torch_autocast, timers): an unknown key is
    never looked at -> "warning" (DeepSpeed ignores it). An "auto" there reaches DeepSpeed as the text "auto".
Keys DeepSpeed 0.19.8 removed are refused with DeepSpeedConfigError (`_reject_removed_config_keys`) -> REMOVED.

The key snapshot (snapshot/deepspeed.json, generated from the installed DeepSpeed by snapshot_gen.py) is bound to
these classes at the bottom of this module: it decides the key names and their aliases (both spellings accepted),
each section's UNKNOWN policy, and in the pydantic sections the types, allowed values, ranges and defaults. So the
pydantic sections declare their keys `Any` with only what DeepSpeed's models do not say: the help, "auto", stages,
applies, and a narrowing DeepSpeed enforces outside the field's type (a field_validator's range such as
fp16.loss_scale >= 0, comet's mode values). A key only the snapshot knows is checked from the snapshot alone.

Size (~630 lines): a declarative description of DeepSpeed's config sections, one class per section.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from traindeck.backend.config.schema import Section
from traindeck.backend.config.snapshot_merge import bind_snapshot

Auto = Literal["auto"]
Device = Literal["none", "cpu", "nvme"]
# DeepSpeed's DtypeEnum (runtime/config.py) accepts every one of these spellings.
DtypeName = Literal["fp32", "fp16", "bf16", "float32", "float16", "bfloat16", "half", "float", "torch.float32",
                    "torch.float16", "torch.bfloat16"]

# DeepSpeed's own optimizer names (runtime/config.py DEEPSPEED_OPTIMIZERS), matched ignoring case; any other name
# is looked up as a class of torch.optim with its exact spelling (engine._configure_basic_optimizer).
DEEPSPEED_OPTIMIZERS = ("adagrad", "adam", "adamw", "lamb", "muadam", "muadamw", "musgd", "lion", "muon")
TORCH_OPTIMIZERS = ("ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "Muon", "NAdam",
                    "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam")
# DeepSpeed's schedulers (runtime/lr_schedules.py VALID_LR_SCHEDULES), then torch.optim.lr_scheduler's classes:
# both looked up with their exact spelling (engine._scheduler_from_config).
DEEPSPEED_SCHEDULERS = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest")
TORCH_SCHEDULERS = ("ChainedScheduler", "ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CyclicLR",
                    "ExponentialLR", "LambdaLR", "LinearLR", "MultiStepLR", "MultiplicativeLR", "OneCycleLR",
                    "PolynomialLR", "ReduceLROnPlateau", "SequentialLR", "StepLR")

# Keys whose allowed values DeepSpeed compares after .lower() / .upper(): declared as choices that also take free
# text, and checked ignoring case by a rule (deepspeed_rules.choices_ignoring_case).
ANY_CASE: tuple[tuple[str, ...], ...] = (
    ("communication_data_type",), ("seq_parallel_communication_data_type",), ("gradient_allreduce_op",),
    ("log_level",), ("checkpoint", "tag_validation"),
)


def _f(default: Any = None, help: str = "", *, auto: bool = False, stages: tuple[int, ...] = (), applies: str = "",
       alias: str | None = None, factory: Any = None, **limits: Any) -> Any:
    """A field: DeepSpeed's default, the one-line help, and the metadata forms and rules read."""
    extra: dict[str, Any] = {}
    if auto:
        extra["auto"] = True
    if stages:
        extra["stages"] = stages
    if applies:
        extra["applies"] = applies
    kwargs: dict[str, Any] = {"description": help, "json_schema_extra": extra or None, **limits}
    if alias is not None:
        kwargs["alias"] = alias
    if factory is not None:
        return Field(default_factory=factory, **kwargs)
    return Field(default, **kwargs)


_REFUSES = "DeepSpeed refuses unknown keys in {}"
_IGNORES = "DeepSpeed ignores it"

# ------------------------------------------------------------------------------------------ ZeRO


class OffloadParam(Section):
    """zero_optimization.offload_param: DeepSpeedZeroOffloadParamConfig (runtime/zero/offload_config.py)."""

    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("offload_param")

    device: Any = _f(help="Where parameters live between uses: 'cpu' memory or an 'nvme' drive "
                          "(ZeRO-Infinity); 'none' keeps them on the GPU")
    nvme_path: str | None = _f(None, "Folder on the NVMe drive for the parameter swap files (required for 'nvme')",
                               applies="device nvme")
    buffer_count: Any = _f(help="Number of buffers in the pool for swapping parameters to NVMe", applies="device nvme")
    buffer_size: Any = _f(help="Size of each NVMe parameter swap buffer, in elements", applies="device nvme")
    max_in_cpu: Any = _f(help="Parameter elements kept in CPU memory while offloading to NVMe",
                         applies="device nvme")
    pin_memory: Any = _f(help="Use page-locked CPU memory: faster GPU<->CPU copies; turn off only under a tight "
                              "memlock limit (ulimit -l)")


class OffloadOptimizer(Section):
    """zero_optimization.offload_optimizer: DeepSpeedZeroOffloadOptimizerConfig."""

    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("offload_optimizer")

    device: Any = _f(help="Where the optimizer state lives and the optimizer step runs: 'cpu' (ZeRO-Offload) "
                          "or 'nvme' (ZeRO-Infinity, stage 3); 'none' keeps it on the GPU")
    nvme_path: str | None = _f(None, "Folder on the NVMe drive for the optimizer-state swap files (required for "
                                     "'nvme')", applies="device nvme")
    buffer_count: Any = _f(help="Buffers for swapping optimizer state to NVMe: at least the states per parameter "
                                "(Adam: 4)", applies="device nvme")
    pin_memory: Any = _f(help="Use page-locked CPU memory: faster GPU<->CPU copies; turn off only under a tight "
                              "memlock limit (ulimit -l)")
    pipeline_read: Any = _f(help="Overlap reading the next optimizer tile from NVMe with the current step",
                            applies="device nvme")
    pipeline_write: Any = _f(help="Overlap writing the previous optimizer tile to NVMe with the current step",
                             applies="device nvme")
    fast_init: Any = _f(help="Faster optimizer initialisation when offloading to NVMe", applies="device nvme")
    ratio: Any = _f(help="Fraction of the optimizer state offloaded (partial offload below 1.0 needs stage 3)",
                    stages=(3,))
    super_offload: Any = _f(help="High-performance CPU offload for superchips (e.g. GH200)", stages=(3,))
    cpuadam_cores_perc: Any = _f(help="Fraction of CPU cores the CPU Adam step uses with super_offload",
                                 stages=(3,), applies="super_offload")


# zero/leaf_module_config.py DEFAULT_LEAF_MODULE_CLASSES
DEFAULT_LEAF_MODULE_CLASSES = (
    "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
    "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
    "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock",
)


class LeafModule(Section):
    """zero_optimization.leaf_module: DeepSpeedZeroLeafModuleConfig."""

    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("leaf_module")

    classes: Any = _f(help="Module classes (with package) ZeRO-3 fetches as a whole; the default lists the "
                           "Mixtral / Qwen2-MoE / Qwen3-MoE sparse MoE blocks")
    names: Any = _f(help="Module names ZeRO-3 fetches as a whole")
    name_suffixes: Any = _f(help="Module name endings ZeRO-3 fetches as a whole")


class ZeroOptimization(Section):
    """zero_optimization: DeepSpeedZeroConfig (runtime/zero/config.py)."""

    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("zero_optimization")
    # DeepSpeedConfigModel._process_deprecated_field: the old key fills the new one, and asserts
    # "Cannot provide deprecated parameter ... and replacing parameter ... together".
    DEPRECATED: ClassVar = {
        "cpu_offload": "offload_optimizer",
        "cpu_offload_param": "offload_param",
        "cpu_offload_use_pin_memory": "",  # set_new_param=False: only logged, no effect
        "stage3_gather_fp16_weights_on_model_save": "stage3_gather_16bit_weights_on_model_save",
    }
    DEPRECATED_CLASH: ClassVar = "DeepSpeed refuses the two together ('Cannot provide deprecated parameter ... and " \
                                 "replacing parameter ... together')"
    REMOVED: ClassVar = {
        "mics_shard_size": "MiCS ZeRO-3 sharding was removed from DeepSpeed; it refuses the key at start-up",
        "mics_hierarchical_params_gather": "MiCS ZeRO-3 sharding was removed from DeepSpeed; it refuses the key at "
                                           "start-up",
        "zeropp_loco_param": "LoCo-Zero++ was removed from DeepSpeed; remove the key to use ZeRO++ quantized "
                             "gradients without LoCo error feedback",
    }

    stage: Any = _f(help="ZeRO stage: 0 off, 1 partitions optimizer state, 2 also gradients, 3 also "
                         "parameters")
    contiguous_gradients: Any = _f(help="Copy gradients into one contiguous buffer as they are produced: less "
                                        "memory fragmentation in backward", stages=(1, 2, 3))
    reduce_scatter: Any = _f(help="Average gradients with reduce / reduce-scatter instead of all-reduce",
                             stages=(1, 2, 3))
    reduce_bucket_size: Any = _f(help="Elements reduced at a time: larger is faster, costs more GPU "
                                      "memory", auto=True, stages=(1, 2, 3))
    use_multi_rank_bucket_allreduce: Any = _f(help="Combine the reduce buckets of all ranks into one all-reduce "
                                                   "(helps small models on many GPUs)", stages=(1, 2))
    allgather_partitions: Any = _f(help="Legacy switch between allgather and broadcasts: DeepSpeed 0.19.8 reads "
                                        "it but no code uses it")
    allgather_bucket_size: Any = _f(help="Elements all-gathered at a time after the step: larger is faster, "
                                         "costs more GPU memory", stages=(1, 2))
    overlap_comm: Any = _f(help="Overlap gradient reduction with the backward pass (unset: on at stage 3, "
                                "off at stages 1-2); uses more GPU memory", stages=(1, 2, 3))
    compute_grad_norm: Any = _f(help="Compute the global gradient norm each step; false (stages 1-2 only) needs "
                                     "gradient_clipping 0 and no optimizer offload", stages=(1, 2))
    load_from_fp32_weights: Any = _f(help="Restore fp32 master weights from the checkpoint's fp32 copy (no "
                                          "precision loss) rather than from the 16-bit model", stages=(1, 2, 3))
    elastic_checkpoint: Any = _f(help="Legacy elastic checkpoints (stages 1-2); use Universal Checkpointing "
                                      "instead", stages=(1, 2))
    offload_param: OffloadParam | None = _f(None, "Move parameters to CPU memory or NVMe between uses (stage 3 "
                                                  "only)", stages=(3,))
    offload_optimizer: OffloadOptimizer | None = _f(None, "Move optimizer state and the optimizer step to the "
                                                          "CPU, or its state to NVMe (stages 1-3)", stages=(1, 2, 3))
    zenflow: dict[str, Any] | None = _f(None, "ZenFlow: asynchronous CPU updates of less important gradients "
                                              "(DeepSpeed's ZenFlowConfig; checked by DeepSpeed's own check)",
                                        stages=(1, 2, 3))
    sub_group_size: Any = _f(help="Parameter elements per optimizer-step tile (ZeRO-3 offload / "
                                  "Infinity): smaller uses less CPU/NVMe buffer memory", stages=(3,))
    cpu_offload: Any = _f(help='replaced by "offload_optimizer": {"device": "cpu"} (true offloaded the '
                          'optimizer state and step to the CPU)')
    cpu_offload_param: Any = _f(help='replaced by "offload_param": {"device": "cpu"} (true offloaded '
                                'the parameters to the CPU)')
    stage3_prefetch_bucket_size: Any = _f(help="Parameter elements fetched ahead of use: larger hides "
                                               "more latency, costs more GPU memory", auto=True,
                                          stages=(3,))
    stage3_param_persistence_threshold: Any = _f(help="Parameters smaller than this stay whole on every "
                                                      "GPU: less communication, more memory", auto=True,
                                                 stages=(3,))
    stage3_model_persistence_threshold: Any = _f(help="Upper bound on the elements kept whole by "
                                                      "stage3_param_persistence_threshold", stages=(3,))
    stage3_max_live_parameters: Any = _f(help="Parameter elements kept on a GPU before releasing: smaller "
                                              "uses less memory, communicates more", stages=(3,))
    stage3_max_reuse_distance: Any = _f(help="Keep a parameter if it is used again within this many "
                                             "elements: smaller uses less memory, communicates more",
                                        stages=(3,))
    stage3_gather_16bit_weights_on_model_save: Any = _f(help="Gather the partitioned weights into one "
                                                             "16-bit state dict when saving the model",
                                                        auto=True, stages=(3,))
    stage3_module_granularity_threshold: Any = _f(help="Fetch fine-grained modules (parameters per submodule below "
                                                       "this) as one unit: fewer hooks and allgathers", stages=(3,))
    stage3_use_all_reduce_for_fetch_params: Any = _f(help="Fetch module parameters with one all-reduce instead "
                                                          "of allgathers", stages=(3,))
    stage3_allgather_sequential: Any = _f(help="Gather parameters one by one without bucketing: less copying "
                                               "and peak memory", stages=(3,))
    ignore_unused_parameters: Any = _f(help="Carry on when some parameters get no gradient (dynamic networks); "
                                            "false stops with an error", stages=(1, 2))
    legacy_stage1: Any = _f(help="The pre-0.5.9 ZeRO-1 implementation: gone, true stops DeepSpeed at start-up",
                            stages=(1, 2))
    round_robin_gradients: Any = _f(help="Spread gradient copies to CPU across ranks (helps CPU offload with "
                                         "many accumulation steps or GPUs)", stages=(1, 2))
    parameter_alignment: Any = _f(help="Pad flat buffers so each parameter starts 16-byte aligned (costs "
                                       "memory)", stages=(1, 2))
    zero_hpz_partition_size: Any = _f(help="ZeRO++ hpZ: ranks in the secondary parameter partition (e.g. GPUs per "
                                           "node); 1 is off", stages=(3,))
    zero_quantized_weights: Any = _f(help="ZeRO++ qwZ: quantize weights for the allgather", stages=(3,))
    zero_quantized_nontrainable_weights: Any = _f(help="Store frozen weights quantized (saves memory, e.g. for "
                                                       "LoRA)", stages=(3,))
    zero_quantized_gradients: Any = _f(help="ZeRO++ qgZ: quantized gradient reduction (needs reduce_scatter)",
                                       stages=(3,))
    memory_efficient_linear: Any = _f(help="Memory-efficient linear layers under zero.Init", stages=(3,))
    pipeline_loading_checkpoint: Any = _f(help="Force loading the checkpoint in pipeline mode", stages=(3,))
    override_module_apply: Any = _f(help="Make nn.Module.apply gather partitioned parameters", stages=(3,))
    log_trace_cache_warnings: Any = _f(help="Log warnings from the parameter-fetch trace cache", stages=(3,))
    enable_sanity_checks: Any = _f(help="Internal ZeRO-3 sanity checks (slow; for debugging)", stages=(3,))
    save_muon_momentum_buffer_in_memory: Any = _f(help="Muon + NVMe offload: keep the momentum buffer in memory "
                                                       "instead of swapping it", stages=(3,))
    leaf_module: LeafModule = _f(help="Modules ZeRO-3 treats as leaves (fetched whole)", stages=(3,),
                                 factory=LeafModule)


# ------------------------------------------------------------------------------------------ precision


class FP16(Section):
    """fp16: DeepSpeedFP16Config (runtime/precision_config.py)."""

    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("fp16")

    enabled: Any = _f(help="Train in fp16 mixed precision with loss scaling", auto=True)
    auto_cast: Any = _f(help="Cast the model's floating-point inputs to fp16 automatically")
    loss_scale: Any = _f(help="0: dynamic loss scaling (recommended); a number > 0: that fixed (static) loss scale",
                         ge=0)
    initial_scale_power: Any = _f(help="Dynamic loss scaling starts at 2**initial_scale_power")
    loss_scale_window: Any = _f(help="Steps without overflow before the dynamic loss scale is raised", gt=0)
    hysteresis: Any = _f(help="Overflows tolerated before the dynamic loss scale is lowered")
    consecutive_hysteresis: Any = _f(help="Refill the hysteresis after every step without overflow")
    min_loss_scale: Any = _f(help="Lowest value the dynamic loss scale may fall to", gt=0)
    fp16_master_weights_and_grads: Any = _f(help="Keep master weights in fp16 instead of fp32 (ZeRO 1-3 with "
                                                 "DeepSpeedCPUAdam only)")


class BF16(Section):
    """bf16 (old name "bfloat16"): DeepSpeedBF16Config (runtime/precision_config.py)."""

    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("bf16")

    enabled: Any = _f(help="Train in bfloat16 mixed precision (no loss scaling needed)", auto=True)
    immediate_grad_update: Any = _f(help="Apply gradient updates immediately instead of delayed")
    check_grad_overflow: Any = _f(help="Skip the optimizer step when gradients overflow (inf/NaN)")
    bf16_master_weights_and_grads: Any = _f(help="Keep master weights and gradients in bf16 (ZeRO 1-3)")
    bf16_optimizer_states: Any = _f(help="Keep optimizer states in bf16 (needs bf16_master_weights_and_grads)")


class TorchAutocast(Section):
    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES

    enabled: bool = _f(False, "Use torch.autocast for mixed precision instead of DeepSpeed's fp16/bf16 modes")
    dtype: DtypeName | None = _f(None, "Lower-precision dtype autocast uses (bfloat16 or float16)")
    lower_precision_safe_modules: list[str] | None = _f(None, "Module classes (with package, e.g. "
                                                              "torch.nn.modules.linear.Linear) run in the lower "
                                                              "precision")


# ------------------------------------------------------------------------------------------ optimizer, scheduler


class Optimizer(Section):
    """optimizer: read with dict lookups (runtime/config.py get_optimizer_name / _params / _legacy_fusion)."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES
    OUTSIDE_SNAPSHOT: ClassVar = {"params": "read only when type is set (get_optimizer_params)"}

    type: Literal["Adam", "AdamW", "Adagrad", "Lamb", "Lion", "Muon", "MuAdam", "MuAdamW", "MuSGD"] | str | None = _f(
        None, "Optimizer DeepSpeed builds: its own (Adam, AdamW, Lamb, Lion, Adagrad, Muon...; any case) or a "
              "torch.optim class name (exact case)")
    params: dict[str, Any] | None = _f(None, "Keyword arguments for the optimizer: lr, betas, eps, weight_decay, ... "
                                             "(DeepSpeed extras: torch_adam, adam_w_mode)")
    legacy_fusion: bool = _f(False, "Legacy fused-optimizer path for fp16 (old configs only)")


class Scheduler(Section):
    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES
    OUTSIDE_SNAPSHOT: ClassVar = {"params": "read only when type is set (get_scheduler_params)"}

    type: Literal["WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"] | str | None = _f(
        None, "Learning-rate schedule: DeepSpeed's own or a torch.optim.lr_scheduler class name (exact case)")
    params: dict[str, Any] | None = _f(None, "Keyword arguments for the schedule (e.g. WarmupLR: warmup_min_lr, "
                                             "warmup_max_lr, warmup_num_steps)")


# ------------------------------------------------------------------------------------------ memory and I/O


class ActivationCheckpointing(Section):
    """activation_checkpointing: DeepSpeedActivationCheckpointingConfig (get_scalar_param lookups)."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES

    partition_activations: bool = _f(False, "Split checkpointed activations across model-parallel GPUs")
    cpu_checkpointing: bool = _f(False, "Keep checkpointed activations in CPU memory (needs partition_activations)")
    contiguous_memory_optimization: bool = _f(False, "Copy checkpoints into one contiguous buffer: less "
                                                     "fragmentation (needs number_checkpoints)")
    number_checkpoints: int | None = _f(None, "Total checkpoints per forward pass, for the contiguous buffer", gt=0)
    synchronize_checkpoint_boundary: bool = _f(False, "Synchronise the device at each checkpoint boundary")
    profile: bool = _f(False, "Log the time spent in activation checkpointing")


class Aio(Section):
    """aio: get_aio_config (runtime/swap_tensor/aio_config.py); only read for NVMe offload."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES
    DEPRECATED: ClassVar = {"thread_count": "intra_op_parallelism"}

    block_size: int = _f(1_048_576, "Bytes per NVMe read/write request", gt=0)
    queue_depth: int = _f(8, "NVMe requests in flight at once", gt=0)
    intra_op_parallelism: int = _f(1, "Threads splitting each NVMe read/write", gt=0)
    single_submit: bool = _f(False, "Submit requests one by one instead of as a batch")
    overlap_events: bool = _f(True, "Overlap submitting new requests with waiting for finished ones")
    use_gds: bool = _f(False, "GPUDirect Storage: NVMe straight to GPU memory (CUDA only)")


# ------------------------------------------------------------------------------------------ monitoring


class FlopsProfiler(Section):
    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES

    enabled: bool = _f(False, "Profile the model's FLOPs, latency and parameters once (also turns on "
                              "wall_clock_breakdown)")
    recompute_fwd_factor: float = _f(0.0, "Extra forward passes from activation recomputation, counted in the "
                                          "FLOPs (0.0 none, 1.0 full)", ge=0)
    profile_step: int = _f(1, "Training step at which the profile is taken", ge=1)
    module_depth: int = _f(-1, "Depth of the module tree to print (-1: all)")
    top_modules: int = _f(1, "Number of top modules shown in the aggregated profile", ge=1)
    detailed: bool = _f(True, "Print the per-module profile")
    output_file: str | None = _f(None, "File for the profile (unset: standard output)")


class TensorBoard(Section):
    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("tensorboard")

    enabled: Any = _f(help="Log training metrics to TensorBoard (needs the tensorboard package)")
    output_path: Any = _f(help="Folder for the logs (empty: under the launch directory)")
    job_name: Any = _f(help="Sub-folder name for this run inside output_path")


class Wandb(Section):
    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("wandb")

    enabled: Any = _f(help="Log training metrics to Weights & Biases (needs the wandb package)")
    group: Any = _f(help="W&B group the run belongs to")
    team: Any = _f(help="W&B team (entity)")
    project: Any = _f(help="W&B project")


class CsvMonitor(Section):
    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("csv_monitor")

    enabled: Any = _f(help="Write training metrics to local CSV files")
    output_path: Any = _f(help="Folder for the CSV files (empty: under the launch directory)")
    job_name: Any = _f(help="Sub-folder name for this run inside output_path")


class Comet(Section):
    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("comet")

    enabled: Any = _f(help="Log training metrics to Comet (needs the comet_ml package)")
    samples_log_interval: Any = _f(help="Send metrics every this many samples")
    project: Any = _f(help="Comet project (else COMET_PROJECT_NAME)")
    workspace: Any = _f(help="Comet workspace (else COMET_WORKSPACE)")
    api_key: Any = _f(help="Comet API key: a secret, better given as COMET_API_KEY than in the file")
    experiment_name: Any = _f(help="Name of the Comet experiment")
    experiment_key: Any = _f(help="Key of an existing experiment (32-50 letters and digits)")
    online: Any = _f(help="Send to the Comet server (unset: true); false stores the experiment offline")
    mode: Literal["get", "create", "get_or_create"] | None = _f(None, "Continue an experiment ('get'), always start "
                                                                      "one ('create'), or either (unset)")


class CommsLogger(Section):
    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("comms_logger")

    enabled: Any = _f(help="Log every collective communication call")
    prof_all: Any = _f(help="Profile all collective operations")
    prof_ops: Any = _f(help="Only these operations when prof_all is false (e.g. all_reduce)")
    verbose: Any = _f(help="Print each operation as it happens")
    debug: Any = _f(help="Add the calling function's name to each entry")


class TimersThroughput(Section):
    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("timers.throughput")

    enabled: Any = _f(help="Measure training throughput (samples/s)")
    synchronized: Any = _f(help="Synchronise the device for exact timings (costs some speed)")


class Timers(Section):
    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES

    throughput: TimersThroughput = _f(help="Throughput timer", factory=TimersThroughput)


# ------------------------------------------------------------------------------------------ checkpoints, data types


class ParallelWrite(Section):
    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES

    pipeline_stage: bool = _f(False, "Pipeline parallelism: each stage writes its own part of the checkpoint")


class Checkpoint(Section):
    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES

    tag_validation: Literal["Warn", "Ignore", "Fail"] | str = _f("Warn", "What to do when ranks save under "
                                                                         "different checkpoint tags (any case)")
    load_universal: bool = _f(False, "Load a Universal Checkpoint (e.g. after changing the number of GPUs)")
    use_node_local_storage: bool = _f(False, "Each node saves to its own disk instead of shared storage")
    parallel_write: ParallelWrite = _f(help="Parallel checkpoint writing", factory=ParallelWrite)
    checkpoint_serialization: bool = _f(True, "Serialize checkpoints with torch.save's zipfile format")
    writer: dict[str, Any] | None = _f(None, "Fast checkpoint writer: type (mock, python, fast), io_buffer_size, "
                                             "data_parallel, ...")


class DataTypes(Section):
    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES

    grad_accum_dtype: DtypeName | None = _f(None, "Dtype gradients are accumulated in (unset: the model's dtype)")
    param_dtype: DtypeName | None = _f(None, "Dtype of the model parameters; must agree with fp16/bf16 enabled")
    buffer_dtype: DtypeName | None = _f(None, "Dtype for module buffers (unset: as loaded)")
    keep_in_fp32_modules: list[str] | Auto = _f("auto", "Name patterns of modules kept in fp32 under fp16/bf16 "
                                                        "(\"auto\": DeepSpeed's choice)", auto=True)


class HybridEngine(Section):
    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = _REFUSES.format("hybrid_engine")

    enabled: Any = _f(help="DeepSpeed-Chat hybrid engine: switch between training and fast generation (RLHF)")
    max_out_tokens: Any = _f(help="Longest generation the inference cache holds")
    inference_tp_size: Any = _f(help="Tensor-parallel degree for generation")
    release_inference_cache: Any = _f(help="Free the inference cache after each generation")
    pin_parameters: Any = _f(help="Pin the gathered parameters in memory during generation")
    tp_gather_partition_size: Any = _f(help="Layers gathered at once for tensor-parallel generation")
    enable_cuda_graph: Any = _f(help="Capture generation in CUDA graphs")


# ------------------------------------------------------------------------------------------ the whole file


class DeepSpeedConfig(Section):
    """The top level of ds_config.json: read key by key with get_scalar_param (runtime/config.py), so DeepSpeed
    ignores a key it does not know."""

    UNKNOWN: ClassVar = "warning"
    UNKNOWN_WHY: ClassVar = _IGNORES
    # precision_config.get_bfloat16_config: "bfloat16" is read only when "bf16" is absent.
    DEPRECATED: ClassVar = {"bfloat16": "bf16"}
    OUTSIDE_SNAPSHOT: ClassVar = {
        "sequence_parallel_size": "read by DeepSpeedConfig only once torch.distributed is initialised, and by the "
                                  "engine (the snapshot's probe runs without a process group)",
    }
    # runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS: DeepSpeedConfigError at start-up.
    REMOVED: ClassVar = {
        "amp": "NVIDIA Apex AMP was removed from DeepSpeed; use fp16, bf16 or torch_autocast (DeepSpeed refuses "
               "the key at start-up)",
        "nebula": "Nebula checkpointing was removed from DeepSpeed (it refuses the key at start-up)",
        "compression_training": "the compression library was removed from DeepSpeed (it refuses the key at "
                                "start-up)",
        "quantize_training": "MoQ / quantize_training was removed from DeepSpeed (it refuses the key at start-up)",
        "sparse_gradients": "sparse embedding gradients from a flag were removed from DeepSpeed (an embedding "
                            "built with sparse=True still works); it refuses the key at start-up",
        "eigenvalue": "eigenvalue-based MoQ was removed from DeepSpeed (it refuses the key at start-up)",
        "sparse_attention": "Sparse Attention was removed from DeepSpeed (it refuses the key at start-up)",
        "elasticity": "elastic training was removed from DeepSpeed: set train_batch_size / "
                      "train_micro_batch_size_per_gpu / gradient_accumulation_steps directly",
        "graph_harvesting": "graph harvesting was removed from DeepSpeed (it refuses the key at start-up)",
        "curriculum_learning": "the top-level curriculum_learning was removed from DeepSpeed: use "
                               "data_efficiency.data_sampling.curriculum_learning",
        "progressive_layer_drop": "Progressive Layer Dropping was removed from DeepSpeed (it refuses the key at "
                                  "start-up)",
    }

    # batch size: DeepSpeed needs train_batch_size == micro x accumulation x world size and derives a missing one
    train_batch_size: int | Auto | None = _f(None, "Samples per optimizer step over all GPUs = micro batch x "
                                                   "accumulation steps x GPUs (unset: derived from the other two)",
                                             auto=True, gt=0)
    train_micro_batch_size_per_gpu: int | Auto | None = _f(None, "Samples per forward/backward pass on one GPU "
                                                                 "(unset: derived from the other two)",
                                                           auto=True, gt=0)
    gradient_accumulation_steps: int | Auto | None = _f(None, "Micro batches accumulated before each optimizer "
                                                              "step (unset: derived, or 1)", auto=True, gt=0)
    # precision
    fp16: FP16 = _f(help="fp16 mixed precision with loss scaling", factory=FP16)
    bf16: BF16 = _f(help="bfloat16 mixed precision (old name: bfloat16)", factory=BF16)
    torch_autocast: TorchAutocast = _f(help="torch.autocast-based mixed precision", factory=TorchAutocast)
    data_types: DataTypes = _f(help="Dtypes for gradient accumulation, parameters and buffers", factory=DataTypes)
    communication_data_type: Literal["fp32", "fp16", "bf16"] | str | None = _f(
        None, "Dtype for gradient communication (any case; unset: the gradients' own dtype)")
    seq_parallel_communication_data_type: Literal["fp32", "fp16", "bf16"] | str = _f(
        "fp32", "Dtype for sequence-parallel communication (any case)")
    # optimizer
    optimizer: Optimizer = _f(help="Optimizer DeepSpeed builds (unset: the script, or the HF Trainer, passes its "
                                   "own)", factory=Optimizer)
    scheduler: Scheduler = _f(help="Learning-rate schedule DeepSpeed builds (unset: none, or the script's)",
                              factory=Scheduler)
    gradient_clipping: float | Auto = _f(1.0, "Clip the global gradient norm to this value (0: no clipping)",
                                         auto=True)
    prescale_gradients: bool = _f(False, "Divide gradients by the number of GPUs before all-reduce instead of "
                                         "after")
    gradient_predivide_factor: float = _f(1.0, "Divide gradients by this before all-reduce and by world size / "
                                               "this after (not with ZeRO 2-3 reduce_scatter)", gt=0)
    gradient_allreduce_op: Literal["mean", "sum"] | str = _f("mean", "Average ('mean') or add up ('sum', not with "
                                                                     "ZeRO-3) gradients across GPUs (any case)")
    zero_allow_untested_optimizer: bool = _f(False, "Allow ZeRO with an optimizer DeepSpeed has not tested (else "
                                                    "it stops at start-up)")
    zero_force_ds_cpu_optimizer: bool = _f(True, "With optimizer offload, refuse a script's optimizer unless it is "
                                                 "DeepSpeedCPUAdam / DeepSpeedCPULion")
    # ZeRO, offload, memory
    zero_optimization: ZeroOptimization = _f(help="ZeRO: partition optimizer state, gradients and parameters "
                                                  "across GPUs", factory=ZeroOptimization)
    aio: Aio | None = _f(help="Asynchronous I/O settings for NVMe offload (ZeRO-Infinity); null: the defaults",
                         factory=Aio)
    activation_checkpointing: ActivationCheckpointing = _f(help="DeepSpeed activation checkpointing (with "
                                                                "deepspeed.checkpointing)",
                                                           factory=ActivationCheckpointing)
    # logging and monitoring
    steps_per_print: int | None = _f(None, "Print training progress every this many steps (unset: never)", gt=0)
    wall_clock_breakdown: bool = _f(False, "Time forward, backward and step on every step (slows training a "
                                           "little)")
    memory_breakdown: bool = _f(False, "Print memory usage at each stage of the step")
    dump_state: bool = _f(False, "Print DeepSpeed's state after initialisation")
    flops_profiler: FlopsProfiler = _f(help="One-off FLOPs / latency profile of the model",
                                       factory=FlopsProfiler)
    tensorboard: TensorBoard = _f(help="TensorBoard monitor", factory=TensorBoard)
    wandb: Wandb = _f(help="Weights & Biases monitor", factory=Wandb)
    csv_monitor: CsvMonitor = _f(help="CSV file monitor", factory=CsvMonitor)
    comet: Comet = _f(help="Comet monitor", factory=Comet)
    comms_logger: CommsLogger = _f(help="Communication logger (present: enabled unless enabled is false)",
                                   factory=CommsLogger)
    timers: Timers = _f(help="Timers", factory=Timers)
    log_level: Literal["debug", "info", "warning", "error", "critical"] | str | None = _f(
        None, "DeepSpeed's log level (any case; unset: DeepSpeed's default)")
    # checkpoints
    checkpoint: Checkpoint = _f(help="Checkpoint saving and loading", factory=Checkpoint)
    # other features: DeepSpeed's own check looks inside these
    pipeline: dict[str, Any] | None = _f(None, "Pipeline-parallel engine options (stages, partition, "
                                               "activation_checkpoint_interval, ...)")
    hybrid_engine: HybridEngine = _f(help="DeepSpeed-Chat hybrid engine", factory=HybridEngine)
    compile: dict[str, Any] | None = _f(None, "DeepCompile options (deepcompile, offload_*, passes, ...)")
    tensor_parallel: dict[str, Any] | None = _f(None, "AutoTP tensor-parallel training (autotp_size, ...)")
    expert_parallel: dict[str, Any] | None = _f(None, "AutoEP expert parallelism for MoE models")
    autotuning: dict[str, Any] | None = _f(None, "DeepSpeed Autotuner options")
    data_efficiency: dict[str, Any] | None = _f(None, "Data efficiency: curriculum learning, data sampling, "
                                                      "random-LTD")
    weight_quantization: dict[str, Any] | None = _f(None, "Weight quantization options")
    datastates_ckpt: Any = _f(None, "DataStates asynchronous checkpointing options")
    sequence_parallel_size: int | None = _f(None, "Ulysses sequence-parallel degree (divides the data-parallel "
                                                  "world size)", gt=0)
    use_data_before_expert_parallelism: bool = _f(False, "Lay out data-parallel groups before expert-parallel "
                                                         "ones")
    managed_gradient_accumulation: bool = _f(True, "DeepSpeed decides when to reduce gradients during "
                                                   "accumulation (false: the script does)")
    dataloader_drop_last: bool = _f(False, "Drop the last incomplete batch of deepspeed's data loader")
    disable_python_gc: bool = _f(False, "Turn off Python's cyclic garbage collector during training")
    disable_allgather: bool = _f(False, "Legacy switch: DeepSpeed 0.19.8 reads it but no code uses it")
    vocabulary_size: int | None = _f(None, "Vocabulary size: DeepSpeed warns when it is not a multiple of 8 "
                                           "(tensor cores)", gt=0)


# Sections parsed by a DeepSpeedConfigModel: unknown keys refused and "auto" values dropped (default used).
PYDANTIC_SECTIONS = (ZeroOptimization, OffloadParam, OffloadOptimizer, LeafModule, FP16, BF16, TensorBoard, Wandb,
                     CsvMonitor, Comet, CommsLogger, TimersThroughput, HybridEngine)

# Key names, aliases, the unknown-key policy and (in DeepSpeed's pydantic sections) types and defaults come from the
# snapshot of the installed DeepSpeed (snapshot/deepspeed.json, regenerated by snapshot_gen.py).
bind_snapshot(DeepSpeedConfig, "deepspeed")

"""Cross-field rules for the DeepSpeed JSON: what DeepSpeed accepts silently, or refuses only inside each rank.

Each rule cites the DeepSpeed 0.19.8 code that behaves so. "Stops at start-up" means `deepspeed.initialize`
raises on every rank (after the model is built and the processes have met); "ignores" means DeepSpeed runs without
a word and the setting has no effect.

Size (~650 lines): ~28 independent cross-field rules, each with its citation; a list read rule by rule, not a flow.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from traindeck.backend.config import auto_fill
from traindeck.backend.config.deepspeed_schema import (
    ANY_CASE,
    DEEPSPEED_OPTIMIZERS,
    DEEPSPEED_SCHEDULERS,
    PYDANTIC_SECTIONS,
    TORCH_OPTIMIZERS,
    TORCH_SCHEDULERS,
    DeepSpeedConfig,
    OffloadOptimizer,
    ZeroOptimization,
)
from traindeck.backend.config.schema import FieldSpec, fields_of
from traindeck.backend.config.validate import Finding, RuleContext, as_dict, rule, suggest, whole_number

ZERO = "zero_optimization"
OFFLOADS = ("offload_param", "offload_optimizer")
# runtime/zero/utils.py ZERO_SUPPORTED_OPTIMIZERS, by the config name that builds each (engine._configure_basic_
# optimizer): adam/adamw -> FusedAdam or DeepSpeedCPUAdam, adagrad -> torch Adagrad or DeepSpeedCPUAdagrad,
# lion -> FusedLion or DeepSpeedCPULion, muon -> MuonWithAuxAdam. lamb (FusedLamb), the mup optimizers and every
# other torch.optim class are "untested" for ZeRO.
ZERO_TESTED = ("adam", "adamw", "adagrad", "lion", "muon")
# aio defaults (runtime/swap_tensor/constants.py) used when the section is absent.
AIO_DEFAULTS = ("block_size 1048576, queue_depth 8, intra_op_parallelism 1, single_submit false, "
                "overlap_events true, use_gds false")




def _number(value: Any) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)


def _stage(ds: dict[str, Any]) -> int | None:
    """The ZeRO stage in effect (0 when zero_optimization is absent); None when it is not a valid stage."""
    zero = ds.get(ZERO, {})
    if not isinstance(zero, dict):
        return None
    stage = whole_number(zero.get("stage", 0))
    return stage if stage in (0, 1, 2, 3) else None


def _bf16(ds: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The bf16 section DeepSpeed reads: "bf16", else the old "bfloat16" (precision_config.get_bfloat16_config)."""
    if "bf16" in ds or "bfloat16" not in ds:
        return "bf16", as_dict(ds.get("bf16"))
    return "bfloat16", as_dict(ds.get("bfloat16"))


def _device(zero: dict[str, Any], which: str) -> str | None:
    """'cpu' / 'nvme' when `which` offloads (also via the deprecated cpu_offload* flags), else None."""
    section = zero.get(which)
    if isinstance(section, dict) and section.get("device") in ("cpu", "nvme"):
        return str(section["device"])
    old = {"offload_param": "cpu_offload_param", "offload_optimizer": "cpu_offload"}[which]
    if zero.get(old) is True and which not in zero:
        return "cpu"
    return None


def _offload_path(zero: dict[str, Any], which: str) -> tuple[str, ...]:
    if which in zero:
        return (ZERO, which, "device") if "device" in as_dict(zero[which]) else (ZERO, which)
    return (ZERO, {"offload_param": "cpu_offload_param", "offload_optimizer": "cpu_offload"}[which])


def _stages_words(stages: tuple[int, ...]) -> str:
    if len(stages) == 1:
        return f"stage {stages[0]}"
    return "stages " + ", ".join(map(str, stages[:-1])) + f" and {stages[-1]}"


# ------------------------------------------------------------------------------------------ ZeRO and offload


@rule("deepspeed")
def offload_param_below_stage3(ctx: RuleContext) -> Iterable[Finding]:
    """offload_param is passed only to the stage-3 optimizer and zero.Init (engine._configure_zero_optimizer):
    stages 1-2 never look at it."""
    ds, stage = ctx.data, _stage(ctx.data)
    zero = as_dict(ds.get(ZERO))
    device = _device(zero, "offload_param")
    if device and stage is not None and stage < 3:
        yield ("warning", _offload_path(zero, "offload_param"),
               f"offload_param works only at ZeRO stage 3: at stage {stage} DeepSpeed ignores it without a word and "
               f"the parameters stay on the GPU; set \"stage\": 3 or remove offload_param")


@rule("deepspeed")
def offload_optimizer_needs_zero(ctx: RuleContext) -> Iterable[Finding]:
    """Stage 0: engine.zero_use_cpu_optimizer() looks at offload_optimizer whatever the stage, so DeepSpeed builds
    DeepSpeedCPUAdam (or refuses the script's optimizer) while nothing is partitioned and moved to the CPU; on GPUs
    the first step fails in cpu_adam.py. Stages 1-2: stage_1_and_2.py treats any device but 'none' as CPU memory."""
    ds, stage = ctx.data, _stage(ctx.data)
    zero = as_dict(ds.get(ZERO))
    device = _device(zero, "offload_optimizer")
    if not device or stage is None:
        return
    where = _offload_path(zero, "offload_optimizer")
    if stage == 0:
        yield ("error", where,
               "offload_optimizer needs ZeRO stage 1, 2 or 3: at stage 0 nothing is partitioned to move to the CPU, "
               "yet DeepSpeed still builds its CPU optimizer (or refuses your script's one), so on GPUs training "
               "stops at the first step (\"CPUAdam param is on cuda:0 and must be 'cpu'\"); set a stage >= 1 or "
               "remove offload_optimizer")
    elif device == "nvme" and stage in (1, 2):
        yield ("warning", where,
               f"at ZeRO stage {stage} 'nvme' works like 'cpu': the optimizer state stays in CPU memory and "
               f"nvme_path is not used; offloading to NVMe (ZeRO-Infinity) needs stage 3")


@rule("deepspeed")
def partial_offload_needs_stage3(ctx: RuleContext) -> Iterable[Finding]:
    """zero/config.py offload_ratio_check: assert stage == 3 when offload_optimizer.ratio < 1."""
    zero = as_dict(ctx.data.get(ZERO))
    ratio = _number(as_dict(zero.get("offload_optimizer")).get("ratio"))
    stage = _stage(ctx.data)
    if ratio is not None and ratio < 1.0 and stage is not None and stage != 3:
        yield ("error", (ZERO, "offload_optimizer", "ratio"),
               f"a partial offload (ratio {ratio:g}) needs ZeRO stage 3: DeepSpeed refuses it at stage {stage} "
               f"(\"Partial offloading only supported for ZeRO Stage 3.\")")


@rule("deepspeed")
def nvme_offload_settings(ctx: RuleContext) -> Iterable[Finding]:
    """nvme without nvme_path: os.path.join(None, ...) in the swappers, or partition_parameters' assert.
    nvme without "aio": get_aio_config returns AIO_DEFAULT_DICT."""
    ds, stage = ctx.data, _stage(ctx.data)
    zero = as_dict(ds.get(ZERO))
    used = []
    for which in OFFLOADS:
        section = as_dict(zero.get(which))
        if section.get("device") != "nvme":
            continue
        path = section.get("nvme_path")
        if not isinstance(path, str) or not path.strip():
            yield ("error", (ZERO, which, "device"),
                   f"{which} to 'nvme' needs nvme_path (a folder on the NVMe drive): without it DeepSpeed fails "
                   f"when it creates the swap files")
        if stage == 3:
            used.append(which)
    if used and ds.get("aio") is None:
        yield ("warning", (ZERO, used[0], "device"),
               f"NVMe offload without an \"aio\" section: DeepSpeed uses its defaults ({AIO_DEFAULTS}); "
               f"`ds_nvme_tune` measures the values that suit your drive")


@rule("deepspeed")
def stage_specific_keys(ctx: RuleContext) -> Iterable[Finding]:
    """Keys only one group of ZeRO stages reads (the stage-1/2 optimizer or the stage-3 one): a value other than
    DeepSpeed's default is silently without effect at another stage. Offload sections have their own rules."""
    zero = ctx.data.get(ZERO)
    stage = _stage(ctx.data)
    if not isinstance(zero, dict) or stage is None:
        return
    sections: list[tuple[tuple[str, ...], dict[str, Any], dict[str, FieldSpec]]] = [
        ((ZERO,), zero, fields_of(ZeroOptimization))]
    if stage > 0 and isinstance(zero.get("offload_optimizer"), dict):
        sections.append(((ZERO, "offload_optimizer"), zero["offload_optimizer"], fields_of(OffloadOptimizer)))
    for path, data, specs in sections:
        for key, value in data.items():
            spec = specs.get(str(key))
            if spec is None or not spec.stages or key in OFFLOADS or key == "ratio" or stage in spec.stages:
                continue
            if _is_default(spec, value):
                continue
            if stage == 0:
                text = f"ZeRO is off (stage 0): '{key}' has no effect"
            else:
                text = (f"'{key}' is used only at ZeRO {_stages_words(spec.stages)}: DeepSpeed ignores it at "
                        f"stage {stage}")
            yield ("warning", path + (key,), text)


def _is_default(spec: FieldSpec, value: Any) -> bool:
    if spec.kind == "section" and spec.section is not None:
        if not isinstance(value, dict):
            return False
        inner = fields_of(spec.section)
        return all(k in inner and _is_default(inner[k], v) for k, v in value.items())
    if value is None or isinstance(value, bool) != isinstance(spec.default, bool):
        return value is None and spec.default is None
    return bool(value == spec.default)


@rule("deepspeed")
def zero_start_up_refusals(ctx: RuleContext) -> Iterable[Finding]:
    """Combinations DeepSpeed's ZeRO code asserts against when it builds the optimizer (stage_1_and_2.py,
    stage3.py, zero/config.py validators, engine._configure_zero_optimizer)."""
    ds, stage = ctx.data, _stage(ctx.data)
    zero = as_dict(ds.get(ZERO))
    if stage is None:
        return
    reduce_scatter = zero.get("reduce_scatter", True) is not False
    if zero.get("legacy_stage1") is True and stage in (1, 2):
        yield ("error", (ZERO, "legacy_stage1"),
               "the old ZeRO-1 implementation is gone: DeepSpeed stops at start-up (\"The deprecated version of ZeRO "
               "Stage 1 is not supported in deepspeed >= 0.5.9\"); remove legacy_stage1")
    if zero.get("compute_grad_norm") is False:
        if stage not in (1, 2):
            yield ("error", (ZERO, "compute_grad_norm"),
                   f"compute_grad_norm false works only at ZeRO stages 1 and 2: DeepSpeed refuses it at stage {stage}")
        else:
            clip = _number(ds.get("gradient_clipping", 1.0))
            if clip is None or clip > 0:
                yield ("error", (ZERO, "compute_grad_norm"),
                       "compute_grad_norm false needs \"gradient_clipping\": 0 (DeepSpeed's default is 1.0): "
                       "DeepSpeed stops at start-up otherwise")
            if _device(zero, "offload_optimizer"):
                yield ("error", (ZERO, "compute_grad_norm"),
                       "compute_grad_norm false does not work with offload_optimizer: DeepSpeed stops at start-up")
    factor = _number(ds.get("gradient_predivide_factor", 1.0))
    if factor is not None and factor != 1.0 and stage >= 2 and reduce_scatter:
        yield ("error", ("gradient_predivide_factor",),
               f"gradient_predivide_factor {factor:g} does not work at ZeRO stage {stage} with reduce_scatter (on by "
               f"default): DeepSpeed stops at start-up; use 1.0 or set \"reduce_scatter\": false")
    if ds.get("prescale_gradients") is True and stage == 3 and reduce_scatter:
        yield ("error", ("prescale_gradients",),
               "prescale_gradients does not work at ZeRO stage 3 with reduce_scatter (on by default): DeepSpeed stops "
               "at start-up (\"pre-scale gradients is not yet supported with ZeRO-3 with reduce scatter enabled\")")
    op = ds.get("gradient_allreduce_op")
    if isinstance(op, str) and op.lower() == "sum" and stage == 3:
        yield ("error", ("gradient_allreduce_op",),
               "gradient_allreduce_op 'sum' does not work with ZeRO stage 3: DeepSpeed stops at start-up")
    if zero.get("zero_quantized_gradients") is True and stage == 3 and not reduce_scatter:
        yield ("error", (ZERO, "zero_quantized_gradients"),
               "zero_quantized_gradients needs reduce_scatter: DeepSpeed stops at start-up with \"reduce_scatter\": "
               "false")
    if zero.get("contiguous_gradients") is False and stage in (1, 2) and _device(zero, "offload_optimizer"):
        yield ("warning", (ZERO, "contiguous_gradients"),
               "contiguous_gradients false has no effect with offload_optimizer at stages 1-2: DeepSpeed turns it "
               "back on (CPU offload needs contiguous gradients)")


# ------------------------------------------------------------------------------------------ precision


@rule("deepspeed")
def precision(ctx: RuleContext) -> Iterable[Finding]:
    ds, stage = ctx.data, _stage(ctx.data)
    fp16 = as_dict(ds.get("fp16"))
    bf16_key, bf16 = _bf16(ds)
    if fp16.get("enabled") is True and bf16.get("enabled") is True:
        yield ("error", (bf16_key, "enabled"),
               "fp16 and bf16 are both enabled: DeepSpeed stops at start-up (\"bfloat16 and fp16 modes cannot be "
               "simultaneously enabled\"); keep one")
    scale = _number(fp16.get("loss_scale"))
    if fp16.get("enabled") in (True, "auto") and scale is not None and scale > 0:
        yield ("warning", ("fp16", "loss_scale"),
               f"loss_scale {scale:g} is a fixed (static) loss scale: dynamic loss scaling is off, so "
               f"initial_scale_power, loss_scale_window, hysteresis, consecutive_hysteresis and min_loss_scale have "
               f"no effect; 0 (the default) scales dynamically")
    if stage == 0:
        for path, section in ((("fp16", "fp16_master_weights_and_grads"), fp16),
                              ((bf16_key, "bf16_master_weights_and_grads"), bf16),
                              ((bf16_key, "bf16_optimizer_states"), bf16)):
            if section.get(path[1]) is True:
                yield ("error", path, f"'{path[-1]}' needs ZeRO stage 1, 2 or 3: DeepSpeed stops at start-up at "
                                      f"stage 0")
    if bf16.get("bf16_optimizer_states") is True and bf16.get("bf16_master_weights_and_grads") is not True:
        yield ("error", (bf16_key, "bf16_optimizer_states"),
               "bf16_optimizer_states needs \"bf16_master_weights_and_grads\": true: DeepSpeed stops at start-up")
    model = "fp16" if fp16.get("enabled") is True else "bf16" if bf16.get("enabled") is True else "fp32"
    types = as_dict(ds.get("data_types"))
    param = _dtype(types.get("param_dtype"))
    if param is not None and param != model and "auto" not in (fp16.get("enabled"), bf16.get("enabled")):
        yield ("error", ("data_types", "param_dtype"),
               f"param_dtype {types['param_dtype']!r} disagrees with the precision in effect ({model}): DeepSpeed "
               f"stops at start-up; set the matching fp16/bf16 \"enabled\" or remove param_dtype")
    accum = _dtype(types.get("grad_accum_dtype"))
    if (accum is not None and accum != model and stage == 0
            and "auto" not in (fp16.get("enabled"), bf16.get("enabled"))):
        yield ("error", ("data_types", "grad_accum_dtype"),
               f"without ZeRO (stage 0) DeepSpeed cannot accumulate {model} gradients in {accum}: it stops when it "
               f"sets up the optimizer (\"unsupported mix of model_dtype and grad_accum_dtype\"); use stage >= 1 or "
               f"remove grad_accum_dtype")


def _dtype(name: Any) -> str | None:
    """DeepSpeed's DtypeEnum spellings, reduced to fp16 / bf16 / fp32 (None: unset or not a dtype name)."""
    if not isinstance(name, str):
        return None
    return {"fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
            "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
            "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32"}.get(name)


# ------------------------------------------------------------------------------------------ optimizer, scheduler


def optimizer_kind(name: str) -> str | None:
    """How DeepSpeed builds an optimizer type: "deepspeed" (its own name, any case), "torch" (a torch.optim class,
    exact case) or None (DeepSpeed stops: no such optimizer)."""
    if name.lower() in DEEPSPEED_OPTIMIZERS:
        return "deepspeed"
    return "torch" if name in TORCH_OPTIMIZERS else None


@rule("deepspeed")
def optimizer_rules(ctx: RuleContext) -> Iterable[Finding]:
    ds, stage = ctx.data, _stage(ctx.data)
    optimizer = as_dict(ds.get("optimizer"))
    name = optimizer.get("type")
    zero = as_dict(ds.get(ZERO))
    if isinstance(name, str):
        kind = optimizer_kind(name)
        if kind is None:
            pool = [*TORCH_OPTIMIZERS, "Lamb", "Lion", "MuAdam", "MuAdamW", "MuSGD"]
            hint = suggest(name, pool)
            yield ("error", ("optimizer", "type"),
                   f"DeepSpeed has no optimizer '{name}': it stops at start-up. Its own names (any case): "
                   f"{', '.join(DEEPSPEED_OPTIMIZERS)}; other names must be a torch.optim class spelled exactly"
                   + (f"; did you mean '{hint}'?" if hint else ""))
        elif (stage is not None and stage >= 1 and name.lower() not in ZERO_TESTED
              and ds.get("zero_allow_untested_optimizer") is not True):
            yield ("error", ("optimizer", "type"),
                   f"DeepSpeed has not tested ZeRO with '{name}' and stops at start-up (\"You are using an untested "
                   f"ZeRO Optimizer\"); add \"zero_allow_untested_optimizer\": true, or use Adam, AdamW, Adagrad, "
                   f"Lion or Muon")
    params = optimizer.get("params")
    if isinstance(params, dict) and "max_grad_norm" in params:
        yield ("error", ("optimizer", "params", "max_grad_norm"),
               "DeepSpeed refuses max_grad_norm as an optimizer parameter and stops at start-up; use the top-level "
               "\"gradient_clipping\" instead")
    # A script's own optimizer with offload (engine._configure_optimizer): refused unless DeepSpeedCPUAdam/Lion.
    # accelerate (and the HF Trainer through it) converts a torch optimizer to DeepSpeedCPUAdam for offload
    # (Accelerator._prepare_deepspeed, map_pytorch_optim_to_deepspeed). A config with "auto" values is written for
    # them, so only a plain script (said, or unknown and no "auto") hears this.
    integration = ctx.hf_trainer is True or (ctx.hf_trainer is None and ctx.consumer != "plain" and (
        ctx.consumer is not None or next(auto_fill.auto_paths(ds), None) is not None))
    if (stage is not None and stage >= 1 and _device(zero, "offload_optimizer") and not isinstance(name, str)
            and ds.get("zero_force_ds_cpu_optimizer", True) is not False and not integration):
        text = ("with offload_optimizer and no optimizer in this file, the optimizer comes from the script: DeepSpeed "
                "refuses it at start-up (\"You are using ZeRO-Offload with a client provided optimizer\") unless it "
                "is deepspeed.ops.adam.DeepSpeedCPUAdam (or DeepSpeedCPULion); define \"optimizer\" here or set "
                "\"zero_force_ds_cpu_optimizer\": false (a slower CPU step)")
        if ctx.hf_trainer is None:
            text = "in a plain DeepSpeed script (accelerate and the HF Trainer convert the optimizer for you): " + text
        yield ("warning", _offload_path(zero, "offload_optimizer"), text)


@rule("deepspeed")
def scheduler_type(ctx: RuleContext) -> Iterable[Finding]:
    """engine._scheduler_from_config: getattr(lr_schedules, name), else torch.optim.lr_scheduler - exact case."""
    name = as_dict(ctx.data.get("scheduler")).get("type")
    if isinstance(name, str) and name not in DEEPSPEED_SCHEDULERS + TORCH_SCHEDULERS:
        hint = suggest(name, DEEPSPEED_SCHEDULERS + TORCH_SCHEDULERS)
        yield ("error", ("scheduler", "type"),
               f"DeepSpeed does not know the scheduler '{name}' and stops at start-up (exact spelling needed: "
               f"{', '.join(DEEPSPEED_SCHEDULERS)} or a torch.optim.lr_scheduler class)"
               + (f"; did you mean '{hint}'?" if hint else ""))


@rule("deepspeed")
def gradient_clipping(ctx: RuleContext) -> Iterable[Finding]:
    value = _number(ctx.data.get("gradient_clipping"))
    if value is not None and value < 0:
        yield ("warning", ("gradient_clipping",),
               f"gradient_clipping {value:g}: DeepSpeed clips only when it is > 0, so a negative value silently "
               f"turns clipping off; write 0 if that is what you mean")


@rule("deepspeed")
def choices_ignoring_case(ctx: RuleContext) -> Iterable[Finding]:
    """Keys DeepSpeed lower-/upper-cases before comparing: any case is fine, a misspelling stops it at start-up."""
    for path in ANY_CASE:
        section: Any = DeepSpeedConfig
        value: Any = ctx.data
        spec: FieldSpec | None = None
        for key in path:
            if not isinstance(value, dict) or key not in value or section is None:
                value = None
                break
            spec = fields_of(section)[key]
            value, section = value[key], spec.section
        if not isinstance(value, str) or spec is None:
            continue
        allowed = [c for c in spec.choices if isinstance(c, str)]
        if value.lower() not in [c.lower() for c in allowed]:
            hint = suggest(value, allowed)
            yield ("error", path,
                   f"{value!r} is not allowed: expected one of {', '.join(map(repr, allowed))} (any case); DeepSpeed "
                   f"stops at start-up" + (f"; did you mean '{hint}'?" if hint else ""))


# ------------------------------------------------------------------------------------------ batch size


@rule("deepspeed")
def batch_size(ctx: RuleContext) -> Iterable[Finding]:
    """runtime/config.py _set_batch_related_parameters (derives the missing value with floor division) and
    _batch_assertion (train_batch_size == micro x accumulation x world size, every value > 0)."""
    ds = ctx.data
    keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    raw = [ds.get(k) for k in keys]
    if any(v is not None and whole_number(v) is None for v in raw):
        return  # "auto" or a wrong type: the auto rule / the value check speak
    t, m, g = (whole_number(v) for v in raw)
    if any(v is not None and v <= 0 for v in (t, m, g)):
        return  # out of range: the value check speaks
    ws = ctx.world_size
    sp = whole_number(ds.get("sequence_parallel_size"))
    if ws is not None and sp and sp > 1 and ws % sp == 0:
        ws //= sp  # DeepSpeedConfig: world size / sequence_parallel_size
    procs = "process" if ws == 1 else "processes"
    where = next(((k,) for k, v in zip(keys, raw, strict=True) if v is not None), ())
    if t is None and m is None:
        text = ("neither train_batch_size nor train_micro_batch_size_per_gpu is set: DeepSpeed stops at start-up "
                "(\"Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided\")")
        yield ("error" if ctx.hf_trainer is False else "warning", where,
               text + ("; set one of them" if ctx.hf_trainer is False else
                       "; set one of them (\"auto\" when the HF Trainer / accelerate fills it in)"))
        return
    if t is not None and m is not None and g is not None:
        if ws is not None:
            if t != m * g * ws:
                yield ("error", ("train_batch_size",),
                       f"train_batch_size {t} != train_micro_batch_size_per_gpu {m} x gradient_accumulation_steps {g}"
                       f" x {ws} {procs} = {m * g * ws}: DeepSpeed stops at start-up on every rank (\"Check batch "
                       f"related parameters\"); set train_batch_size to {m * g * ws}, or leave it out and DeepSpeed "
                       f"derives it")
        elif t % (m * g):
            yield ("error", ("train_batch_size",),
                   f"train_batch_size {t} is not train_micro_batch_size_per_gpu {m} x gradient_accumulation_steps "
                   f"{g} x any number of processes: DeepSpeed stops at start-up (\"Check batch related "
                   f"parameters\"); leave train_batch_size out and DeepSpeed derives it")
        else:
            n = t // (m * g)
            yield ("warning", ("train_batch_size",),
                   f"train_batch_size {t} = {m} x {g} x processes holds only with {n} "
                   f"{'process' if n == 1 else 'processes'} (GPUs); with any other number DeepSpeed stops at "
                   f"start-up. Give the world size (--world-size) to check, or leave train_batch_size out and "
                   f"DeepSpeed derives it")
        return
    if t is not None and m is not None:  # gradient_accumulation_steps = t // m // ws
        if ws is None:
            if t % m:
                yield ("error", ("train_batch_size",),
                       f"train_batch_size {t} is not a multiple of train_micro_batch_size_per_gpu {m}: with any "
                       f"number of processes DeepSpeed's derived gradient_accumulation_steps does not add up and it "
                       f"stops at start-up")
            return
        derived = t // m // ws
        if derived == 0 or t != m * derived * ws:
            yield ("error", ("train_batch_size",),
                   f"with {ws} {procs} DeepSpeed derives gradient_accumulation_steps = {t} // {m} // {ws} = {derived}"
                   + (" and stops at start-up (it must be > 0)" if derived == 0 else
                      f", then stops at start-up because {t} != {m} x {derived} x {ws}")
                   + f"; make train_batch_size a multiple of {m * ws}")
        return
    if t is not None and g is not None:  # train_micro_batch_size_per_gpu = t // ws // g
        if ws is None:
            if t % g:
                yield ("error", ("train_batch_size",),
                       f"train_batch_size {t} is not a multiple of gradient_accumulation_steps {g}: with any number "
                       f"of processes DeepSpeed's derived micro batch does not add up and it stops at start-up")
            return
        derived = t // ws // g
        if derived == 0 or t != derived * g * ws:
            yield ("error", ("train_batch_size",),
                   f"with {ws} {procs} DeepSpeed derives train_micro_batch_size_per_gpu = {t} // {ws} // {g} = "
                   f"{derived}" + (" and stops at start-up (it must be > 0)" if derived == 0 else
                                   f", then stops at start-up because {t} != {derived} x {g} x {ws}")
                   + f"; make train_batch_size a multiple of {g * ws}")
        return
    if t is not None and ws is not None:  # only train_batch_size: accumulation 1, micro = t // ws
        derived = t // ws
        if derived == 0 or t != derived * ws:
            yield ("error", ("train_batch_size",),
                   f"with {ws} {procs} DeepSpeed derives train_micro_batch_size_per_gpu = {t} // {ws} = {derived}"
                   + (" and stops at start-up (it must be > 0)" if derived == 0 else
                      f", then stops at start-up because {t} != {derived} x 1 x {ws}")
                   + f"; make train_batch_size a multiple of {ws}")


# ------------------------------------------------------------------------------------------ "auto"

_BATCH_AUTO = 'DeepSpeed keeps the text "auto" and its batch-size arithmetic stops at start-up with a TypeError'
# What a plain DeepSpeed script does with an "auto" nobody filled, where DeepSpeed keeps the text (top-level keys,
# read by runtime/config.py get_scalar_param). In the DeepSpeedConfigModel sections (PYDANTIC_SECTIONS) the model
# drops "auto" and uses its default (config_utils.DeepSpeedConfigModel.__init__, strict=False).
PLAIN_STOPS: dict[tuple[str, ...], str] = {
    ("train_batch_size",): _BATCH_AUTO,
    ("train_micro_batch_size_per_gpu",): _BATCH_AUTO,
    ("gradient_accumulation_steps",): _BATCH_AUTO,
    ("gradient_clipping",): 'DeepSpeed keeps the text "auto" and stops with a TypeError when it compares it with 0 '
                            'to decide on clipping',
}


def _plain_fate(path: tuple[str, ...]) -> tuple[str, str]:
    """("stops", why) or ("default", the default DeepSpeed uses) for an "auto" a plain script leaves in place."""
    if path in PLAIN_STOPS:
        return "stops", PLAIN_STOPS[path]
    if path[0] in ("optimizer", "scheduler") and len(path) == 3 and path[1] == "params":
        what = "optimizer" if path[0] == "optimizer" else "learning-rate scheduler"
        return "stops", f'DeepSpeed passes the text "auto" to the {what} as {path[2]} and creating it fails'
    section: Any = DeepSpeedConfig
    for key in path[:-1]:  # an old section name (bfloat16) is read by the same model as the new one
        spec = fields_of(section).get(section.DEPRECATED.get(key, key)) if section is not None else None
        section = spec.section if spec is not None else None
    spec = fields_of(section).get(path[-1]) if section is not None else None
    if section in PYDANTIC_SECTIONS and spec is not None:
        default = spec.default
        return "default", "false" if default is False else "true" if default is True else f"{default}"
    return "stops", 'DeepSpeed keeps the text "auto" where it expects a value'


def _value_check_speaks(path: tuple[str, ...]) -> bool:
    """The value check already refuses "auto" here (a typed key not marked as filled in): say nothing more."""
    section: Any = DeepSpeedConfig
    spec: FieldSpec | None = None
    for key in path:
        if section is None:
            return False  # inside a free-form mapping (optimizer params): only the rules look there
        spec = fields_of(section).get(key)
        if spec is None:
            return True  # unknown key: the value check names it
        section = spec.section
    return spec is not None and not spec.auto and spec.kind != "str"


_OWN_AUTO = ('"auto" is DeepSpeed\'s own default here, yet accelerate (also under the HF Trainer) refuses every '
             '"auto" it does not fill: every process stops at start-up ("`{key}` not found in kwargs"); remove the '
             'key (DeepSpeed then uses "auto")')


def _deepspeed_takes_auto(path: tuple[str, ...]) -> bool:
    """DeepSpeed's own model takes the text "auto" as a value here (the schema marks it, and no tool fills it)."""
    section: Any = DeepSpeedConfig
    spec: FieldSpec | None = None
    for key in path:
        spec = fields_of(section).get(key) if section is not None else None
        if spec is None:
            return False
        section = spec.section
    return spec is not None and spec.auto


def _names(paths: list[tuple[str, ...]]) -> str:
    return ", ".join(auto_fill.dotted(p) for p in paths)


@rule("deepspeed")
def auto_values(ctx: RuleContext) -> Iterable[Finding]:
    """"auto" is a placeholder that the HF Trainer or accelerate replace before DeepSpeed sees the config (see
    auto_fill.py for who fills which key, read from their code). Said once per file (a note: who fills them and
    why we think so); a key gets its own message only where that consumer cannot fill it and the run stops (or,
    under a plain script, silently trains without the precision asked for)."""
    everything = list(auto_fill.auto_paths(ctx.data))
    # Where "auto" is DeepSpeed's own value (data_types.keep_in_fp32_modules) it is no placeholder: a plain script
    # is fine with it, and it says nothing about who runs the file; accelerate's walk still refuses it.
    own = [p for p in everything if p not in auto_fill.BY_PATH and _deepspeed_takes_auto(p)]
    paths = [p for p in everything if p not in own]
    consumer, why = ctx.consumer, ctx.consumer_why
    if consumer is None and ctx.hf_trainer is not None:
        consumer = "hf_trainer" if ctx.hf_trainer else "plain"
    if not paths:
        for path in own if consumer in ("hf_trainer", "accelerate", "integration") else []:
            yield ("error", path, _OWN_AUTO.format(key=auto_fill.dotted(path)))
        return
    trainer_only = [p for p in paths if (f := auto_fill.BY_PATH.get(p)) is not None and f.accelerate is None
                    and f.hf_trainer is not None]
    if consumer is None or (consumer == "integration" and trainer_only):
        if trainer_only:  # only the HF Trainer fills these: the file was written for it
            why = (why + "; " if why else "") + f"only the HF Trainer fills {_names(trainer_only)}"
            consumer = "hf_trainer"
        else:
            consumer = "integration"
            why = why or 'only the HF Trainer and accelerate fill "auto"'
    filled = [p for p in paths if auto_fill.fills(consumer, p)]
    left = [p for p in paths if p not in filled]
    n = f"'auto' values: {len(paths)}"
    if consumer == "plain":
        defaults = [(p, _plain_fate(p)[1]) for p in left if _plain_fate(p)[0] == "default"]
        stops = [p for p in left if _plain_fate(p)[0] == "stops" and not _value_check_speaks(p)]
        precision = [p for p, _ in defaults if p[-1] == "enabled" and p[0] in ("fp16", "bf16", "bfloat16")]
        quiet = [(p, d) for p, d in defaults if p not in precision]
        text = (f"{n}; nobody fills them: this config is used by a plain DeepSpeed script" + (f" ({why})" if why else "")
                + " (only the HF Trainer and accelerate fill \"auto\")")
        if quiet:
            text += "; DeepSpeed drops " + ", ".join(f"{auto_fill.dotted(p)} (default {d})" for p, d in quiet)
        if stops:
            text += f"; it stops at start-up on the {len(stops)} marked as errors"
        yield ("note", (), text)
        for path in stops:
            yield ("error", path, f'"auto" under a plain DeepSpeed script: {_plain_fate(path)[1]}; write a value')
        for path in precision:
            yield ("warning", path, f'"auto" under a plain DeepSpeed script: DeepSpeed drops it and {path[0]} is off; '
                                    f'write true or false')
        return
    who = {"hf_trainer": "the HF Trainer", "accelerate": "accelerate",
           "integration": "the HF Trainer or accelerate"}[consumer]
    text = f"{n}; filled by {who} at start-up" + (f" ({why})" if why else "")
    if consumer == "hf_trainer" and trainer_only and ctx.consumer is None and ctx.hf_trainer is None:
        text += (f"; a script of your own on accelerate (Accelerator.prepare) would stop on "
                 f"{_names(trainer_only)} (\"not found in kwargs\")")
    if consumer in ("accelerate", "integration"):
        # What accelerate needs from the script to fill them (Accelerator._prepare_deepspeed raises otherwise).
        needs = []
        if any(p[-1] == "train_micro_batch_size_per_gpu" for p in filled):
            needs.append("the batch size from the DataLoader it prepares")
        if any(p[0] == ZERO and "hidden_size" in (auto_fill.BY_PATH[p].accelerate or "") for p in filled):
            needs.append("the bucket sizes from model.config.hidden_size (a Hugging Face Transformers model)")
        if ("scheduler", "params", "total_num_steps") in filled:
            needs.append("total_num_steps from DummyScheduler(total_num_steps=...)")
        if needs:
            who_needs = "accelerate takes" if consumer == "accelerate" else "a script of your own on accelerate takes"
            text += f"; {who_needs} " + ", ".join(needs[:-1]) + (" and " if len(needs) > 1 else "") + needs[-1]
    if left:
        text += f"; not filled: {_names(left)}"
    yield ("note", (), text)
    for path in own:
        yield ("error", path, _OWN_AUTO.format(key=auto_fill.dotted(path)))
    for path in left:
        if _value_check_speaks(path):
            continue
        fill = auto_fill.BY_PATH.get(path)
        key = auto_fill.dotted(path)
        if fill is not None and consumer == "accelerate":
            text = (f'accelerate does not fill this "auto" (only the HF Trainer does, from {fill.hf_trainer}): every '
                    f'process stops at start-up ("`{key}` not found in kwargs"); write the value')
        else:
            text = (f'nobody fills this "auto" ({who} fill only their own list of keys): every process stops at '
                    f'start-up ("`{key}` not found in kwargs"); write the value')
        yield ("error", path, text)

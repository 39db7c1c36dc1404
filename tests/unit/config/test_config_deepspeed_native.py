"""The schema against DeepSpeed itself (the `train` extra): same keys, same defaults, same unknown-key policy.

These import DeepSpeed into the test process (never done by the dashboard): they prove that what
deepspeed_schema.py says is what the installed DeepSpeed does.
"""

from __future__ import annotations

import json

import pytest

deepspeed = pytest.importorskip("deepspeed")

from deepspeed.comm.config import CommsLoggerConfig  # noqa: E402
from deepspeed.monitor.config import CometConfig, CSVConfig, TensorBoardConfig, WandbConfig  # noqa: E402
from deepspeed.runtime import config as ds_config  # noqa: E402
from deepspeed.runtime import constants as ds_constants  # noqa: E402
from deepspeed.runtime.activation_checkpointing.config import ACT_CHKPT_DEFAULT  # noqa: E402
from deepspeed.runtime.lr_schedules import VALID_LR_SCHEDULES  # noqa: E402
from deepspeed.runtime.precision_config import (  # noqa: E402
    DeepSpeedBF16Config,
    DeepSpeedFP16Config,
    get_bfloat16_config,
)
from deepspeed.runtime.swap_tensor.aio_config import AIO_DEFAULT_DICT, get_aio_config  # noqa: E402
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig  # noqa: E402
from deepspeed.runtime.zero.leaf_module_config import DeepSpeedZeroLeafModuleConfig  # noqa: E402
from deepspeed.runtime.zero.offload_config import (  # noqa: E402
    DeepSpeedZeroOffloadOptimizerConfig,
    DeepSpeedZeroOffloadParamConfig,
)
from deepspeed.utils.config import DeepSpeedThroughputTimerConfig  # noqa: E402
from pydantic import ValidationError  # noqa: E402
from support import TESTS  # noqa: E402

from traindeck.backend.config import deepspeed_rules as rules  # noqa: E402
from traindeck.backend.config import deepspeed_schema as schema  # noqa: E402
from traindeck.backend.config.schema import fields_of  # noqa: E402
from traindeck.backend.config.validate import check_values  # noqa: E402

pytestmark = pytest.mark.train

DS = TESTS / "fixtures" / "configs" / "deepspeed"

# Our section -> DeepSpeed's pydantic model for it.
MODELS = {
    schema.ZeroOptimization: DeepSpeedZeroConfig,
    schema.OffloadParam: DeepSpeedZeroOffloadParamConfig,
    schema.OffloadOptimizer: DeepSpeedZeroOffloadOptimizerConfig,
    schema.LeafModule: DeepSpeedZeroLeafModuleConfig,
    schema.FP16: DeepSpeedFP16Config,
    schema.BF16: DeepSpeedBF16Config,
    schema.TensorBoard: TensorBoardConfig,
    schema.Wandb: WandbConfig,
    schema.CsvMonitor: CSVConfig,
    schema.Comet: CometConfig,
    schema.CommsLogger: CommsLoggerConfig,
    schema.TimersThroughput: DeepSpeedThroughputTimerConfig,
    schema.HybridEngine: ds_config.HybridEngineConfig,
}


def deepspeed_keys(model) -> dict:
    """Every spelling DeepSpeed accepts: the field name and its alias (populate_by_name)."""
    return {spelling: info for name, info in model.model_fields.items() for spelling in {name, info.alias or name}}


@pytest.mark.parametrize("section", list(MODELS), ids=lambda s: s.__name__)
def test_pydantic_sections_have_deepspeeds_keys_and_defaults(section) -> None:
    theirs = deepspeed_keys(MODELS[section])
    ours = fields_of(section)
    assert set(ours) | set(section.DEPRECATED) == set(theirs)
    assert section in schema.PYDANTIC_SECTIONS and section.UNKNOWN == "error"
    for key, spec in ours.items():
        if spec.kind == "section":
            continue
        default = theirs[key].get_default(call_default_factory=True)
        default = getattr(default, "value", default)  # enums
        assert spec.default == default, (section.__name__, key, spec.default, default)
        assert type(spec.default) is type(default) or spec.default == default


def test_scalar_section_defaults_are_deepspeeds() -> None:
    aio = fields_of(schema.Aio)
    assert {k: aio[k].default for k in AIO_DEFAULT_DICT} == AIO_DEFAULT_DICT
    act = fields_of(schema.ActivationCheckpointing)
    assert {k: act[k].default for k in ACT_CHKPT_DEFAULT} == ACT_CHKPT_DEFAULT
    from deepspeed.profiling import constants as prof
    flops = fields_of(schema.FlopsProfiler)
    assert flops["enabled"].default == prof.FLOPS_PROFILER_ENABLED_DEFAULT
    assert flops["recompute_fwd_factor"].default == prof.FLOPS_PROFILER_RECOMPUTE_FWD_FACTOR_DEFAULT
    assert flops["profile_step"].default == prof.FLOPS_PROFILER_PROFILE_STEP_DEFAULT
    assert flops["module_depth"].default == prof.FLOPS_PROFILER_MODULE_DEPTH_DEFAULT
    assert flops["top_modules"].default == prof.FLOPS_PROFILER_TOP_MODULES_DEFAULT
    assert flops["detailed"].default == prof.FLOPS_PROFILER_DETAILED_DEFAULT
    assert flops["output_file"].default == prof.FLOPS_PROFILER_OUTPUT_FILE_DEFAULT
    top = fields_of(schema.DeepSpeedConfig)
    c = ds_constants
    for key, default in {
        "train_batch_size": c.TRAIN_BATCH_SIZE_DEFAULT, "gradient_accumulation_steps": c.GRADIENT_ACCUMULATION_STEPS_DEFAULT,
        "train_micro_batch_size_per_gpu": c.TRAIN_MICRO_BATCH_SIZE_PER_GPU_DEFAULT,
        "gradient_clipping": c.GRADIENT_CLIPPING_DEFAULT, "prescale_gradients": c.PRESCALE_GRADIENTS_DEFAULT,
        "gradient_predivide_factor": c.GRADIENT_PREDIVIDE_FACTOR_DEFAULT,
        "gradient_allreduce_op": c.GRADIENT_ALLREDUCE_OP_DEFAULT, "steps_per_print": c.STEPS_PER_PRINT_DEFAULT,
        "wall_clock_breakdown": c.WALL_CLOCK_BREAKDOWN_DEFAULT, "memory_breakdown": c.MEMORY_BREAKDOWN_DEFAULT,
        "dump_state": c.DUMP_STATE_DEFAULT, "zero_allow_untested_optimizer": c.ZERO_ALLOW_UNTESTED_OPTIMIZER_DEFAULT,
        "zero_force_ds_cpu_optimizer": c.ZERO_FORCE_DS_CPU_OPTIMIZER_DEFAULT,
        "communication_data_type": c.COMMUNICATION_DATA_TYPE_DEFAULT,
        "seq_parallel_communication_data_type": c.SEQ_PARALLEL_COMMUNICATION_DATA_TYPE_DEFAULT,
        "disable_allgather": c.DISABLE_ALLGATHER_DEFAULT, "disable_python_gc": c.DISABLE_PYTHON_GC_DEFAULT,
        "dataloader_drop_last": c.DATALOADER_DROP_LAST_DEFAULT, "log_level": c.LOG_LEVEL_DEFAULT,
        "use_data_before_expert_parallelism": c.USE_DATA_BEFORE_EXPERT_PARALLEL_DEFAULT,
        "managed_gradient_accumulation": c.MANAGED_GRADIENT_ACCUMULATION_DEFAULT,
        "vocabulary_size": c.VOCABULARY_SIZE_DEFAULT,
    }.items():
        assert top[key].default == default, key
    checkpoint = fields_of(schema.Checkpoint)
    assert checkpoint["tag_validation"].default.upper() == c.CHECKPOINT_TAG_VALIDATION_DEFAULT
    assert checkpoint["load_universal"].default == c.LOAD_UNIVERSAL_CHECKPOINT_DEFAULT
    assert checkpoint["use_node_local_storage"].default == c.USE_NODE_LOCAL_STORAGE_CHECKPOINT_DEFAULT
    types = fields_of(schema.DataTypes)
    assert types["grad_accum_dtype"].default == c.GRAD_ACCUM_DTYPE_DEFAULT
    assert types["keep_in_fp32_modules"].default == c.KEEP_IN_FP32_MODULES_DEFAULT


def test_names_and_removed_keys_are_deepspeeds() -> None:
    import inspect

    import torch

    assert set(schema.DEEPSPEED_OPTIMIZERS) == set(ds_config.DEEPSPEED_OPTIMIZERS)
    assert set(schema.DEEPSPEED_SCHEDULERS) == set(VALID_LR_SCHEDULES)
    optimizers = {n for n, c in vars(torch.optim).items()
                  if inspect.isclass(c) and issubclass(c, torch.optim.Optimizer) and n != "Optimizer"}
    assert set(schema.TORCH_OPTIMIZERS) == optimizers
    lr = torch.optim.lr_scheduler
    schedulers = {n for n, c in vars(lr).items()
                  if inspect.isclass(c) and issubclass(c, lr.LRScheduler) and n != "LRScheduler" and n[0] != "_"}
    assert set(schema.TORCH_SCHEDULERS) == schedulers
    assert set(schema.DeepSpeedConfig.REMOVED) == set(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS)
    assert set(schema.ZeroOptimization.REMOVED) == set(ds_config._REMOVED_ZERO_CONFIG_KEYS)
    dtypes = {v for v in ds_config.DtypeEnum._value2member_map_ if isinstance(v, str) and "int8" not in v}
    assert set(fields_of(schema.DataTypes)["param_dtype"].choices) == dtypes


# ------------------------------------------------------------------------------------------ ZeRO configs

BUILT_IN_STYLE = {
    "stage0": {"stage": 0},
    "stage1": {"stage": 1, "reduce_bucket_size": 5e8},
    "stage2": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True, "allgather_bucket_size": 2e8,
               "reduce_bucket_size": 2e8, "reduce_scatter": True},
    "stage2_offload_cpu": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
    "stage3": {"stage": 3, "stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 1e5,
               "stage3_max_live_parameters": 1e9, "stage3_gather_16bit_weights_on_model_save": True},
    "stage3_offload_cpu": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
    "stage3_nvme": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "buffer_count": 4},
                    "offload_param": {"device": "nvme", "nvme_path": "/nvme", "buffer_size": 1e8},
                    "sub_group_size": 1e8},
}


@pytest.mark.parametrize("name", sorted(BUILT_IN_STYLE))
def test_deepspeed_accepts_the_zero_configs_we_call_valid(name: str) -> None:
    zero = BUILT_IN_STYLE[name]
    assert [f for f in check_values({"zero_optimization": zero}, schema.DeepSpeedConfig) if f[0] == "error"] == []
    DeepSpeedZeroConfig(**zero)


def _fixtures():
    for path in sorted(DS.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(data.get("zero_optimization"), dict):
            yield path.relative_to(DS).as_posix(), data


@pytest.mark.parametrize(("name", "data"), list(_fixtures()), ids=[n for n, _ in _fixtures()])
def test_unknown_key_errors_in_zero_are_exactly_what_deepspeed_refuses(name: str, data: dict) -> None:
    zero = data["zero_optimization"]
    ours = {path[1:] for severity, path, text in check_values(data, schema.DeepSpeedConfig)
            if path[0] == "zero_optimization" and severity == "error"
            and (text.startswith("unknown key") or "no longer supported" in text)}
    try:
        DeepSpeedZeroConfig(**zero)
        theirs = set()
    except ValidationError as exc:
        theirs = {tuple(e["loc"]) for e in exc.errors() if e["type"] == "extra_forbidden"}
    except AssertionError:
        theirs = set()  # the deprecated-key clash, checked below
    assert ours == theirs
    if name.startswith("good/"):
        DeepSpeedZeroConfig(**zero)


def test_value_errors_in_zero_are_deepspeeds_too() -> None:
    data = json.loads((DS / "pitfall" / "typos_in_values.json").read_text())
    ours = {path[1:] for severity, path, _ in check_values(data, schema.DeepSpeedConfig)
            if severity == "error" and path[0] == "zero_optimization"}
    with pytest.raises(ValidationError) as caught:
        DeepSpeedZeroConfig(**data["zero_optimization"])
    assert ours == {tuple(e["loc"]) for e in caught.value.errors()}


def test_deprecated_clash_and_partial_offload_are_refused_by_deepspeed() -> None:
    clash = json.loads((DS / "pitfall" / "deprecated_clash.json").read_text())["zero_optimization"]
    with pytest.raises(AssertionError, match="Cannot provide deprecated parameter 'cpu_offload'"):
        DeepSpeedZeroConfig(**clash)
    partial = json.loads((DS / "pitfall" / "partial_offload_stage2.json").read_text())["zero_optimization"]
    with pytest.raises(ValidationError, match="Partial offloading only supported for ZeRO Stage 3"):
        DeepSpeedZeroConfig(**partial)
    with pytest.raises(ValidationError, match="compute_grad_norm=false is supported only with ZeRO Stage 1 or 2"):
        DeepSpeedZeroConfig(stage=3, compute_grad_norm=False)


def test_auto_fallbacks_are_what_deepspeed_does() -> None:
    """Under a plain script nobody fills "auto": DeepSpeedConfigModel drops it, and the default named in the note
    is the value DeepSpeed ends up with; elsewhere DeepSpeed keeps the text (and the rule says it stops)."""
    from traindeck.backend.config.auto_fill import FILLS

    models = {("zero_optimization",): (DeepSpeedZeroConfig, schema.ZeroOptimization),
              ("zero_optimization", "offload_optimizer"): (DeepSpeedZeroOffloadOptimizerConfig,
                                                           schema.OffloadOptimizer),
              ("zero_optimization", "offload_param"): (DeepSpeedZeroOffloadParamConfig, schema.OffloadParam),
              ("fp16",): (DeepSpeedFP16Config, schema.FP16), ("bf16",): (DeepSpeedBF16Config, schema.BF16),
              ("bfloat16",): (DeepSpeedBF16Config, schema.BF16)}
    for path in [f.path for f in FILLS] + [("bfloat16", "enabled")]:
        fate, text = rules._plain_fate(path)
        if path[:-1] not in models:
            assert fate == "stops", path  # top-level keys, optimizer/scheduler params: DeepSpeed keeps the text
            continue
        assert fate == "default", path
        model, section = models[path[:-1]]
        key = fields_of(section)[path[-1]].key
        field = next(n for n, i in model.model_fields.items() if (i.alias or n) == key)
        value = getattr(model(**{key: "auto"}), field)
        value = getattr(value, "value", value)  # an enum member: its text
        assert str(value).lower() == text.lower(), (path, value, text)


def test_loosely_read_sections_ignore_unknown_keys() -> None:
    """The "warning" sections: DeepSpeed reads them with dict lookups and never sees an unknown key."""
    assert get_aio_config({"aio": {"thread_count": 8}})["intra_op_parallelism"] == 1  # old name: ignored
    assert get_bfloat16_config({"bfloat16": {"enabled": True}}).enabled  # old name still read...
    assert not get_bfloat16_config({"bfloat16": {"enabled": True}, "bf16": {"enabled": False}}).enabled  # ...bf16 wins
    config = ds_config.DeepSpeedConfig({
        "train_batch_size": 8, "my_note": "kept", "optimizer": {"type": "AdamW", "extra": 1},
        "scheduler": {"type": "WarmupLR", "extra": 1}, "activation_checkpointing": {"partitioned_activations": True},
        "flops_profiler": {"enabld": True}, "checkpoint": {"tag_validation": "fail", "x": 1},
        "aio": {"thread_count": 4}, "data_types": {"x": 1}, "torch_autocast": {"x": 1},
        "communication_data_type": "FP16", "log_level": "INFO", "gradient_allreduce_op": "Mean",
    })
    assert config.train_batch_size == 8 and config.activation_checkpointing_config.partition_activations is False
    for section in (schema.Optimizer, schema.Scheduler, schema.ActivationCheckpointing, schema.FlopsProfiler,
                    schema.Checkpoint, schema.Aio, schema.DataTypes, schema.TorchAutocast, schema.DeepSpeedConfig):
        assert section.UNKNOWN == "warning"


def test_pydantic_sections_refuse_unknown_keys() -> None:
    for section, model in MODELS.items():
        with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
            model(**{"not_a_key": 1})
        assert section.UNKNOWN == "error"


# ------------------------------------------------------------------------------------------ the probe, in-process

from traindeck.backend.config import native_probe  # noqa: E402
from traindeck.backend.config.validate import check_files  # noqa: E402

GOOD_WORLD = {"zero0_fp32": 1, "zero1_bf16": 4, "zero2_fp16": 2, "zero2_offload_cpu": 8, "zero3": 2,
              "zero3_offload_cpu": 8, "zero3_nvme": 1, "hf_zero3_auto": 8}
BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def _probe(data: dict, world_size: int | None) -> list[dict]:
    reply = native_probe.check_deepspeed({"data": data, "world_size": world_size})
    assert reply["status"] == "ok"
    return reply["findings"]


@pytest.mark.parametrize("name", sorted(GOOD_WORLD))
def test_deepspeed_itself_accepts_every_good_file(name: str) -> None:
    """The whole file through DeepSpeedConfig (world size patched in) and the optimizer / scheduler it builds."""
    data = json.loads((DS / "good" / f"{name}.json").read_text())
    assert _probe(data, GOOD_WORLD[name]) == []
    assert _probe(data, None) == []  # unknown world size: the one the batch numbers imply


def _normalise(path: tuple, message: str) -> tuple:
    if (path and path[0] in BATCH) or message.startswith("Either train_batch_size"):
        return ("<batch size>",)
    return path


@pytest.mark.parametrize("path", sorted(p.relative_to(DS).as_posix() for p in (DS / "pitfall").glob("*.json")))
def test_what_deepspeed_refuses_we_report_as_an_error_at_the_same_key(path: str) -> None:
    """Every complaint of DeepSpeed's own parsing has an error of ours on the same key (or its section / a key
    inside it): the checker never calls valid what DeepSpeed refuses."""
    data = json.loads((DS / path).read_text())
    ours = [_normalise(tuple(m.path.split(".")) if m.path else (), m.message)
            for m in check_files([DS / path], world_size=2, hf_trainer=False) if m.severity == "error"]
    for finding in _probe(data, 2):
        theirs = _normalise(tuple(finding["path"]), finding["message"])
        assert any(o[:len(theirs)] == theirs or theirs[:len(o)] == o for o in ours if o), (finding, ours)

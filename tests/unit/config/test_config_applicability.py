"""Which keys a form shows: ZeRO stage, offload device, engine (distributed_type) and preset-level conditions."""

from __future__ import annotations

from traindeck.backend.config.accelerate_schema import AccelerateConfig
from traindeck.backend.config.applicability import Applicability
from traindeck.backend.config.deepspeed_schema import DeepSpeedConfig
from traindeck.backend.config.schema import Section, fields_of


def spec(section: type[Section], *path: str):
    for key in path[:-1]:
        section = fields_of(section)[key].section  # type: ignore[assignment]
    return fields_of(section)[path[-1]]


def ds_applies(data: dict, *path: str) -> bool:
    return Applicability("deepspeed", data).applies(path, spec(DeepSpeedConfig, *path))


def acc_applies(data: dict, *path: str, deepspeed: dict | None = None) -> bool:
    return Applicability("accelerate", data, deepspeed).applies(path, spec(AccelerateConfig, *path))


def test_stage_specific_keys_follow_the_zero_stage():
    stage2 = {"zero_optimization": {"stage": 2}}
    stage3 = {"zero_optimization": {"stage": 3}}
    assert not ds_applies(stage2, "zero_optimization", "stage3_max_live_parameters")
    assert ds_applies(stage3, "zero_optimization", "stage3_max_live_parameters")
    assert not ds_applies(stage2, "zero_optimization", "offload_param")
    assert ds_applies(stage3, "zero_optimization", "offload_param")
    assert not ds_applies({}, "zero_optimization", "reduce_bucket_size")  # no stage: DeepSpeed's 0, ZeRO off
    why = Applicability("deepspeed", stage2).why_hidden(("zero_optimization", "stage3_max_live_parameters"),
                                                        spec(DeepSpeedConfig, "zero_optimization",
                                                             "stage3_max_live_parameters"))
    assert why is not None and "stage 3" in why and "stage 2" in why


def test_nvme_keys_only_with_nvme_offload():
    cpu = {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
    nvme = {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}
    assert not ds_applies(cpu, "zero_optimization", "offload_param", "nvme_path")
    assert ds_applies(nvme, "zero_optimization", "offload_param", "nvme_path")
    assert ds_applies(cpu, "zero_optimization", "offload_param", "pin_memory")
    assert not ds_applies(cpu, "aio") and ds_applies(nvme, "aio")


def test_accelerate_sections_follow_distributed_type():
    fsdp = {"distributed_type": "FSDP"}
    deepspeed = {"distributed_type": "DEEPSPEED"}
    assert acc_applies(fsdp, "fsdp_config") and not acc_applies(deepspeed, "fsdp_config")
    assert acc_applies(deepspeed, "deepspeed_config") and not acc_applies(fsdp, "deepspeed_config")
    assert not acc_applies({"distributed_type": "MULTI_GPU"}, "tpu_name")
    assert not acc_applies({"num_machines": 1}, "main_process_ip")
    assert acc_applies({"num_machines": 2}, "main_process_ip")
    wrap = {"distributed_type": "FSDP", "fsdp_config": {"fsdp_auto_wrap_policy": "SIZE_BASED_WRAP"}}
    assert acc_applies(wrap, "fsdp_config", "fsdp_min_num_params")
    assert not acc_applies(wrap, "fsdp_config", "fsdp_transformer_layer_cls_to_wrap")


def test_accelerate_inline_deepspeed_keys_give_way_to_the_presets_deepspeed_config():
    acc = {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 3}}
    assert acc_applies(acc, "deepspeed_config", "zero_stage")
    assert acc_applies(acc, "deepspeed_config", "zero3_init_flag")  # inline stage 3
    separate = {"zero_optimization": {"stage": 2}}
    assert not acc_applies(acc, "deepspeed_config", "zero_stage", deepspeed=separate)
    # The stage in effect is the DeepSpeed config's: a stage-3 key of the accelerate section does not apply at 2.
    assert not acc_applies(acc, "deepspeed_config", "zero3_init_flag", deepspeed=separate)
    assert acc_applies(acc, "deepspeed_config", "zero3_init_flag", deepspeed={"zero_optimization": {"stage": 3}})


def test_switched_off_sections_show_only_their_switch():
    assert ds_applies({}, "fp16", "enabled") and not ds_applies({}, "fp16", "loss_scale")
    assert ds_applies({"fp16": {"enabled": True}}, "fp16", "loss_scale")
    assert ds_applies({"fp16": {"enabled": "auto"}}, "fp16", "loss_scale")
    assert not ds_applies({"tensorboard": {"enabled": False}}, "tensorboard", "output_path")
    assert ds_applies({"comms_logger": {}}, "comms_logger", "verbose")  # present: on
    assert ds_applies({}, "timers", "throughput", "synchronized")  # on by default
    assert not acc_applies({"dynamo_config": {"dynamo_backend": "NO"}}, "dynamo_config", "dynamo_mode")
    assert acc_applies({"dynamo_config": {"dynamo_backend": "INDUCTOR"}}, "dynamo_config", "dynamo_mode")

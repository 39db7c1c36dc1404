"""Cross-field rules for the accelerate launch config: what accelerate accepts silently or refuses only at launch.

Each rule cites the accelerate 1.15.0 code that behaves so. "accelerate launch refuses" means `accelerate launch`
(commands/launch.py, utils/launch.py) stops before starting any process; "stops at start-up" means each training
process raises when it builds the Accelerator / plugin; "ignores" means it runs without a word and the setting has
no effect. Rules that compare with the DeepSpeed JSON report its keys with the "@deepspeed" path prefix.

Size (~570 lines): ~22 independent cross-field rules, each with its citation; a list read rule by rule, not a
flow to follow.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePath
from typing import Any

from traindeck.backend.config.accelerate_schema import (
    DEVICE_TYPES,
    DISTRIBUTED_TYPES,
    SHARDING_STRATEGIES,
    home_section,
)
from traindeck.backend.config.validate import Finding, RuleContext, as_dict, rule, whole_number

DS = "deepspeed_config"
FSDP = "fsdp_config"
MEGATRON = "megatron_lm_config"

# DeepSpeedPlugin._deepspeed_config_checks: next to deepspeed_config_file these accelerate keys make every process
# stop ("When using `deepspeed_config_file`, the following accelerate config variables will be ignored"). Their
# place in the DeepSpeed JSON (DeepSpeedPlugin's plugin_to_config_mapping).
REFUSED_NEXT_TO_FILE = {
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
    "zero_stage": "zero_optimization.stage",
    "offload_optimizer_device": "zero_optimization.offload_optimizer.device",
    "offload_param_device": "zero_optimization.offload_param.device",
    "offload_optimizer_nvme_path": "zero_optimization.offload_optimizer.nvme_path",
    "offload_param_nvme_path": "zero_optimization.offload_param.nvme_path",
    "zero3_save_16bit_model": "zero_optimization.stage3_gather_16bit_weights_on_model_save",
}
_SECTION_TYPES = {DS: "DEEPSPEED", FSDP: "FSDP", MEGATRON: "MEGATRON_LM"}




def _dt(data: dict[str, Any]) -> str | None:
    """The distributed type when it is a valid one (else None: the value check reports it). An unquoted NO (YAML's
    false) counts as NO, as accelerate's launcher runs it (see yaml_false_distributed_type)."""
    value = data.get("distributed_type")
    if value is False:
        return "NO"
    return value if isinstance(value, str) and value in DISTRIBUTED_TYPES else None


def _on(value: Any) -> bool:
    """accelerate reads flags as str(value).lower() == "true" (DeepSpeedPlugin.set_mixed_precision)."""
    return str(value).lower() == "true"


def _config_file(section: dict[str, Any]) -> str | None:
    """deepspeed_config_file when it names a file (accelerate treats a missing value and "none" as no file)."""
    ref = section.get("deepspeed_config_file")
    return ref if isinstance(ref, str) and ref.strip() and ref != "none" else None


def _processes(data: dict[str, Any]) -> tuple[int | None, int]:
    """(num_processes, num_machines) as accelerate launch uses them; num_processes is 1 for NO when absent."""
    n = whole_number(data.get("num_processes"))
    if n is None and "num_processes" not in data and data.get("distributed_type") == "NO":
        n = 1  # ClusterConfig.process_config: for the string NO only, not for an unquoted NO (false)
    m = whole_number(data.get("num_machines", 1))
    return (n if n is not None and n > 0 else None), (m if m is not None and m > 0 else 1)


# ------------------------------------------------------------------------------------------ the distributed type


@rule("accelerate")
def distributed_type_and_sections(ctx: RuleContext) -> Iterable[Finding]:
    """config_args.BaseConfig.process_config requires distributed_type; launch_command picks the launcher from it
    alone, so a section for another type is never read."""
    data = ctx.data
    if "distributed_type" not in data:
        yield ("error", (), "distributed_type is missing: accelerate refuses the file (\"A `distributed_type` must "
                            "be specified in the config file\"); e.g. NO, MULTI_GPU, DEEPSPEED or FSDP")
        return
    dt = _dt(data)
    if dt is None:
        return
    flattened = {home_section(str(k)) for k in data}
    for key, wanted in _SECTION_TYPES.items():
        section = data.get(key)
        if dt == wanted and not as_dict(section) and key not in flattened:
            defaults = {
                DS: "ZeRO stage 2, no offload, gradient_accumulation_steps 1",
                FSDP: "FSDP1, FULL_SHARD, no auto wrap (the whole model one unit)",
                MEGATRON: "tensor and pipeline parallel degree 1",
            }[key]
            yield ("warning", ("distributed_type",),
                   f"distributed_type is {dt} but there is no {key} section: accelerate uses its defaults "
                   f"({defaults}) unless your script passes its own plugin")
        elif dt != wanted and as_dict(section):
            yield ("warning", (key,),
                   f"{key} is ignored: distributed_type is {dt}, and accelerate only reads {key} with "
                   f"distributed_type: {wanted}")


@rule("accelerate")
def yaml_false_distributed_type(ctx: RuleContext) -> Iterable[Finding]:
    """`distributed_type: NO` unquoted is YAML 1.1's false. BaseConfig.__post_init__ converts only strings to
    DistributedType, so false stays false; launch_command finds it equal to no distributed type and runs the
    simple (single-process) launcher: NO, by accident. process_config defaults num_processes to 1 only for the
    string NO, so without num_processes launch stops on its -1. (The value check leaves bools here to this rule.)"""
    data = ctx.data
    value = data.get("distributed_type")
    if not isinstance(value, bool) or data.get("compute_environment") == "AMAZON_SAGEMAKER":
        return
    if value:
        yield ("error", ("distributed_type",),
               "true is not a distributed type: expected one of " + ", ".join(DISTRIBUTED_TYPES))
    elif "num_processes" not in data:
        yield ("error", ("distributed_type",),
               "NO unquoted is YAML's false: accelerate defaults num_processes to 1 only for the text NO, so "
               "accelerate launch refuses the file unless given --num_processes (\"You need to manually pass in "
               "`--num_processes`\"); write distributed_type: \"NO\"")
    else:
        yield ("warning", ("distributed_type",),
               "NO unquoted is YAML's false: accelerate launch runs one process only by accident (false matches "
               "none of its distributed types); write distributed_type: \"NO\"")


@rule("accelerate")
def processes_and_machines(ctx: RuleContext) -> Iterable[Finding]:
    """commands/launch.py: num_processes -1 (ClusterConfig's default) is refused; torchrun gets
    nproc_per_node = num_processes // num_machines; distributed_type NO runs the simple (single-process) launcher."""
    data, dt = ctx.data, _dt(ctx.data)
    n, m = _processes(data)
    if dt is not None and dt != "NO" and "num_processes" not in data:
        yield ("warning", ("distributed_type",),
               "num_processes is not set: accelerate launch refuses to start (\"You need to manually pass in "
               "`--num_processes` using this config yaml\") unless you give --num_processes")
    if data.get("num_processes") == "auto" and m > 1:
        # utils/launch.py: nproc_per_node = num_processes // num_machines, which "auto" cannot take part in.
        yield ("error", ("num_processes",),
               f"\"auto\" works on one machine only (torchrun starts one process per GPU): with "
               f"{m} machines accelerate divides it by num_machines and stops; give the whole job's process count")
    if n is not None and "num_machines" in data and m > 1 and n % m:
        per = n // m
        yield ("error", ("num_processes",),
               f"num_processes counts the processes of all machines together: {n} over {m} machines is not a whole "
               f"number per machine, and accelerate starts {n} // {m} = {per} per machine"
               + (" (none: the launch fails)" if per == 0 else f" ({per * m} in all)")
               + f"; make num_processes a multiple of {m}")
    rank = whole_number(data.get("machine_rank"))
    if rank is not None and rank >= m:
        yield ("error", ("machine_rank",),
               f"machine_rank {rank} does not exist with num_machines {m}: ranks go from 0 to {m - 1}")
    if dt == "NO" and n is not None and n > 1:
        yield ("warning", ("num_processes",),
               f"distributed_type NO runs a single process: num_processes {n} is ignored; use MULTI_GPU (or "
               f"MULTI_CPU) to run {n} processes")
    mpirun = data.get("mpirun_config")
    hostfile = mpirun.get("mpirun_hostfile") if isinstance(mpirun, dict) else None
    if dt == "MULTI_CPU" and n is not None and n > m and not hostfile:
        # The simple launcher runs the script once per `accelerate launch`; it starts mpirun only with a hostfile.
        yield ("warning", ("num_processes",),
               f"MULTI_CPU without mpirun_config.mpirun_hostfile starts one process per machine: accelerate launch "
               f"starts several only through mpirun (with that hostfile, or when mpirun starts accelerate launch), "
               f"so as traindeck launches it num_processes {n} is not reached and the process trains alone; to run "
               f"several on this machine's CPUs without MPI, use distributed_type MULTI_GPU with use_cpu false and "
               f"ACCELERATE_USE_CPU=true in the run's environment (torchrun then starts them, each on the CPU with "
               f"gloo)")
    if dt == "MULTI_GPU" and n == 1 and m == 1:
        yield ("warning", ("num_processes",),
               "MULTI_GPU with one process on one machine is plain single-GPU training with DDP's overhead "
               "(`accelerate config` refuses it); use distributed_type: NO")


@rule("accelerate")
def gpu_ids_and_processes(ctx: RuleContext) -> Iterable[Finding]:
    """utils/launch.py sets CUDA_VISIBLE_DEVICES to gpu_ids; each process then takes cuda:<local rank>.
    commands/launch.py refuses MULTI_GPU with fewer than two ids on one machine."""
    data, dt = ctx.data, _dt(ctx.data)
    ids_text = data.get("gpu_ids")
    if isinstance(ids_text, (int, float)) and not isinstance(ids_text, bool):
        yield ("error", ("gpu_ids",),
               f"accelerate launch stops on a number here ('int' object has no attribute 'split'): quote it, "
               f"gpu_ids: '{ids_text}'")
        return
    if not isinstance(ids_text, str) or ids_text.strip().lower() == "all" or not ids_text.strip():
        return
    if dt == "MULTI_CPU" or dt == "NO" and data.get("use_cpu") is True:
        yield ("warning", ("gpu_ids",), "gpu_ids has no effect when training on the CPU")
        return
    ids = [part.strip() for part in ids_text.split(",")]
    bad = [i for i in ids if not (i.isdigit() or i.startswith(("GPU-", "MIG-")))]
    if bad:
        yield ("error", ("gpu_ids",),
               f"gpu_ids must be 'all' or GPU numbers separated by commas, like '0,1' (found {bad[0]!r})")
        return
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        yield ("error", ("gpu_ids",), f"GPU {', '.join(twice)} is listed twice in gpu_ids: each GPU once")
        return
    n, m = _processes(data)
    if dt == "MULTI_GPU" and len(ids) < 2 and m <= 1:
        yield ("error", ("gpu_ids",),
               f"MULTI_GPU with one GPU id ({ids_text!r}): accelerate launch refuses it (\"Less than two GPU ids "
               f"were configured\"); list two or more, use 'all', or use distributed_type: NO")
        return
    if dt not in DEVICE_TYPES and dt != "NO":
        return
    if dt == "NO":
        n, m = 1, 1
    if n is None or n % m:
        return
    per = n // m
    listed = "GPU" if len(ids) == 1 else "GPUs"
    if per > len(ids):
        yield ("error", ("gpu_ids",),
               f"{per} processes per machine (num_processes {n}" + (f" over {m} machines" if m > 1 else "")
               + f") but gpu_ids lists {len(ids)} {listed} ({ids_text}): each process takes the GPU of its local "
               f"rank, so ranks {len(ids)}..{per - 1} find none and stop (\"invalid device ordinal\"); list {per} "
               f"GPUs or lower num_processes to {len(ids) * m}")
    elif per < len(ids):
        idle = ", ".join(ids[per:])
        yield ("warning", ("gpu_ids",),
               f"gpu_ids lists {len(ids)} {listed} but only {per} process{'es' if per > 1 else ''} per machine run: "
               f"GPU {idle} stay{'s' if len(ids) - per == 1 else ''} idle; raise num_processes to {len(ids) * m} or "
               f"shorten gpu_ids")


@rule("accelerate")
def multi_machine(ctx: RuleContext) -> Iterable[Finding]:
    """utils/launch.py: torchrun's rendezvous needs machine 0's address; port 0 means "find a free one" (this
    machine only); the DeepSpeed launchers other than "standard" start every machine from a hostfile."""
    data = ctx.data
    n, m = _processes(data)
    ds = as_dict(data.get(DS))
    launcher = ds.get("deepspeed_multinode_launcher", "pdsh")
    hostfile_launch = _dt(data) == "DEEPSPEED" and launcher != "standard"
    if m > 1 and not data.get("main_process_ip") and not hostfile_launch:
        yield ("error", ("num_machines",),
               f"{m} machines but no main_process_ip: the processes on the other machines cannot find machine 0; "
               f"set main_process_ip to an address of machine 0 that all machines reach")
    port = whole_number(data.get("main_process_port"))
    if port == 0 and m > 1:
        yield ("error", ("main_process_port",),
               "main_process_port 0 (pick a free port) only works on one machine: the other machines must know "
               "the port; use a fixed one such as 29500")
    elif port is not None and 0 < port < 1024:
        yield ("warning", ("main_process_port",),
               f"port {port} is a privileged port (below 1024): only root may listen on it; use e.g. 29500")
    if hostfile_launch and m > 1 and not ds.get("deepspeed_hostfile"):
        yield ("error", (DS, "deepspeed_multinode_launcher") if "deepspeed_multinode_launcher" in ds else (DS,),
               f"the {launcher} launcher starts all {m} machines from a hostfile, but deepspeed_hostfile is not set: "
               f"accelerate passes '--hostfile None' and DeepSpeed trains on this machine only (\"Unable to find "
               f"hostfile, will proceed with training with local resources only\")")
    if m > 1 and ds.get("deepspeed_exclusion_filter") and ds.get("deepspeed_inclusion_filter"):
        yield ("warning", (DS, "deepspeed_inclusion_filter"),
               "accelerate passes only deepspeed_exclusion_filter when both filters are set: the inclusion filter "
               "is ignored")
    if m == 1 and _dt(data) == "DEEPSPEED":
        # Not deepspeed_multinode_launcher: `accelerate config` writes it (pdsh / standard) whatever the machine
        # count, and naming a launcher that is not used changes nothing.
        for key in ("deepspeed_hostfile", "deepspeed_exclusion_filter", "deepspeed_inclusion_filter"):
            if ds.get(key):
                yield ("warning", (DS, key), f"{key} only applies with num_machines > 1: ignored on one machine")


@rule("accelerate")
def cpu_training(ctx: RuleContext) -> Iterable[Finding]:
    """utils/launch.py passes use_cpu (ACCELERATE_USE_CPU) only from the simple launcher (NO, MULTI_CPU)."""
    data, dt = ctx.data, _dt(ctx.data)
    if data.get("use_cpu") is True and dt in DEVICE_TYPES:
        yield ("warning", ("use_cpu",),
               f"use_cpu is ignored with distributed_type {dt}: accelerate's launcher for it does not pass use_cpu "
               f"on, so training uses the accelerators; for CPU training use NO (one process), MULTI_CPU with an "
               f"mpirun hostfile, or keep {dt} with ACCELERATE_USE_CPU=true in the run's environment")


# ------------------------------------------------------------------------------------------ DeepSpeed


@rule("accelerate")
def deepspeed_config_file_excludes_inline(ctx: RuleContext) -> Iterable[Finding]:
    """DeepSpeedPlugin._deepspeed_config_checks: accelerate launch lists the deepspeed_config keys (and
    mixed_precision when the YAML sets it, even to 'no') in ACCELERATE_CONFIG_DS_FIELDS; with a config file every
    process stops when one of them is a setting the file must carry."""
    data = ctx.data
    ds = as_dict(data.get(DS))
    ref = _config_file(ds)
    if ref is None or _dt(data) not in (None, "DEEPSPEED"):
        return
    name = PurePath(ref).name
    for key, where in REFUSED_NEXT_TO_FILE.items():
        if key in ds:
            yield ("error", (DS, key),
                   f"accelerate refuses {key} next to deepspeed_config_file: every process stops (\"When using "
                   f"`deepspeed_config_file`, the following accelerate config variables will be ignored\"); remove "
                   f"it here and set \"{where}\" in {name}")
    if data.get("mixed_precision") is not None:
        yield ("error", ("mixed_precision",),
               f"accelerate refuses mixed_precision (even 'no') next to deepspeed_config_file: every process stops "
               f"(\"the following accelerate config variables will be ignored\"); remove it here and set "
               f"\"fp16\" / \"bf16\" {{\"enabled\": true}} in {name}")


@rule("accelerate")
def deepspeed_file_needs_zero_section(ctx: RuleContext) -> Iterable[Finding]:
    """DeepSpeedPlugin.__post_init__: a DeepSpeed config given to accelerate must have zero_optimization."""
    if _dt(ctx.data) != "DEEPSPEED" or not isinstance(ctx.deepspeed, dict) or "zero_optimization" in ctx.deepspeed:
        return
    yield ("error", ("@deepspeed",),
           "accelerate refuses a DeepSpeed config without a zero_optimization section (\"Please specify the ZeRO "
           "optimization config in the DeepSpeed config\"): every process stops; add \"zero_optimization\": "
           "{\"stage\": 0} at least")


@rule("accelerate")
def precision_agrees_with_deepspeed(ctx: RuleContext) -> Iterable[Finding]:
    """DeepSpeedPlugin.set_mixed_precision: fills "auto", refuses the other precision enabled in the JSON, and
    leaves an explicit value alone (so the JSON's precision is what DeepSpeed trains in)."""
    mp = ctx.data.get("mixed_precision")
    ds = ctx.deepspeed
    if not isinstance(ds, dict) or mp not in ("no", "fp16", "bf16", "fp8"):
        return
    fp16 = as_dict(ds.get("fp16"))
    bf16_key = "bf16" if "bf16" in ds or "bfloat16" not in ds else "bfloat16"
    bf16 = as_dict(ds.get(bf16_key))
    want = {"fp16": "fp16", "bf16": "bf16", "fp8": "bf16"}.get(mp)  # fp8 runs on bf16 in DeepSpeed
    on = [(k, s) for k, s in (("fp16", fp16), (bf16_key, bf16)) if _on(s.get("enabled"))]
    for key, _section in on:
        kind = "fp16" if key == "fp16" else "bf16"
        if want is not None and kind != want:
            text = (f"mixed_precision '{mp}' disagrees with the DeepSpeed config, which enables {kind} "
                    f"({key}.enabled): every process stops (\"`--mixed_precision` arg cannot be set to {mp} when "
                    f"{kind} is set in the DeepSpeed config file\"); make the two agree")
            yield ("error", ("mixed_precision",), text)
            yield ("error", ("@deepspeed", key, "enabled"), text)
        elif want is None:
            text = (f"the DeepSpeed config enables {kind} ({key}.enabled) while mixed_precision is 'no': DeepSpeed "
                    f"trains in {kind}; make the two agree")
            yield ("warning", ("mixed_precision",), text)
            yield ("warning", ("@deepspeed", key, "enabled"), text)
    if want is not None and not on:
        section_key, section = ("fp16", fp16) if want == "fp16" else (bf16_key, bf16)
        if "enabled" in section and section["enabled"] != "auto" and not _on(section["enabled"]):
            text = (f"mixed_precision '{mp}' but the DeepSpeed config sets {section_key}.enabled to false: accelerate "
                    f"keeps the file's value, so DeepSpeed trains in fp32; set it to true or \"auto\"")
            yield ("warning", ("mixed_precision",), text)
            yield ("warning", ("@deepspeed", section_key, "enabled"), text)


@rule("accelerate")
def deepspeed_inline(ctx: RuleContext) -> Iterable[Finding]:
    """The inline deepspeed_config: DeepSpeedPlugin builds zero_optimization from it (utils/dataclasses.py);
    utils/launch.py prepare_deepspeed_cmd_env passes zero_stage and the offload devices to the processes but not
    the nvme paths (ACCELERATE_DEEPSPEED_OFFLOAD_*_NVME_PATH are read, never set: the processes get 'none')."""
    data = ctx.data
    ds = data.get(DS)
    if not isinstance(ds, dict) or _dt(data) not in (None, "DEEPSPEED") or _config_file(ds) is not None:
        return
    stage = ds.get("zero_stage", 2)
    if stage not in (0, 1, 2, 3) or isinstance(stage, bool):
        return
    by_default = " (accelerate's default)" if "zero_stage" not in ds else ""
    for which in ("param", "optimizer"):
        device_key, path_key = f"offload_{which}_device", f"offload_{which}_nvme_path"
        device = ds.get(device_key)
        nvme_path = ds.get(path_key)
        if which == "param" and device in ("cpu", "nvme") and stage < 3:
            yield ("warning", (DS, device_key),
                   f"offload_param_device only takes effect with ZeRO stage 3 (zero_stage is {stage}{by_default}): "
                   f"DeepSpeed ignores it; set zero_stage: 3 or offload_param_device: none")
        elif which == "optimizer" and device in ("cpu", "nvme") and stage == 0:
            yield ("warning", (DS, device_key),
                   "offload_optimizer_device needs ZeRO stage 1, 2 or 3: with zero_stage 0 DeepSpeed ignores it")
        elif which == "optimizer" and device == "nvme" and stage in (1, 2):
            yield ("warning", (DS, device_key),
                   f"ZeRO stage {stage} offloads the optimizer to CPU RAM whatever the device: NVMe offload "
                   f"(ZeRO-Infinity) needs zero_stage: 3")
        if device == "nvme" and (not isinstance(nvme_path, str) or not nvme_path.strip()):
            yield ("error", (DS, device_key),
                   f"offload_{which}_device is nvme but {path_key} is not set: DeepSpeed gets nvme_path 'none' and "
                   f"swaps into a folder named 'none' in the working directory; set {path_key} to a folder on the "
                   f"NVMe drive")
        elif device == "nvme":
            yield ("warning", (DS, path_key),
                   f"accelerate launch 1.15 does not pass {path_key} to the training processes (the variable it "
                   f"reads is never set): DeepSpeed gets nvme_path 'none', a folder in the working directory; "
                   f"put the offload settings in a DeepSpeed JSON (deepspeed_config_file) instead")
        elif nvme_path not in (None, "", "none") and path_key in ds:
            yield ("warning", (DS, path_key),
                   f"{path_key} is ignored: offload_{which}_device is {device or 'none'}, not nvme")
    for key, text in (("zero3_init_flag", "accelerate turns it off below stage 3 (\"DeepSpeed Zero3 Init flag is "
                                          "only applicable for ZeRO Stage 3\")"),
                      ("zero3_save_16bit_model", "it only applies to ZeRO stage 3 and is ignored")):
        if ds.get(key) is True and stage < 3:
            yield ("warning", (DS, key), f"{key} with zero_stage {stage}{by_default}: {text}")


# ------------------------------------------------------------------------------------------ FSDP


def _fsdp_get(section: dict[str, Any], key: str) -> tuple[tuple[str, ...], Any]:
    """(path, value) of an fsdp_* key, also when written without the prefix (accelerate adds it)."""
    if key in section:
        return (FSDP, key), section[key]
    short = key.removeprefix("fsdp_")
    if short in section:
        return (FSDP, short), section[short]
    return (FSDP, key), None


@rule("accelerate")
def fsdp_rules(ctx: RuleContext) -> Iterable[Finding]:
    """FullyShardedDataParallelPlugin.__post_init__ / set_auto_wrap_policy / set_state_dict_type and
    utils/launch.py prepare_multi_gpu_env, as `accelerate launch` 1.15 feeds them."""
    data = ctx.data
    fsdp = data.get(FSDP)
    if _dt(data) != "FSDP" or not isinstance(fsdp, dict):
        return

    def get(key: str) -> tuple[tuple[str, ...], Any]:
        return _fsdp_get(fsdp, key)

    _, raw_version = get("fsdp_version")
    version = 2 if str(raw_version) == "2" else 1
    policy_path, policy = get("fsdp_auto_wrap_policy")
    policy = policy.upper() if isinstance(policy, str) else "NO_WRAP"
    cls_path, classes = get("fsdp_transformer_layer_cls_to_wrap")
    size_path, min_params = get("fsdp_min_num_params")
    if policy == "TRANSFORMER_BASED_WRAP" and not classes:
        # Only said when the script is known to be one of the user's own (--accelerate-script, --plain-script):
        # the Hugging Face Trainer and the libraries on it (TRL, LLaMA-Factory, axolotl...) train Hugging Face models, which have
        # _no_split_modules, and that is what nearly every config written this way is for (22 of 22 in the corpus).
        # The finding names what it rests on (the script, or the flag that said who runs it), so the Configure
        # page (which knows the Launch page's script) and `config check` (told by --script) read alike.
        why = ctx.consumer_why
        because = f" (said because {'of ' if why.startswith('-') else ''}{why})" if why else ""
        if ctx.hf_trainer is False or ctx.consumer in ("accelerate", "plain"):
            yield ("warning", policy_path,
                   "TRANSFORMER_BASED_WRAP without fsdp_transformer_layer_cls_to_wrap: accelerate wraps the classes "
                   "in the model's _no_split_modules, which only Hugging Face Transformers models have; any other model gets "
                   f"no layer wrapped (the whole model one FSDP unit); name the layer class, e.g. LlamaDecoderLayer{because}")
    elif policy == "NO_WRAP":
        yield ("warning", policy_path if policy_path[-1] in fsdp else (FSDP,),
               "no auto wrap policy (NO_WRAP" + ("" if policy_path[-1] in fsdp else ", the default")
               + "): the whole model is one FSDP unit, so every step gathers all parameters at once and peak "
                 "memory is that of the unsharded model; use TRANSFORMER_BASED_WRAP")
    if classes and policy != "TRANSFORMER_BASED_WRAP":
        yield ("warning", cls_path,
               f"fsdp_transformer_layer_cls_to_wrap is ignored: fsdp_auto_wrap_policy is {policy}; set it to "
               f"TRANSFORMER_BASED_WRAP to wrap these layers")
    if min_params is not None and policy != "SIZE_BASED_WRAP":
        yield ("warning", size_path,
               f"fsdp_min_num_params is ignored: fsdp_auto_wrap_policy is {policy}; set it to SIZE_BASED_WRAP to wrap "
               f"by size")
    elif policy == "SIZE_BASED_WRAP" and whole_number(min_params) == 0:
        yield ("warning", size_path, "fsdp_min_num_params 0: accelerate then wraps nothing (the whole model one "
                                     "FSDP unit); give a parameter count such as 100000000")

    reshard_path, reshard = get("fsdp_reshard_after_forward")
    strategy_path, strategy = get("fsdp_sharding_strategy")
    if version == 1:
        if isinstance(reshard, bool):
            yield ("warning", reshard_path,
                   f"with fsdp_version 1 this takes a sharding strategy name ({reshard!s} is FSDP2's form): "
                   f"accelerate launch ignores it and trains with FULL_SHARD; set fsdp_sharding_strategy")
        elif reshard is not None and strategy is None and _strategy(reshard) not in (None, "FULL_SHARD"):
            yield ("warning", reshard_path,
                   f"accelerate launch 1.15 ignores fsdp_reshard_after_forward with FSDP1: it always passes "
                   f"fsdp_sharding_strategy (default FULL_SHARD), which wins, so the job runs FULL_SHARD; also set "
                   f"fsdp_sharding_strategy: {_strategy(reshard)}")
        elif reshard is not None and strategy is not None and _strategy(reshard) not in (None, _strategy(strategy)):
            yield ("warning", reshard_path,
                   f"fsdp_sharding_strategy {_strategy(strategy)} wins over fsdp_reshard_after_forward "
                   f"{_strategy(reshard)} with FSDP1: the job runs {_strategy(strategy)}")
    else:
        if reshard is not None and not isinstance(reshard, bool):
            yield ("error", reshard_path,
                   f"with fsdp_version 2 fsdp_reshard_after_forward is true or false, not {reshard!r}: every process "
                   f"stops (accelerate reads it as a boolean); FULL_SHARD corresponds to true, SHARD_GRAD_OP to false")
        if strategy is not None:
            yield ("warning", strategy_path,
                   "FSDP2 ignores fsdp_sharding_strategy: use fsdp_reshard_after_forward: true (like FULL_SHARD) or "
                   "false (like SHARD_GRAD_OP)")
        for key, how, quiet in (("fsdp_backward_prefetch", "backward prefetch is not supported in FSDP2",
                                 (None, "NO_PREFETCH")),
                                ("fsdp_forward_prefetch", "forward prefetch is not implemented in FSDP2", (None, False)),
                                ("fsdp_use_orig_params", "FSDP2 always uses the original parameters", (None,)),
                                ("fsdp_sync_module_states", "FSDP2 does not need it", (None, False))):
            path, value = get(key)
            if value not in quiet:
                yield ("warning", path, f"{key} only applies to FSDP1 and is ignored here ({how})")
        path, state = get("fsdp_state_dict_type")
        if isinstance(state, str) and state.upper() == "LOCAL_STATE_DICT":
            yield ("error", path, "FSDP2 does not support LOCAL_STATE_DICT: every process stops; use "
                                  "SHARDED_STATE_DICT or FULL_STATE_DICT")
    path, sync = get("fsdp_sync_module_states")
    _, efficient = get("fsdp_cpu_ram_efficient_loading")
    if sync is False and efficient is not False:
        yield ("error", path,
               "accelerate launch refuses fsdp_sync_module_states: false while fsdp_cpu_ram_efficient_loading is on"
               + ("" if efficient is True else " (its default)")
               + " (\"When using `--fsdp_cpu_ram_efficient_loading` set `--fsdp_sync_module_states` to `True`\"); "
                 "set it to true, or set fsdp_cpu_ram_efficient_loading: false")
    path, offload = get("fsdp_activation_checkpointing_offload")
    _, checkpointing = get("fsdp_activation_checkpointing")
    if offload is True and checkpointing is not True:
        yield ("error", path, "fsdp_activation_checkpointing_offload needs fsdp_activation_checkpointing: true: "
                              "every process stops")
    if offload is True and version != 2:
        yield ("error", path, "fsdp_activation_checkpointing_offload needs fsdp_version: 2: every process stops")


def _strategy(value: Any) -> str | None:
    """A sharding strategy as accelerate resolves it: a name in any case, or its number 1-5."""
    if isinstance(value, str) and value.upper() in SHARDING_STRATEGIES:
        return value.upper()
    number = whole_number(value) if not isinstance(value, str) else int(value) if value.isdigit() else None
    if number is not None and 1 <= number <= len(SHARDING_STRATEGIES):
        return SHARDING_STRATEGIES[number - 1]
    return None


# ------------------------------------------------------------------------------------------ Megatron-LM, N-D


@rule("accelerate")
def megatron_rules(ctx: RuleContext) -> Iterable[Finding]:
    """Megatron-LM divides the world into tensor x pipeline x context parallel groups (and data parallel)."""
    data = ctx.data
    mg = data.get(MEGATRON)
    if _dt(data) != "MEGATRON_LM" or not isinstance(mg, dict):
        return
    tp = whole_number(mg.get("megatron_lm_tp_degree", 1)) or 1
    pp = whole_number(mg.get("megatron_lm_pp_degree", 1)) or 1
    cp = whole_number(mg.get("megatron_lm_context_parallel_size", 1)) or 1
    n, _ = _processes(data)
    if n is not None and n % (tp * pp * cp):
        parts = f"tp_degree {tp} x pp_degree {pp}" + (f" x context_parallel_size {cp}" if cp > 1 else "")
        yield ("error", (MEGATRON, "megatron_lm_tp_degree") if "megatron_lm_tp_degree" in mg else (MEGATRON,),
               f"{parts} = {tp * pp * cp} must divide num_processes {n}: Megatron-LM stops at start-up")
    if mg.get("megatron_lm_num_micro_batches") is not None and pp == 1:
        yield ("warning", (MEGATRON, "megatron_lm_num_micro_batches"),
               "megatron_lm_num_micro_batches only applies with megatron_lm_pp_degree > 1: ignored")
    if mg.get("megatron_lm_sequence_parallelism") is True and tp == 1:
        yield ("warning", (MEGATRON, "megatron_lm_sequence_parallelism"),
               "sequence parallelism needs megatron_lm_tp_degree > 1: Megatron-LM turns it off")


@rule("accelerate")
def parallelism_sizes(ctx: RuleContext) -> Iterable[Finding]:
    """accelerate/parallelism_config.py: the sizes must multiply to the number of processes; CP and SP exclude
    each other."""
    data = ctx.data
    pc = data.get("parallelism_config")
    if not isinstance(pc, dict) or not pc:
        return
    names = ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size")
    sizes = {k: whole_number(pc.get(f"parallelism_config_{k}", 1)) for k in names}
    if any(v is None or v < 1 for v in sizes.values()):
        return  # the value check speaks
    if sizes["cp_size"] > 1 and sizes["sp_size"] > 1:  # type: ignore[operator]
        yield ("error", ("parallelism_config", "parallelism_config_sp_size"),
               "context parallelism (cp_size) and sequence parallelism (sp_size) cannot both be on: accelerate stops")
        return
    total = 1
    for v in sizes.values():
        total *= v  # type: ignore[operator]
    n, _ = _processes(data)
    if n is not None and total != n and sizes["sp_size"] == 1:
        product = " x ".join(str(sizes[k]) for k in names[:4])
        yield ("error", ("parallelism_config",),
               f"the parallelism sizes multiply to {product} = {total} but num_processes is {n}: accelerate stops "
               f"when it prepares the model; make the product equal to num_processes")


# ------------------------------------------------------------------------------------------ notes


@rule("accelerate")
def notes(ctx: RuleContext) -> Iterable[Finding]:
    data = ctx.data
    if data.get("debug") is True:
        yield ("warning", ("debug",),
               "debug: true checks every collective operation across processes (finds hangs and mismatches) and "
               "makes training slower; turn it off for real runs")
    if data.get("mixed_precision") == "fp8":
        yield ("warning", ("mixed_precision",),
               "fp8 needs a Hopper or Ada GPU (compute capability 8.9+, e.g. H100, L4, RTX 4090) and an FP8 library "
               "(torchao, Transformer Engine or MS-AMP): without the library accelerate launch refuses, on an older "
               "GPU accelerate falls back to fp16")
    if as_dict(data.get("fp8_config")) and data.get("mixed_precision") != "fp8":
        yield ("warning", ("fp8_config",), "fp8_config is ignored: mixed_precision is not fp8")
    if "dynamo_backend" in data and "dynamo_config" in data:
        yield ("warning", ("dynamo_config",),
               "the old top-level dynamo_backend replaces this whole section when accelerate loads the file: keep "
               "only dynamo_config (with dynamo_backend inside)")
    if data.get("compute_environment") == "AMAZON_SAGEMAKER":
        yield ("note", ("compute_environment",),
               "SageMaker configs are launched by accelerate on AWS, not by traindeck: their SageMaker keys are not "
               "checked here")

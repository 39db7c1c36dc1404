"""Which keys of a config have an effect, given the rest of it: what a form shows and what it can hide.

Read from the schema's metadata (`stages`, `applies`) and from what the tools themselves do with a section they do
not use (accelerate reads fsdp_config only with distributed_type FSDP, DeepSpeed reads aio only when something is
offloaded to NVMe...). A key that does not apply is still valid to write; it just changes nothing, so a form may
hide it. `why_hidden` says why in words, for a tooltip or a "show all" hint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from traindeck.backend.config.editing import get_path
from traindeck.backend.config.messages import PathT, format_path
from traindeck.backend.config.schema import FieldSpec, Section, fields_of
from traindeck.backend.config.source import Kind

# accelerate: sections (and top-level keys) that only one distributed_type (or precision) reads.
_ACCELERATE_SECTION_FOR = {
    "deepspeed_config": ("DEEPSPEED",),
    "fsdp_config": ("FSDP",),
    "parallelism_config": ("FSDP",),
    "megatron_lm_config": ("MEGATRON_LM",),
    "mpirun_config": ("MULTI_CPU",),
}
_TPU_KEYS = ("tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands", "tpu_vm",
             "tpu_env", "downcast_bf16", "main_training_function")
_CPU_TYPES = ("NO", "MULTI_CPU")
# "offload to nvme" keys of accelerate's deepspeed_config and the device key that decides them.
_NVME_DEVICE_OF = {"offload_optimizer_nvme_path": "offload_optimizer_device",
                   "offload_param_nvme_path": "offload_param_device"}
_GREATER_THAN_ONE = re.compile(r"^(\w+) > 1$")


@dataclass(frozen=True)
class Applicability:
    """`data` is the whole config of `kind`. For an accelerate config that comes with a DeepSpeed config of its
    own (a preset with both sections), `deepspeed` is that config: the ZeRO stage is then its stage, and the
    inline DeepSpeed keys of deepspeed_config are not used (the launch writes them into ds_config.json instead)."""

    kind: Kind
    data: dict[str, Any]
    deepspeed: dict[str, Any] | None = None

    def applies(self, path: PathT, spec: FieldSpec) -> bool:
        return self.why_hidden(path, spec) is None

    def why_hidden(self, path: PathT, spec: FieldSpec) -> str | None:
        """None when the key at `path` (a key of this config) has an effect; else the reason, in words."""
        stage = self.zero_stage()
        if spec.stages and stage is not None and stage not in spec.stages:
            return f"used only at ZeRO {_stages_words(spec.stages)} (this config uses stage {stage})"
        if spec.applies == "legacy":
            return "an old key name: use the new one"
        reason = self._by_condition(path, spec.applies) if spec.applies else None
        if reason:
            return reason
        reason = self._switched_off(path)
        if reason:
            return reason
        if self.kind == "accelerate":
            return self._accelerate(path)
        return self._deepspeed(path)

    # ------------------------------------------------------------------------------------------ ZeRO stage

    def zero_stage(self) -> int | None:
        """The ZeRO stage in effect (the tools' defaults when unset), or None when DeepSpeed is not used."""
        if self.kind == "deepspeed":
            return _stage(get_path(self.data, ("zero_optimization", "stage")), default=0)
        if self.deepspeed is not None:
            return _stage(get_path(self.deepspeed, ("zero_optimization", "stage")), default=0)
        if self.data.get("distributed_type") != "DEEPSPEED":
            return None
        return _stage(get_path(self.data, ("deepspeed_config", "zero_stage")), default=2)

    # ------------------------------------------------------------------------------------------ conditions

    def _by_condition(self, path: PathT, condition: str) -> str | None:
        sibling = path[:-1]
        if condition == "device nvme":
            device = get_path(self.data, sibling + ("device",))
            return None if device == "nvme" else "used only with device: nvme"
        if condition == "offload to nvme":
            device_key = _NVME_DEVICE_OF.get(str(path[-1]))
            if device_key is None:
                return None
            return None if get_path(self.data, sibling + (device_key,)) == "nvme" else \
                f"used only with {device_key}: nvme"
        if condition == "super_offload":
            return None if get_path(self.data, sibling + ("super_offload",)) is True else \
                "used only with super_offload: true"
        if condition in ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP"):
            return None if get_path(self.data, sibling + ("fsdp_auto_wrap_policy",)) == condition else \
                f"used only with fsdp_auto_wrap_policy: {condition}"
        if condition.startswith("fsdp_version "):
            wanted = condition.split()[-1]
            have = get_path(self.data, sibling + ("fsdp_version",))
            return None if str(have if have is not None else 1) == wanted else f"used only with FSDP {wanted}"
        match = _GREATER_THAN_ONE.match(condition)
        if match:
            name = match.group(1)
            if name == "num_machines":
                value = self.data.get("num_machines")
                return None if _int(value) > 1 else "used only with several machines (num_machines > 1)"
            parent = get_path(self.data, sibling) if sibling else self.data
            keys = [k for k in (parent if isinstance(parent, dict) else {}) if str(k).endswith(name)]
            if not keys:  # unset: the default, 1
                return f"used only with {name} > 1"
            return None if any(_int(parent[k]) > 1 for k in keys) else f"used only with {name} > 1"
        return None  # a condition this module does not know: shown

    def _switched_off(self, path: PathT) -> str | None:
        """Keys of a section that has an `enabled` switch (fp16, bf16, monitors, profilers...) do nothing while it
        is off; the same for dynamo_config's keys while no compile backend is chosen."""
        if len(path) < 2:
            return None
        parent, key = path[:-1], path[-1]
        if self.kind == "accelerate" and parent == ("dynamo_config",) and key != "dynamo_backend":
            backend = get_path(self.data, parent + ("dynamo_backend",))
            return None if backend not in (None, "NO") else "used only with a dynamo_backend other than NO"
        if key == "enabled":
            return None
        section = _section_at(self.kind, parent)
        if section is None or "enabled" not in fields_of(section):
            return None
        value = get_path(self.data, parent + ("enabled",))
        if value is None:
            # comms_logger is on when present unless switched off; the others take the key's default.
            on = parent == ("comms_logger",) or fields_of(section)["enabled"].default is True
        else:
            on = value is True or value == "auto"
        return None if on else f"used only with {format_path(parent + ('enabled',))}: true"

    def _accelerate(self, path: PathT) -> str | None:
        distributed = self.data.get("distributed_type")
        top = str(path[0])
        wanted = _ACCELERATE_SECTION_FOR.get(top)
        if wanted is not None and distributed not in wanted:
            return f"used only with distributed_type {' or '.join(wanted)}"
        if top == "fp8_config" and self.data.get("mixed_precision") != "fp8":
            return "used only with mixed_precision: fp8"
        if top in _TPU_KEYS and distributed != "XLA":
            return "used only on TPUs (distributed_type XLA)"
        if top == "use_cpu" and distributed is not None and distributed not in _CPU_TYPES:
            return "used only with distributed_type NO or MULTI_CPU"
        if top in ("gpu_ids", "enable_cpu_affinity") and distributed in ("MULTI_CPU", "XLA"):
            return "used only with GPUs"
        if top == "deepspeed_config" and len(path) == 2 and self.deepspeed is not None:
            from traindeck.backend.launch.config_files import INLINE_DEEPSPEED_KEYS

            if path[1] in INLINE_DEEPSPEED_KEYS:
                return "set in the DeepSpeed config (this preset has one; it wins)"
            if path[1] == "deepspeed_config_file":
                return "written at launch: it points at the preset's DeepSpeed config"
        return None

    def _deepspeed(self, path: PathT) -> str | None:
        if path[0] == "aio" and not self._offloads_to_nvme():
            return "used only when offloading to NVMe"
        return None

    def _offloads_to_nvme(self) -> bool:
        zero = self.data.get("zero_optimization")
        if not isinstance(zero, dict):
            return False
        return any(isinstance(zero.get(k), dict) and zero[k].get("device") == "nvme"
                   for k in ("offload_param", "offload_optimizer"))


def _section_at(kind: Kind, path: PathT) -> type[Section] | None:
    """The Section class describing the mapping at `path` of a config of `kind` (None: not a declared section)."""
    from traindeck.backend.config.validate import root_section

    section: type[Section] | None = root_section(kind)
    for part in path:
        spec = fields_of(section).get(str(part)) if section is not None else None
        section = spec.section if spec is not None and spec.kind == "section" else None
        if section is None:
            return None
    return section


def _stage(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3 else default


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _stages_words(stages: tuple[int, ...]) -> str:
    if len(stages) == 1:
        return f"stage {stages[0]}"
    return "stages " + ", ".join(map(str, stages[:-1])) + f" and {stages[-1]}"

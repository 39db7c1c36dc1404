"""What is wrong with a preset before launch: each section checked by the config validators, located in the
preset's own YAML, plus the preset-level rules (launcher vs sections, inline DeepSpeed keys, unknown keys).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from traindeck.backend.launch.config_files import INLINE_DEEPSPEED_KEYS
from traindeck.backend.presets.model import _KNOWN_KEYS, NVME_PLACEHOLDER, Preset, dump_preset
from traindeck.backend.presets.transfer import render_files

if TYPE_CHECKING:
    from traindeck.backend.config.messages import Message

# ------------------------------------------------------------------------------------------ validation


def validate_preset(preset: Preset, *, world_size: int | None = None, script: str | None = None) -> list[Message]:
    """The config checks on a preset's sections, as export (and launch) will hand them to the tools, located in
    the preset file (line and column of each key) where the preset came from one; plus what only a preset can get
    wrong (a placeholder NVMe path, a launcher without its config). Paths are prefixed with the section
    ("deepspeed.zero_optimization.stage"). `script` (the training script chosen to launch it) tells who fills the
    DeepSpeed config's "auto" values (the HF Trainer, accelerate, or nobody)."""
    import json
    import tempfile

    from traindeck.backend.config.auto_fill import script_consumer
    from traindeck.backend.config.messages import Message, sort_messages
    from traindeck.backend.config.source import SourceDocument, parse_text
    from traindeck.backend.config.validate import check_document

    text: str | None = None
    if preset.path is not None and preset.path.is_file():
        try:
            text = preset.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = None
    file = str(preset.path) if text is not None else None
    whole = parse_text(text if text is not None else dump_preset(preset), file=file, fmt="yaml")
    if whole.data is None:
        return list(whole.syntax)
    if text is not None and not _same_sections(whole.data, preset):
        # The file changed since the preset was read (or the preset was edited in memory): locate in its dump.
        file = None
        whole = parse_text(dump_preset(preset), fmt="yaml")

    def located(path: tuple[str | int, ...]) -> tuple[int | None, int | None]:
        return whole.where(path) if file is not None else (None, None)

    def sub_doc(section: str, data: Any, kind: Literal["accelerate", "deepspeed"]) -> SourceDocument | None:
        if not isinstance(data, dict):
            return None
        locations = {p[1:]: pos for p, pos in whole.locations.items() if p[:1] == (section,) and len(p) > 1}
        # The section's own header stands for keys the export adds (deepspeed_config_file, a precision section).
        head = whole.locations.get((section,))
        for key in data:
            if (key,) not in locations and head is not None:
                locations[(key,)] = head
        return SourceDocument(text=" ", format="yaml", data=data, kind=kind, file=_MARK + section,
                              locations=locations)

    with tempfile.TemporaryDirectory(prefix="traindeck-preset-") as tmp:
        try:
            rendered = render_files(preset, Path(tmp))
        except Exception as exc:  # a renderer bug must not hide the preset's own problems
            rendered = {}
            line, column = located(())
            return [Message("error", "", f"the preset cannot be rendered to config files: {exc}", file, line,
                            column)] + _preset_checks(preset, located, file)
        for name, content in rendered.items():
            (Path(tmp) / name).write_text(content, encoding="utf-8")
        rendered_ds = json.loads(rendered["ds_config.json"]) if "ds_config.json" in rendered else None
        rendered_acc = yaml.safe_load(rendered["accelerate_config.yaml"]) if "accelerate_config.yaml" in rendered \
            else None
        ds_doc = sub_doc("deepspeed", rendered_ds, "deepspeed")
        acc_doc = sub_doc("accelerate", rendered_acc, "accelerate")
        checked: list[Message] = []
        consumer, why = script_consumer(script)
        if consumer is None and preset.launcher == "accelerate" and acc_doc is not None:
            # Under `accelerate launch` the HF Trainer or accelerate's own DeepSpeed integration fills "auto"
            # values (which of them: the script says); under the deepspeed launcher it is not known.
            consumer, why = "integration", "the preset launches it with accelerate"
        if acc_doc is not None:
            checked += check_document(acc_doc, world_size=world_size, deepspeed_doc=ds_doc, consumer=consumer,
                                      consumer_why=why)
        if ds_doc is not None:
            size = world_size
            if size is None:
                size = preset.process_count() if acc_doc is None or preset.launcher != "accelerate" else \
                    _accelerate_world(rendered_acc)
            checked += check_document(ds_doc, world_size=size, consumer=consumer, consumer_why=why)
    messages = (list(whole.syntax) if file is not None else []) + [_in_preset(m, file) for m in checked]
    messages += _preset_checks(preset, located, file)
    return sort_messages(dict.fromkeys(messages))


_MARK = "\0preset-section:"


def _same_sections(data: Any, preset: Preset) -> bool:
    return isinstance(data, dict) and data.get("accelerate") == preset.accelerate and \
        data.get("deepspeed") == preset.deepspeed


def _in_preset(message: Message, file: str | None) -> Message:
    """A message from a section's check, moved into the preset file: path prefixed with the section."""
    import dataclasses

    if message.file and message.file.startswith(_MARK):
        section = message.file[len(_MARK):]
        path = f"{section}.{message.path}" if message.path else section
        line, column = (message.line, message.column) if file is not None else (None, None)
        return dataclasses.replace(message, path=path, file=file, line=line, column=column)
    return message


def _accelerate_world(accelerate: dict[str, Any] | None) -> int | None:
    n = (accelerate or {}).get("num_processes")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _preset_checks(preset: Preset, located: Callable[[tuple[str | int, ...]], tuple[int | None, int | None]],
                   file: str | None) -> list[Message]:
    from traindeck.backend.config.messages import Message, format_path

    out: list[Message] = []

    def add(severity: Literal["error", "warning"], path: tuple[str | int, ...], text: str) -> None:
        line, column = located(path)
        out.append(Message(severity, format_path(path), text, file, line, column))

    for where, value in _walk(preset.deepspeed or {}, ("deepspeed",)):
        if where[-1] == "nvme_path" and isinstance(value, str) and value.rstrip("/") == NVME_PLACEHOLDER:
            add("error", where, f"'{NVME_PLACEHOLDER}' is a placeholder: set it to a folder on a local NVMe drive "
                                "with room for the offloaded tensors")
    for where, value in _walk(preset.accelerate or {}, ("accelerate",)):
        if where[-1] in ("offload_param_nvme_path", "offload_optimizer_nvme_path") and isinstance(value, str) \
                and value.rstrip("/") == NVME_PLACEHOLDER:
            add("error", where, f"'{NVME_PLACEHOLDER}' is a placeholder: set it to a folder on a local NVMe drive")
    if preset.launcher == "deepspeed" and preset.deepspeed is None:
        add("error", ("launcher",), "the deepspeed launcher needs a DeepSpeed config: add a 'deepspeed' section")
    if preset.launcher == "accelerate" and preset.accelerate is None:
        add("warning", ("launcher",), "no 'accelerate' section: a minimal accelerate config will be used")
    if preset.launcher != "accelerate" and preset.accelerate is not None:
        add("warning", ("accelerate",), f"the {preset.launcher} launcher does not read the accelerate config")
    if preset.accelerate is not None and preset.deepspeed is not None:
        inline = (preset.accelerate.get("deepspeed_config") or {})
        if isinstance(inline, dict):
            for key in INLINE_DEEPSPEED_KEYS:
                if key in inline:
                    add("warning", ("accelerate", "deepspeed_config", key),
                        f"'{key}' is not used: with a 'deepspeed' section the DeepSpeed settings come from it "
                        "(accelerate refuses inline keys beside a deepspeed_config_file); set it there")
    for key in sorted(set(preset.extra) - set(_KNOWN_KEYS)):
        add("warning", (key,), f"unknown preset key '{key}' (kept, not used)")
    return out


def _walk(data: Any, path: tuple[str | int, ...]) -> Iterable[tuple[tuple[str | int, ...], Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _walk(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _walk(value, path + (i,))
    else:
        yield path, data

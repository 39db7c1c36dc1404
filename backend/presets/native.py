"""The real tools' verdicts on a preset: its config files as the launch writes them, judged by DeepSpeed's and
accelerate's own parsers in a child process of the training interpreter (see backend/config/native.py).

Slow (each tool's child imports torch): call it off the UI thread. Messages come back with the preset's section
in front of their path ("deepspeed.zero_optimization.stage"), like `presets.validate_preset`'s.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import yaml

from traindeck.backend.config.messages import Message
from traindeck.backend.presets import Preset, render_files


def native_preset_verdicts(preset: Preset, python: str | None = None, timeout: float = 120) -> list[Message]:
    from traindeck.backend.config.native import native_verdicts
    from traindeck.backend.launch.config_files import ACCELERATE_CONFIG, DS_CONFIG

    out: list[Message] = []
    with tempfile.TemporaryDirectory(prefix="traindeck-native-") as tmp:
        files = render_files(preset, Path(tmp))
        for name, text in files.items():  # the accelerate YAML names the JSON: it must exist while checked
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        if DS_CONFIG in files:
            data = json.loads(files[DS_CONFIG])
            out += _in_section("deepspeed", native_verdicts("deepspeed", data, python, timeout,
                                                            world_size=preset.process_count()))
        if ACCELERATE_CONFIG in files and preset.launcher == "accelerate":
            data = yaml.safe_load(files[ACCELERATE_CONFIG])
            out += _in_section("accelerate", native_verdicts("accelerate", data, python, timeout))
    return out


def _in_section(section: str, messages: list[Message]) -> list[Message]:
    return [dataclasses.replace(m, path=f"{section}.{m.path}" if m.path else section, file=None, line=None,
                                column=None) for m in messages]

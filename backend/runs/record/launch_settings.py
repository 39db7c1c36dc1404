"""What a run was launched with, read back from its run directory for advice that fits it (see diagnosis)."""

from __future__ import annotations

from typing import Any

from traindeck.backend.core import read_json_file
from traindeck.backend.runs.record.layout import RunDir

DS_CONFIG = "ds_config.json"


def launch_settings(run_dir: RunDir) -> dict[str, Any]:
    """{"port_fixed": bool, "master_port": int, "launcher": str, "train_batch_size": value} as far as command.json
    and ds_config.json tell; missing files or keys are left out."""
    settings: dict[str, Any] = {}
    command = read_json_file(run_dir.command)
    if isinstance(command, dict) and isinstance(command.get("port_fixed"), bool):
        settings["port_fixed"] = command["port_fixed"]
    if isinstance(command, dict) and isinstance(command.get("master_port"), int):
        settings["master_port"] = command["master_port"]
    if isinstance(command, dict) and isinstance(command.get("launcher"), str):
        settings["launcher"] = command["launcher"]
    config = read_json_file(run_dir.path / DS_CONFIG)
    if isinstance(config, dict) and "train_batch_size" in config:
        settings["train_batch_size"] = config["train_batch_size"]
    return settings



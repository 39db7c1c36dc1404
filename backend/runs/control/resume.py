"""Starting a run again: `rerun` (the same launch) and `resume` (the same launch plus "continue from checkpoint X").

A launch keeps what was asked for in the run directory (`request.json`: script, module or command, its arguments, the preset's content
or the config file, launcher, process count, interpreter, working directory; secrets masked, as in command.json),
so a run can be started again even after its preset changed. The new run's `lineage.json` names its parent and
the checkpoint it resumed from.

How a script is told to resume: the HF Trainer layout gets `--resume_from_checkpoint PATH`; anything else needs a
template the user gives once per script or preset (`--load {checkpoint}`), remembered in the data folder
(`resume_args.json`). Placeholders: {checkpoint} the checkpoint's folder, {checkpoint_dir} the folder holding it
(DeepSpeed's load_dir), {tag} its folder name (DeepSpeed's tag), {step}.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.core.paths import data_dir, ensure_private_dir
from traindeck.backend.runs.record.checkpoints import HF_TRAINER, Checkpoint

REQUEST = "request.json"
LINEAGE = "lineage.json"
MASK = "***"
HF_RESUME_OPTION = "--resume_from_checkpoint"
PLACEHOLDERS = ("checkpoint", "checkpoint_dir", "tag", "step")


class ResumeError(Exception):
    """A run cannot be started again as asked; the message says why in one line."""


# ---- what a launch keeps --------------------------------------------------------------------------------------
def save_request(run_dir: Path, request: Any, *, preset_name: str | None, argv_secrets: Sequence[str] = (),
                 resume_arg: str | None = None) -> None:
    """request.json for a run just started from `request` (a LaunchRequest). Secrets are masked."""
    from traindeck.backend.launch.environ import masked_env
    from traindeck.backend.presets import preset_to_mapping
    from traindeck.backend.runs.record.layout import mask_argv

    data = {
        "script": str(request.script),
        "entry": request.entry,
        "script_args": mask_argv(list(request.script_args), argv_secrets),
        "preset_name": preset_name,
        "preset": preset_to_mapping(request.preset) if request.preset is not None else None,
        "config_file": str(Path(request.config_file).absolute()) if request.config_file else None,
        "launcher": request.launcher,
        "nproc": request.nproc,
        "python": request.python,
        "cwd": str(Path(request.cwd).absolute()) if request.cwd else os.getcwd(),
        "env": masked_env(dict(request.env)),
        "master_port": request.master_port,
        "num_nodes": request.num_nodes,
        "include": request.include,
        "hostfile": str(request.hostfile) if request.hostfile else None,
        "ssh_port": request.ssh_port,
        "resume_arg": resume_arg,
    }
    atomic_write_text(Path(run_dir) / REQUEST, json.dumps(data, indent=2, sort_keys=True) + "\n")
    if resume_arg:
        remember_template(resume_arg, script=data["script"], cwd=data["cwd"], preset=preset_name)


def load_request(run_dir: Path | str) -> dict[str, Any]:
    path = Path(run_dir) / REQUEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResumeError(f"{path} is missing: the run was started before traindeck kept launch requests, or "
                          "outside `traindeck run`/the dashboard") from None
    except (OSError, ValueError) as exc:
        raise ResumeError(f"{path}: cannot be read: {exc}") from None
    if not isinstance(data, dict) or not data.get("script"):
        raise ResumeError(f"{path}: not a launch request")
    return data


def request_from(data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Any:
    """The LaunchRequest a saved request.json stands for. Masked secrets come from `environ` (default: this
    process's environment), as they did at the first launch; a masked script argument cannot be recovered."""
    from traindeck.backend.launch.builders import LaunchRequest
    from traindeck.backend.presets import PresetError, preset_from_mapping

    environ = os.environ if environ is None else environ
    args = [str(a) for a in data.get("script_args") or []]
    if MASK in args or any(a.endswith("=" + MASK) for a in args):
        raise ResumeError("an argument of the script was a secret (it was written down as ***); start the run "
                          "again with `traindeck run` and give it")
    env: dict[str, str] = {}
    for key, value in (data.get("env") or {}).items():
        if value == MASK or MASK in str(value):
            if key not in environ:
                raise ResumeError(f"the run's environment variable {key} was a secret (not written down); set it "
                                  "in this shell and try again")
            env[key] = environ[key]
        else:
            env[key] = str(value)
    preset = None
    if data.get("preset") is not None:
        try:
            preset = preset_from_mapping(data["preset"], name=data.get("preset_name") or "rerun")
        except PresetError as exc:
            raise ResumeError(f"the run's preset cannot be read back: {exc}") from None
    config = Path(data["config_file"]) if data.get("config_file") else None
    if config is not None and not config.is_file():
        raise ResumeError(f"the run's config file is gone: {config}")
    entry: Any = data.get("entry") or "script"  # none: a script file; build_plan names a wrong one
    return LaunchRequest(script=str(data["script"]), script_args=args, entry=entry, preset=preset, config_file=config,
                         launcher=data.get("launcher"), nproc=data.get("nproc"), python=data.get("python"),
                         cwd=Path(data["cwd"]) if data.get("cwd") else None, env=env,
                         master_port=data.get("master_port"), num_nodes=data.get("num_nodes"),
                         include=data.get("include"),
                         hostfile=Path(data["hostfile"]) if data.get("hostfile") else None,
                         ssh_port=data.get("ssh_port") if isinstance(data.get("ssh_port"), int) else None)


# ---- resume templates ---------------------------------------------------------------------------------------
def _templates_path() -> Path:
    return data_dir() / "resume_args.json"


def _template_keys(script: str, cwd: str, preset: str | None) -> list[str]:
    keys = [f"script:{Path(cwd, script).resolve()}"]
    if preset:
        keys.append(f"preset:{preset}")
    return keys


def check_template(template: str) -> None:
    try:
        parts = shlex.split(template)
    except ValueError as exc:
        raise ResumeError(f"resume argument template {template!r}: {exc}") from None
    if not parts or not any("{" in p for p in parts):
        raise ResumeError(f"resume argument template {template!r} has no placeholder; use e.g. "
                          "'--load {checkpoint}' (placeholders: {checkpoint}, {checkpoint_dir}, {tag}, {step})")
    for part in parts:
        try:
            part.format(**dict.fromkeys(PLACEHOLDERS, "x"))
        except (KeyError, IndexError, ValueError) as exc:
            raise ResumeError(f"resume argument template {template!r}: unknown placeholder {exc}; use "
                              "{checkpoint}, {checkpoint_dir}, {tag} or {step}") from None


def remember_template(template: str, *, script: str, cwd: str, preset: str | None) -> None:
    """Keep the template for this script (and preset), so the next `resume` of it needs none."""
    check_template(template)
    path = _templates_path()
    ensure_private_dir(path.parent)
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    for key in _template_keys(script, cwd, preset):
        known[key] = template
    atomic_write_text(path, json.dumps(known, indent=2, sort_keys=True) + "\n")


def remembered_template(script: str, cwd: str, preset: str | None) -> str | None:
    try:
        known = json.loads(_templates_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(known, dict):
        return None
    for key in _template_keys(script, cwd, preset):
        if isinstance(known.get(key), str):
            return str(known[key])
    return None


def resume_args(script_args: Sequence[str], checkpoint: Checkpoint, template: str | None) -> list[str]:
    """The script's arguments with the resume argument: replaces an earlier one of the same option."""
    if template is None:
        if checkpoint.kind != HF_TRAINER:
            raise ResumeError(f"how does this script resume from a {checkpoint.kind} checkpoint? give the argument "
                              "once with --resume-arg, e.g. --resume-arg '--load {checkpoint_dir} --tag {tag}'")
        template = HF_RESUME_OPTION + " {checkpoint}"
    check_template(template)
    path = Path(checkpoint.path)
    values = {"checkpoint": str(path), "checkpoint_dir": str(path.parent), "tag": path.name,
              "step": "" if checkpoint.step is None else str(checkpoint.step)}
    added = [part.format(**values) for part in shlex.split(template)]
    options = {a.partition("=")[0] for a in added if a.startswith("-")}
    kept: list[str] = []
    skip_value = False
    for arg in script_args:
        if skip_value:
            skip_value = False
            if not arg.startswith("-"):
                continue
        name, eq, _ = arg.partition("=")
        if name in options:
            skip_value = not eq
            continue
        kept.append(arg)
    return kept + added


# ---- lineage --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lineage:
    parent: str | None
    resumed_from: str | None  # the checkpoint's path
    how: str  # "rerun" | "resume"


def save_lineage(run_dir: Path | str, lineage: Lineage) -> None:
    atomic_write_text(Path(run_dir) / LINEAGE, json.dumps(lineage.__dict__, indent=2, sort_keys=True) + "\n")


def load_lineage(run_dir: Path | str) -> Lineage | None:
    try:
        data = json.loads((Path(run_dir) / LINEAGE).read_text(encoding="utf-8"))
        return Lineage(data.get("parent"), data.get("resumed_from"), str(data.get("how") or ""))
    except (OSError, ValueError, AttributeError):
        return None

"""What a launch of a preset would run, before there is a run: the command line and the config files, from the
same plan the launch builds (preview_plan -> build_plan), with the two things only a real launch
decides left as placeholders: the run directory's id (RUN_ID) and a free rendezvous port (FREE_PORT).

Starts nothing. It looks at the file system (does the script exist, which interpreter is on PATH, the training
interpreter's last probe in the cache) and may test whether a fixed port is free, so call it off a UI thread.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from traindeck.backend.core.paths import runs_dir
from traindeck.backend.launch.builders import (
    LaunchRequest,
    accelerate_system_problems,
    build_plan,
    hardware_notes,
)
from traindeck.backend.launch.environ import masked_env, resolve_python
from traindeck.backend.launch.plan import Entry, Launcher, LaunchPlan
from traindeck.backend.launch.probe import TrainingEnvironment, cached_environment
from traindeck.backend.presets import Preset

RUN_ID = "RUN_ID"  # stands for the run directory's name, chosen at launch
FREE_PORT = "FREE_PORT"  # stands for the free port picked at launch
PLACEHOLDER_SCRIPT = "train.py"  # shown when no script is chosen yet
# Shown for a module or a command not chosen yet.
_PLACEHOLDERS = {"script": PLACEHOLDER_SCRIPT, "module": "train", "command": "train"}
_MISSING_TARGET = ("script not found", "command not found")


@dataclass(frozen=True)
class LaunchPreview:
    command: str  # the argv as one shell-quoted line
    argv: list[str]
    cwd: str
    env: dict[str, str]  # the variables the user added, secrets masked
    files: dict[str, str]  # file name -> text, as written into the run directory
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    run_dir: str = ""
    # What this machine's training interpreter cannot run of a valid config (FSDP or Megatron-LM without CUDA):
    # a launch here refuses it, `config check` warns. Not among `errors`; the "runs on the CPU" note is left out
    # beside it (the run does not start).
    machine: list[str] = field(default_factory=list)


def preview_launch(preset: Preset, *, script: str = "", script_args: Sequence[str] = (), cwd: str | None = None,
                   python: str | None = None, nproc: int | None = None, launcher: str | None = None,
                   env: Mapping[str, str] | None = None, entry: str = "script") -> LaunchPreview:
    """The command and files a launch of `preset` with these choices would use. `entry` says what `script` is:
    "script", "module" or "command" (LaunchRequest.entry). With no `script`, a placeholder stands for it
    (PLACEHOLDER_SCRIPT for a script) and its absence is not reported. What the training interpreter lacks (an
    FSDP config without CUDA, a missing package) is said as a launch says it when the interpreter's last probe is
    still in the cache; nothing is probed here. A valid config this machine cannot run is in `machine`, not in
    `errors`: the preset is right, the machine is what cannot run it (as `config check` says it)."""
    if script and entry == "script":
        script = str(Path(script).expanduser())
    request = LaunchRequest(script=script or _PLACEHOLDERS.get(entry, PLACEHOLDER_SCRIPT),
                            entry=cast("Entry", entry),  # build_plan names a wrong one
                            script_args=list(script_args), preset=preset,
                            launcher=cast("Launcher | None", launcher or None),  # build_plan names a wrong one
                            nproc=nproc, python=python or None, cwd=Path(cwd) if cwd else None, env=dict(env or {}))
    environment = cached_environment(resolve_python(python or None))
    plan = preview_plan(request, environment)
    machine = accelerate_system_problems(preset.accelerate, environment, plan.nproc) \
        if plan.launcher == "accelerate" else []
    machine = [m for m in machine if m in plan.errors]
    errors = [e for e in plan.errors if (script or not e.startswith(_MISSING_TARGET)) and e not in machine]
    warnings = list(plan.warnings)
    if machine and environment is not None:
        cpu = set(hardware_notes(environment, plan.launcher, plan.nproc, request))
        warnings = [w for w in warnings if w not in cpu]
    return LaunchPreview(command=shlex.join(plan.argv), argv=list(plan.argv), cwd=plan.cwd,
                         env=masked_env(dict(env or {})), files=dict(plan.files), errors=errors,
                         warnings=warnings, run_dir=plan.run_dir, machine=machine)


def preview_plan(request: LaunchRequest, environment: TrainingEnvironment | None = None) -> LaunchPlan:
    """The plan a launch would build for `request`, to show before launch. The two things only the launch
    decides are placeholders: the run directory is runs_dir()/RUN_ID and a picked port is FREE_PORT (a fixed port is
    checked for real). Starts nothing, creates nothing; may test a port, so keep it off a UI thread."""
    picked: list[int] = []

    def free_port() -> int:
        picked.append(0)
        return 0

    plan = build_plan(request, runs_dir() / RUN_ID, environment=environment, free_port=free_port)
    if not picked:
        return plan
    argv = [FREE_PORT if arg == "0" and i and plan.argv[i - 1] in ("--main_process_port", "--master_port") else arg
            for i, arg in enumerate(plan.argv)]
    return dataclasses.replace(plan, argv=argv)

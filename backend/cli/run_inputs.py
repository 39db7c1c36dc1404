"""What `run` and `queue add` share: the preset named on the command line, the pre-launch memory check, `--gpus`
for a start now, and putting a run (or a sweep's runs) in the queue. Both commands import this; neither imports
the other for it (queue_cmd builds its `add` parser from run_cmd's, one way)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindeck.backend.cli import UserError

if TYPE_CHECKING:
    from traindeck.backend.launch import LaunchRequest
    from traindeck.backend.queue import QueueStore
    from traindeck.backend.runs import RunRecord


def load_preset_named(name: str) -> Any:
    from traindeck.backend.presets import PresetError, load_preset

    try:
        return load_preset(name)
    except PresetError as exc:
        raise UserError(str(exc)) from exc


def run_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment `run`'s switches add to the run: --stop-on-nan, --no-step-timing."""
    from traindeck.backend.runs import STEP_TIMING_ENV, STOP_ON_NAN_ENV

    env = {STOP_ON_NAN_ENV: "1"} if getattr(args, "stop_on_nan", False) else {}
    if getattr(args, "no_step_timing", False):
        env[STEP_TIMING_ENV] = "0"
    return env


def launch_request(args: argparse.Namespace, script: str, script_args: list[str],
                   gpus: tuple[int, ...] | None) -> LaunchRequest:
    """The LaunchRequest `traindeck run` builds from its options (the dashboard's Launch page builds the same)."""
    from traindeck.backend.launch import LaunchRequest

    preset = None
    if args.preset:
        preset = load_preset_named(args.preset)
    config = Path(args.config).expanduser() if args.config else None
    if config is not None and not config.is_file():
        raise UserError(f"config file not found: {config}")
    if args.ssh_port is not None and not args.hostfile:
        raise UserError("--ssh-port goes with --hostfile")
    return LaunchRequest(script=script, script_args=script_args, entry=getattr(args, "entry", "script"),
                         preset=preset, config_file=config, launcher=args.launcher, nproc=args.nproc, python=args.python, cwd=Path.cwd(),
                         gpus=gpus, env=run_env(args),
                         hostfile=Path(args.hostfile).expanduser() if args.hostfile else None,
                         ssh_port=args.ssh_port)


def memory_check(size: str, preset: Any, config: Path | None, nproc: int | None) -> Any:
    """The pre-launch memory check, printed; None when there is nothing to check against (python launcher)."""
    from traindeck.backend.estimate import check_preset, read_model_size
    from traindeck.backend.presets import PresetError, import_preset

    if preset is None and config is not None:
        try:
            preset = import_preset([config], "command-line", save=False)
        except PresetError as exc:
            raise UserError(str(exc)) from exc
    if preset is None:
        print("traindeck: note: --model-size needs --preset or --config to know the strategy; not checked",
              file=sys.stderr)
        return None
    try:
        shape = read_model_size(size)
    except (ValueError, OSError) as exc:
        raise UserError(f"--model-size {size}: {exc}") from exc
    check = check_preset(preset, shape, nproc)
    print(f"traindeck: memory check ({check.row.label}): {check.verdict}", file=sys.stderr)
    for line in check.lines():
        print(f"traindeck:   {line}", file=sys.stderr)
    for warning in check.warnings:
        print(f"traindeck: warning: {warning}", file=sys.stderr)
    if check.does_not_fit:
        print("traindeck: warning: the run is likely to be killed for lack of memory (launching anyway)",
              file=sys.stderr)
    return check


def run_gpus(text: str | None) -> tuple[int, ...] | None:
    """`run --gpus`: chosen GPUs as they are; `any:N` picks N free GPUs now (or says how many are free)."""
    if not text:
        return None
    from traindeck.backend.queue import gpus_for_launch_now, parse_gpus, sample_gpus

    try:
        request = parse_gpus(text)
        return request.ids if request.ids else gpus_for_launch_now(text, sample_gpus())  # chosen ones: no NVML
    except ValueError as exc:
        raise UserError(str(exc) + (": traindeck queue add --gpus ..." if "waiting" in str(exc) else "")) from exc


def open_queue() -> QueueStore:
    from traindeck.backend.queue import QueueStore
    from traindeck.backend.runs import reconcile

    queue = QueueStore()
    reconcile(queue.runs, report=lambda text: print(f"traindeck: {text}", file=sys.stderr))
    return queue


def _say_sweep_note(note: str) -> None:
    print(f"traindeck: note: sweep {note}", file=sys.stderr)


def check_target(target: str, entry: str, cwd: Path) -> None:
    """What a queued run starts, checked now rather than at its turn: a script file that is there, a dotted module
    name (whether it imports is the training interpreter's to say, at launch), a command on PATH or an executable
    file. Raises UserError with one line."""
    if entry == "module":
        if not all(part.isidentifier() for part in target.split(".")):
            raise UserError(f"not a module name: {target!r} (a dotted name such as pkg.train)")
    elif entry == "command":
        if os.sep in target:
            path = cwd / target
            if not path.is_file() or not os.access(path, os.X_OK):
                raise UserError(f"command not found or not executable: {target} (in {cwd})")
        elif shutil.which(target) is None:
            raise UserError(f"command not found on PATH: {target}")
    elif not (cwd / target).is_file():
        raise UserError(f"script not found: {target} (in {cwd})")


def enqueue(args: argparse.Namespace, held: bool = False) -> list[RunRecord]:
    """Queue what `run`/`queue add` was given (one run, or one per sweep combination); prints the ids."""
    from traindeck.backend.queue import QueuedLaunch, queue_launches

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UserError("which script? usage: traindeck queue add [options] SCRIPT|-m MODULE|--command COMMAND "
                        "[ARGS...]")
    entry = getattr(args, "entry", "script")
    script, script_args = command[0], command[1:]
    check_target(script, entry, Path.cwd())
    if args.nproc is not None and args.nproc < 1:
        raise UserError("--nproc must be at least 1")
    preset = load_preset_named(args.preset) if args.preset else None  # a wrong name is said now, not at its turn
    config = str(Path(args.config).expanduser().absolute()) if args.config else None
    if config is not None and not Path(config).is_file():
        raise UserError(f"config file not found: {config}")
    if getattr(args, "model_size", None):  # advice for now; the GPUs free at its turn are not known yet
        memory_check(args.model_size, preset, Path(config) if config else None, args.nproc)
        print("traindeck: note: the memory check is not kept with a queued run", file=sys.stderr)
    env = run_env(args)
    launch = QueuedLaunch(script=script, script_args=script_args, entry=entry, preset=args.preset,
                          config_file=config, launcher=args.launcher, nproc=args.nproc, python=args.python,
                          cwd=os.getcwd(), env=env)
    queue = open_queue()
    try:
        records = queue_launches(queue, launch, name=args.name or "",
                                 sweep=getattr(args, "sweep", None) or [], gpus=getattr(args, "gpus", None) or "",
                                 held=held, report=_say_sweep_note)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    finally:
        queue.close()
    for record in records:
        print(f"queued run {record.id} ({record.name})", file=sys.stderr)
    for record in records:
        print(record.id)
    return records

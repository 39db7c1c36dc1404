"""`traindeck trial ...`: find the fastest set-up that fits by measuring it (backend/trials).

`trial [options of run] [trial options] SCRIPT [ARGS...]` plans the candidates, starts the trial's detached driver
(the trial outlives this command) and, unless --detach, prints each candidate's row as it finishes and `winner: ID
...` last (exit 0 with a winner, 1 without). `trial show ID`, `trial stop ID` and `trial use ID --preset NAME` act
on a trial by its id (a unique prefix, or `last`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindeck.backend.cli import UserError

if TYPE_CHECKING:
    from traindeck.backend.trials import TrialFolder, TrialState

ORDER = 36
ACTIONS = ("show", "stop", "use")
POLL_S = 0.5


def register(sub: argparse._SubParsersAction) -> None:
    from traindeck.backend.cli import run_cmd

    # "every option of run": copied from run's own parser (as `queue add` does), so the two never drift apart.
    scratch = argparse.ArgumentParser(add_help=False).add_subparsers()
    run_cmd.register(scratch)
    p = sub.add_parser("trial", parents=[scratch.choices["run"]], conflict_handler="resolve",
                       help="find the fastest set-up that fits: short measured runs of ZeRO stage x offload x "
                            "micro-batch on your script",
                       description="Run SCRIPT briefly under each candidate set-up (one at a time, each a normal "
                                   "supervised run, stopped after the warm-up and the measured steps), then rank "
                                   "them by throughput and peak memory. The trial outlives this command. Also: "
                                   "`trial show ID [--json]`, `trial stop ID` (keeps what was measured), `trial use "
                                   "ID --preset NAME` (a preset from the winner).")
    # Said if given. (-m and --command stay listed: hiding an option of a mutually exclusive group breaks
    # argparse's usage line.)
    for refused in ("--sweep", "--hostfile", "--ssh-port", "--resume-arg", "--no-step-timing"):
        p._option_string_actions[refused].help = argparse.SUPPRESS
    p.add_argument("--stages", metavar="LIST", help="ZeRO stages to try, e.g. 2,3 (default 0,1,2,3)")
    p.add_argument("--offload", metavar="LIST", help="none, cpu (optimizer), cpu+params (optimizer and parameters, "
                   "stage 3), nvme:PATH (stage 3); default none,cpu")
    p.add_argument("--micro-batch", metavar="LIST", help="micro-batches per GPU to try, e.g. 1,2,4 (default: "
                   "doubling from 1 while a set-up is measured with room to spare)")
    p.add_argument("--checkpointing-arg", metavar="ARG", help="the script's argument that turns activation "
                   "checkpointing on (e.g. --gradient_checkpointing): each candidate is tried without and with it")
    p.add_argument("--steps", type=int, default=20, metavar="N", help="measured steps per candidate (default 20)")
    p.add_argument("--warmup", type=int, default=3, metavar="W", help="steps before measuring (default 3)")
    p.add_argument("--headroom", type=float, default=0.1, metavar="FRACTION",
                   help="memory to leave free; a candidate using more is 'too tight' (default 0.1 = 10%%)")
    p.add_argument("--keep-global-batch", action="store_true", help="adjust gradient accumulation so that every "
                   "candidate trains with the base preset's global batch")
    p.add_argument("--memory-limit", metavar="SIZE", help="host memory one rank may use (e.g. 8GiB): a candidate "
                   "over it is stopped and counted failed (host_oom); headroom is measured against it")
    p.add_argument("--candidate-timeout", type=float, default=900.0, metavar="SECONDS",
                   help="a candidate with no new step for this long is stopped and counted failed (default 900)")
    p.add_argument("--json", action="store_true", help="print the result as JSON at the end instead of the table")
    p.add_argument("--detach", action="store_true", help="start the trial and print its id instead of following it")
    p.set_defaults(handler=_trial)
    driver = sub.add_parser("_trial-driver")  # internal: how a frozen app starts a trial's driver
    driver.add_argument("path")
    driver.set_defaults(handler=lambda a: __import__("traindeck.backend.trials.driver",
                                                     fromlist=["main"]).main([a.path]))


def _trial(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if command and command[0] in ACTIONS:
        return _action(command[0], command[1:])
    if not command:
        raise UserError("which script? usage: traindeck trial [options] SCRIPT [ARGS...] (or trial show|stop|use ID)")
    for option, given in (("--sweep", args.sweep), ("--hostfile", args.hostfile), ("--ssh-port", args.ssh_port),
                          ("--resume-arg", args.resume_arg)):
        if given:
            raise UserError(f"{option} does not go with a trial (it runs each candidate on this machine, briefly)")
    if args.no_step_timing:
        raise UserError("--no-step-timing does not go with a trial: its steps are counted and timed by it")
    if getattr(args, "entry", "script") != "script":
        raise UserError(f"a trial runs a script; a {args.entry} (-m / --command) is not tried yet: give the script "
                        "path the module or command runs")
    script, script_args = command[0], command[1:]
    if not (Path.cwd() / script).is_file():
        raise UserError(f"script not found: {script} (in {Path.cwd()})")
    if args.nproc is not None and args.nproc < 1:
        raise UserError("--nproc must be at least 1")
    from traindeck.backend.cli.run_inputs import load_preset_named, run_env, run_gpus
    from traindeck.backend.trials import TrialError, TrialOptions, base_preset, create_trial, plan_trial

    preset = load_preset_named(args.preset) if args.preset else None
    config = Path(args.config).expanduser().absolute() if args.config else None
    if config is not None and not config.is_file():
        raise UserError(f"config file not found: {config}")
    limit = _size(args.memory_limit) if args.memory_limit else None
    options = TrialOptions(script=script, script_args=tuple(script_args), name=args.name or Path(script).stem,
                           launcher=args.launcher, nproc=args.nproc, python=args.python, cwd=str(Path.cwd()),
                           env=tuple(run_env(args).items()), gpus=run_gpus(args.gpus), stages=args.stages,
                           offload=args.offload, micro_batch=args.micro_batch,
                           checkpointing_arg=args.checkpointing_arg, steps=args.steps, warmup=args.warmup,
                           headroom=args.headroom, keep_global_batch=args.keep_global_batch, memory_limit=limit,
                           candidate_timeout_s=args.candidate_timeout, model_size=args.model_size)
    try:
        spec = plan_trial(options, base_preset(preset, config))
    except TrialError as exc:
        raise UserError(str(exc)) from None
    for note in spec.notes:
        print(f"traindeck: note: {note}", file=sys.stderr)
    print(f"traindeck: trial {spec.id}: {len(spec.candidates)} candidate(s) to measure"
          + (f", {len(spec.skipped)} skipped by the estimate" if spec.skipped else "")
          + (" (micro-batches double from 1)" if spec.ladder else "")
          + f", {spec.warmup} warm-up + {spec.steps} measured steps each", file=sys.stderr)
    try:
        folder = create_trial(spec)
    except OSError as exc:
        raise UserError(str(exc)) from None
    if args.detach:
        print(f"started trial {spec.id}; see it with: traindeck trial show {spec.id}", file=sys.stderr)
        print(spec.id)
        return 0
    return _follow(folder, as_json=args.json)


def _size(text: str) -> int:
    from traindeck.backend.estimate import parse_size

    try:
        return parse_size(text, "--memory-limit")
    except ValueError as exc:
        raise UserError(str(exc)) from None


# ---- following ------------------------------------------------------------------------------------------------
def _follow(folder: TrialFolder, as_json: bool) -> int:
    """Print rows as candidates finish until the trial ends; Ctrl+C asks the trial to stop (a second leaves it)."""
    from traindeck.backend.trials import driver_alive

    printed = 0
    stopping = False
    if not as_json:
        print(_header(), flush=True)
    while True:
        try:
            state = folder.state()
            if not as_json:
                printed = _print_rows(state, printed)
            if state.driver_pid is None:
                state.driver_pid = folder.driver_pid  # the driver has not written its state yet
            if state.finished or not driver_alive(state):
                break
            time.sleep(POLL_S)
        except KeyboardInterrupt:
            if stopping:
                print(f"traindeck: left trial {folder.id} to stop by itself", file=sys.stderr)
                return 130
            stopping = True
            folder.request_stop()
            print(f"traindeck: stopping trial {folder.id} (what was measured is kept); Ctrl+C again to leave it",
                  file=sys.stderr)
    return _final(folder, state, as_json, printed)


def _final(folder: TrialFolder, state: TrialState, as_json: bool, printed: int) -> int:
    from traindeck.backend.trials import time_line, trial_json, winner, winner_lines

    if as_json:
        print(json.dumps(trial_json(state, folder.spec()), indent=1))
        return 0 if winner(state.results) is not None else 1
    _print_rows(state, printed)
    if not state.finished:
        print(f"traindeck: the trial's driver ended before the trial did; its log: {folder.log_path}",
              file=sys.stderr)
    if state.detail:
        print(f"traindeck: {state.detail}", file=sys.stderr)
    line = time_line(state)
    if line:
        print(line)
    for text in winner_lines(state):
        print(text)
    return 0 if winner(state.results) is not None else 1


def _header() -> str:
    from traindeck.backend.trials import HEADER

    return HEADER


def _print_rows(state: TrialState, printed: int) -> int:
    """Rows in order, up to the first candidate not finished yet; returns how many are printed now."""
    from traindeck.backend.trials import row_text

    while printed < len(state.results) and state.results[printed].finished:
        print(row_text(printed, state.results[printed]), flush=True)
        printed += 1
    return printed


# ---- show / stop / use ------------------------------------------------------------------------------------------
def _action(action: str, rest: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"traindeck trial {action}")
    parser.add_argument("id", metavar="ID", help="a trial id, a unique prefix of one, or `last`")
    if action == "show":
        parser.add_argument("--json", action="store_true")
    if action == "use":
        parser.add_argument("--preset", required=True, metavar="NAME", help="the user preset to write")
        parser.add_argument("--overwrite", action="store_true", help="replace a user preset of that name")
    args = parser.parse_args(rest)
    from traindeck.backend.trials import TrialFolder, resolve_trial

    try:
        folder = TrialFolder(resolve_trial(args.id))
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    if action == "show":
        return _show(folder, args.json)
    if action == "stop":
        return _stop(folder)
    return _use(folder, args.preset, args.overwrite)


def _show(folder: TrialFolder, as_json: bool) -> int:
    from traindeck.backend.trials import driver_alive, row_text, time_line, trial_json, winner_lines

    state = folder.state()
    if as_json:
        print(json.dumps(trial_json(state, folder.spec()), indent=1))
        return 0
    running = "" if state.finished else (" (running)" if driver_alive(state) else " (its driver is gone)")
    print(f"trial {state.id}: {state.state}{running}")
    print(_header())
    for i, result in enumerate(state.results):
        text = row_text(i, result)
        print(text if result.finished else text.replace(result.state.replace("_", " "), result.state + "...", 1))
    if state.finished:
        line = time_line(state)
        if line:
            print(line)
        for text in winner_lines(state):
            print(text)
    return 0


def _stop(folder: TrialFolder) -> int:
    """Ask the driver to stop the candidate running now and end the trial; without a driver, stop it here."""
    from traindeck.backend.trials import stop_trial

    if not folder.state().finished:
        print(f"asked trial {folder.id} to stop: the candidate running now is stopped; what was measured is kept",
              flush=True)
    outcome = stop_trial(folder)
    if outcome == "already_ended":
        print(f"trial {folder.id} already ended ({folder.state().state})")
    elif outcome == "pending":
        print(f"traindeck: trial {folder.id} has not stopped yet; it will", file=sys.stderr)
        return 1
    else:
        gone = " (its driver was gone)" if outcome == "stopped_without_driver" else ""
        print(f"trial {folder.id} stopped{gone}; `traindeck trial show {folder.id}` shows what was measured")
    return 0


def _use(folder: TrialFolder, name: str, overwrite: bool) -> int:
    from traindeck.backend.presets import PresetError, save_preset
    from traindeck.backend.trials import winner_preset

    spec, state = folder.spec(), folder.state()
    try:
        preset = winner_preset(spec, state, name)
        path = save_preset(preset, overwrite=overwrite)
    except (ValueError, PresetError) as exc:
        raise UserError(str(exc)) from None
    print(f"saved preset '{name}' ({preset.description}) to {path}", file=sys.stderr)
    args: list[Any] = [spec.script, *spec.script_args]
    print(f"run it with: traindeck run --preset {name} " + " ".join(str(a) for a in args), file=sys.stderr)
    print(name)
    return 0

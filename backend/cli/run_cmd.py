"""`traindeck run`, `traindeck logs`, `traindeck stop`: the run engine's command line (`runs list|show`: runs_cmd).

`run` starts a detached supervisor and, unless --detach, follows the run in the foreground (run_follow: the
output, a live progress line on a terminal, and the run's status as the exit code: 0 succeeded, the run's exit
code otherwise, 130 after Ctrl+C, which asks the supervisor to stop the run gracefully; a second Ctrl+C forces it).
What runs is a script file (`traindeck run train.py ...`), a module (`traindeck run -m pkg.train ...`, as
`python -m`), or a command (`traindeck run --command -- llamafactory-cli train ...`: an executable or console
script on PATH, run as it is, or under a chosen launcher through its own flag). Everything after SCRIPT, MODULE or
COMMAND is passed to it unchanged, options and `--` included.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from traindeck.backend.cli import UserError
from traindeck.backend.cli.run_follow import report_plan
from traindeck.backend.cli.run_lookup import open_store, resolve_run

if TYPE_CHECKING:
    from traindeck.backend.runs import RunRecord, RunStore

ORDER = 30
LAUNCHERS = ("accelerate", "deepspeed", "python", "torchrun")
USAGE_TARGET = "SCRIPT|-m MODULE|--command COMMAND"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="launch a training run (supervised; outlives this command)",
                       description="Launch a script, a module (-m MODULE) or a command (--command -- COMMAND) "
                                   "under a supervisor that outlives this command. Everything after SCRIPT, MODULE "
                                   "or COMMAND goes to it unchanged.")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--preset", metavar="NAME", help="launch set-up from this preset")
    source.add_argument("--config", metavar="FILE", help="an accelerate YAML or DeepSpeed JSON config file")
    p.add_argument("--launcher", choices=LAUNCHERS, help="default: the preset's, else from the config, else python "
                   "(torchrun when --nproc is over 1)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("-m", "--module", dest="entry", action="store_const", const="module", default="script",
                        help="the first word after the options is a module, run as `python -m MODULE` (under a "
                             "launcher: its --module)")
    target.add_argument("--command", dest="entry", action="store_const", const="command",
                        help="the first word after the options (and `--`) is a command: an executable or console "
                             "script on PATH, run as it is (one that starts torchrun itself, say); under a "
                             "launcher: its --no_python")
    p.add_argument("--nproc", type=int, metavar="N", help="processes (ranks) on this machine")
    p.add_argument("--python", metavar="PATH", help="the training interpreter (default: this Python)")
    p.add_argument("--name", help="a name for the run (default: the script's name)")
    p.add_argument("--model-size", metavar="N|CONFIG", help="the model's parameter count (1.5B, 350M) or its "
                   "config.json: before launch, the preset's memory estimate is compared with free GPU memory and "
                   "available RAM, and kept with the run to compare with its measured peaks")
    p.add_argument("--gpus", metavar="LIST|any:N", help="run on these GPUs (0,2) or on N free ones (any:2)")
    p.add_argument("--hostfile", metavar="FILE", help="DeepSpeed hostfile ('HOST slots=N' lines): run on every "
                   "host through DeepSpeed's pdsh runner, after checking them (traindeck check-hosts)")
    p.add_argument("--ssh-port", type=int, metavar="N", help="with --hostfile: the hosts' SSH port")
    p.add_argument("--stop-on-nan", action="store_true", help="stop the run gracefully when its loss becomes NaN/inf")
    p.add_argument("--no-step-timing", action="store_true", help="do not time each rank's step phases "
                   "(forward, backward, communication, optimizer) from inside the ranks (see `traindeck steps`)")
    p.add_argument("--sweep", action="append", metavar="NAME=V1,V2", help="queue one run per combination of values "
                   "(a script option --NAME, or a preset value: zero_stage, deepspeed.KEY.PATH); repeatable")
    p.add_argument("--detach", action="store_true", help="start the run and print its id (last line) instead of "
                                                         "following it")
    p.add_argument("--resume-arg", metavar="TEMPLATE", help="how the script resumes from a checkpoint, e.g. "
                   "'--load {checkpoint}': kept with the run and remembered for the script (`traindeck resume`)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="SCRIPT|MODULE|COMMAND [ARGS...]")
    p.set_defaults(handler=_run)

    logs = sub.add_parser("logs", help="print a run's output (whole), optionally following it")
    logs.add_argument("id", metavar="ID")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the run ends")
    logs.add_argument("--rank", type=int, metavar="N", help="only lines the launcher tagged with this rank")
    logs.add_argument("--node", metavar="HOST", help="only lines of this node (multi-node runs: pdsh's `HOST: `)")
    logs.add_argument("--raw", action="store_true", help="the bytes as written (progress-bar redraws included)")
    logs.set_defaults(handler=_logs)

    stop = sub.add_parser("stop", help="stop a run: SIGINT, then SIGTERM, then SIGKILL over all its processes")
    stop.add_argument("id", metavar="ID")
    stop.add_argument("--grace", type=float, default=10.0, metavar="SECONDS",
                      help="wait this long after SIGINT before SIGTERM (and again, up to 10 s, before SIGKILL)")
    stop.set_defaults(handler=_stop)

    # Internal: how a frozen app (no `python -m`) starts a run's supervisor and sentinel. Not listed in --help.
    supervise = sub.add_parser("_supervise")
    supervise.add_argument("run_dir")
    supervise.set_defaults(handler=lambda a: _internal("supervisor", [a.run_dir]))
    sentinel = sub.add_parser("_sentinel")
    sentinel.add_argument("run_id")
    sentinel.add_argument("store")
    sentinel.set_defaults(handler=lambda a: _internal("sentinel", [a.run_id, a.store]))


def _internal(module: str, argv: list[str]) -> int:
    import importlib

    from traindeck.backend.runs import INTERNAL_MODULES

    return int(importlib.import_module(INTERNAL_MODULES[module]).main(argv))


# ---- run ------------------------------------------------------------------------------------------------------
def _run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":  # separates our options from SCRIPT; later ones belong to the script
        command = command[1:]
    if not command:
        raise UserError(f"which script? usage: traindeck run [options] {USAGE_TARGET} [ARGS...]")
    if args.sweep:  # a sweep is several runs: they wait in the queue
        from traindeck.backend.cli.run_inputs import enqueue

        enqueue(args)
        return 0
    script, script_args = command[0], command[1:]
    if args.nproc is not None and args.nproc < 1:
        raise UserError("--nproc must be at least 1")
    from traindeck.backend.cli.run_inputs import launch_request, memory_check, run_gpus

    gpus = run_gpus(args.gpus)

    from traindeck.backend.runs import launch_run

    request = launch_request(args, script, script_args, gpus)
    environment = _probe(args.python)
    check = (memory_check(args.model_size, request.preset, request.config_file, args.nproc) if args.model_size
             else None)
    name = args.name or ""  # the default one is made where the run is recorded, told apart from the store's
    if not args.detach:
        # What following needs is loaded now, not while the job starts: on a small machine that CPU is the job's.
        from traindeck.backend.cli import run_follow  # noqa: F401
        from traindeck.backend.runs.record import log_follow as follow  # noqa: F401
    if args.resume_arg:
        from traindeck.backend.runs import ResumeError, check_template

        try:
            check_template(args.resume_arg)
        except ResumeError as exc:
            raise UserError(str(exc)) from None
    outcome = launch_run(request, name=name, preset_name=args.preset, environment=environment,
                         memory_check=check, resume_arg=args.resume_arg,
                         wrap=getattr(args, "wrap_plan", None))  # --slurm (slurm_cmd) sets it
    plan = outcome.plan
    record = outcome.record
    if not report_plan(plan, record is not None) or record is None:
        return 2
    if args.detach:
        print(f"started run {record.id} ({plan.launcher}); follow it with: traindeck logs {record.id} --follow",
              file=sys.stderr)
        print(record.id)
        return 0
    print(f"traindeck: run {record.id} started; log: {record.log_path}", file=sys.stderr)
    from traindeck.backend.cli.run_follow import follow_run
    from traindeck.backend.runs import RunStore

    return follow_run(RunStore(), record.id)


def default_name(target: str, entry: str, preset: str | None = None) -> str:
    """A run's name when none is given: the script's stem, the module's last part, the command's file name, then
    `-PRESET` when a preset is used."""
    from traindeck.backend.launch import default_run_name

    return default_run_name(target, entry, preset)


def _probe(python: str | None) -> Any:
    """The training interpreter's packages (cached by the probe); None if it cannot be asked."""
    try:
        from traindeck.backend.launch import probe_environment, python_problem, resolve_python
    except ImportError:
        return None
    interpreter = resolve_python(python)
    if python_problem(interpreter):
        return None  # build_plan reports it
    try:
        return probe_environment(interpreter)
    except Exception as exc:  # the probe is advice; the launch itself will show what is wrong
        print(f"traindeck: warning: could not ask {interpreter} what it has installed: {exc}", file=sys.stderr)
        return None


# ---- logs / stop ------------------------------------------------------------------------------------------------
def _logs(args: argparse.Namespace) -> int:
    from traindeck.backend.cli.run_follow import is_report, line_text
    from traindeck.backend.runs import follow_lines, supervisor_alive

    store = open_store()
    record = resolve_run(store, args.id)
    if args.raw:
        return _raw_logs(store, record, args.follow)

    def finished() -> bool:
        current = store.get_run(record.id)
        return current is None or current.finished or not supervisor_alive(current)

    out = sys.stdout  # `traindeck logs ID | head`: the closed pipe is handled once for every command (cli.main)
    for line in follow_lines(record.log_path, follow=args.follow, finished=finished):
        if line.transient or is_report(line):
            continue
        if args.rank is not None and getattr(line, "rank", None) != args.rank:
            continue
        if args.node is not None and getattr(line, "node", None) != args.node:
            continue
        out.write(line_text(line) + "\n")
        if args.follow:
            out.flush()
    return 0


def _raw_logs(store: RunStore, record: RunRecord, follow: bool) -> int:
    out = sys.stdout.buffer
    with open(record.log_path, "rb") as handle:
        while True:
            chunk = handle.read(1 << 20)
            if chunk:
                out.write(chunk)
                continue
            current = store.get_run(record.id)
            if not follow or current is None or current.finished:
                out.write(handle.read())
                break
            out.flush()
            time.sleep(0.1)
    out.flush()
    return 0


def _stop(args: argparse.Namespace) -> int:
    from traindeck.backend.runs import stop_run

    if args.grace < 0:
        raise UserError("--grace must be 0 or more seconds")
    store = open_store()
    record = resolve_run(store, args.id)
    outcome = stop_run(store, record.id, grace_s=args.grace, report=lambda text: print(text, flush=True))
    return 0 if not outcome.remaining else 1

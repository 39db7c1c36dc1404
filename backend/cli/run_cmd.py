"""`traindeck run`, `traindeck runs list|show`, `traindeck logs`, `traindeck stop`: the run engine's command line.

`run` starts a detached supervisor and, unless --detach, follows the run in the foreground: the output, a live
progress line on a terminal, and the run's status as the exit code (0 succeeded, the run's exit code otherwise,
130 after Ctrl+C, which asks the supervisor to stop the run gracefully; a second Ctrl+C forces it).
Everything after SCRIPT is passed to the script unchanged, options and `--` included.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindeck.backend.cli import UserError

if TYPE_CHECKING:
    from traindeck.backend.runs.store import RunRecord, RunStore

ORDER = 30
LAUNCHERS = ("accelerate", "deepspeed", "python")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="launch a training run (supervised; outlives this command)",
                       description="Launch SCRIPT under a supervisor that outlives this command. Everything after "
                                   "SCRIPT goes to the script unchanged.")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--preset", metavar="NAME", help="launch set-up from this preset")
    source.add_argument("--config", metavar="FILE", help="an accelerate YAML or DeepSpeed JSON config file")
    p.add_argument("--launcher", choices=LAUNCHERS, help="default: the preset's, else from the config, else python")
    p.add_argument("--nproc", type=int, metavar="N", help="processes (ranks) on this machine")
    p.add_argument("--python", metavar="PATH", help="the training interpreter (default: this Python)")
    p.add_argument("--name", help="a name for the run (default: the script's name)")
    p.add_argument("--model-size", metavar="N|CONFIG", help="the model's parameter count (1.5B, 350M) or its "
                   "config.json: before launch, the preset's memory estimate is compared with free GPU memory and "
                   "available RAM, and kept with the run to compare with its measured peaks")
    p.add_argument("--gpus", metavar="LIST|any:N", help="run on these GPUs (0,2) or on N free ones (any:2)")
    p.add_argument("--stop-on-nan", action="store_true", help="stop the run gracefully when its loss becomes NaN/inf")
    p.add_argument("--sweep", action="append", metavar="NAME=V1,V2", help="queue one run per combination of values "
                   "(a script option --NAME, or a preset value: zero_stage, deepspeed.KEY.PATH); repeatable")
    p.add_argument("--detach", action="store_true", help="start the run and print its id (last line) instead of "
                                                         "following it")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]")
    p.set_defaults(handler=_run)

    runs = sub.add_parser("runs", help="list runs or show one")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="ACTION")
    lst = runs_sub.add_parser("list", help="all runs, newest first")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(handler=_list)
    show = runs_sub.add_parser("show", help="one run: state, progress, metrics, diagnosis, processes")
    show.add_argument("id", metavar="ID", help="run id (or a unique part of it, or the run's name)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_show)
    runs.set_defaults(handler=_list, json=False)

    logs = sub.add_parser("logs", help="print a run's output (whole), optionally following it")
    logs.add_argument("id", metavar="ID")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the run ends")
    logs.add_argument("--rank", type=int, metavar="N", help="only lines the launcher tagged with this rank")
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

    return int(importlib.import_module(f"traindeck.backend.runs.{module}").main(argv))


# ---- helpers --------------------------------------------------------------------------------------------------
def _store() -> RunStore:
    from traindeck.backend.runs.control import reconcile
    from traindeck.backend.runs.store import RunStore

    store = RunStore()
    reconcile(store, report=lambda text: print(f"traindeck: {text}", file=sys.stderr))
    return store


def _resolve(store: RunStore, text: str) -> RunRecord:
    run_id = store.resolve_id(text)
    record = store.get_run(run_id) if run_id else None
    if record is None:
        raise UserError(f"no run matches {text!r} (see `traindeck runs list`)")
    return record


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    from datetime import datetime

    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def _clock(seconds: float | None) -> str:
    from traindeck.backend.runs.watch import duration_text

    return duration_text(seconds) if seconds is not None else "?"


def _progress_text(progress: dict[str, Any] | None) -> str:
    if not progress:
        return ""
    current, total = progress.get("current") or 0, progress.get("total")
    unit = progress.get("unit") or "it"
    text = f"{current:g}/{total:g}" if total else f"{current:g}"
    if total:
        text += f" ({100 * current / total:.0f}%)"
    if progress.get("rate"):
        text += f" {progress['rate']:.3g} {unit}/s"
    if progress.get("eta_s") is not None:
        text += f" ETA {_clock(progress['eta_s'])}"
    return text


def _is_report(line: Any) -> bool:
    """The reporting helper's machine-readable lines: parsed by the supervisor, not shown (they stay in the log)."""
    from traindeck.backend.logparse import REPORT_MARKER

    return bool(line.text.startswith(REPORT_MARKER + "{"))


def _line_text(line: Any) -> str:
    rank = getattr(line, "rank", None)
    return f"[rank{rank}]: {line.text}" if rank is not None else line.text


def run_summary(store: RunStore, record: RunRecord) -> dict[str, Any]:
    """What `runs show --json` prints (and the dashboard may reuse)."""
    progress = record.progress or {}
    data: dict[str, Any] = {
        "id": record.id,
        "name": record.name,
        "state": record.state,
        "state_detail": record.state_detail,
        "exit_code": record.exit_code,
        "diagnosis": record.diagnosis,
        "progress": {k: progress.get(k) for k in ("current", "total", "rate", "eta_s", "unit")} if progress else None,
        "metrics": store.last_metrics(record.id),
        "pids": [{k: p.get(k) for k in ("pid", "role", "rank", "returncode")} for p in record.processes],
        "supervisor_pid": record.supervisor_pid,
        "log": str(record.log_path),
        "run_dir": record.run_dir,
        "launcher": record.launcher,
        "preset": record.preset,
        "script": record.script,
        "argv": record.argv,
        "cwd": record.cwd,
        "created_at": _iso(record.created_at),
        "started_at": _iso(record.started_at),
        "ended_at": _iso(record.ended_at),
    }
    try:
        from traindeck.backend.monitor.store import resource_summary  # optional: numpy may be missing
    except ImportError:
        pass
    else:
        try:
            data["resources"] = resource_summary(store.path, record.id)
        except Exception as exc:  # a missing table or an older recorder must not break `runs show`
            data["resources"] = {"error": str(exc)}
    from traindeck.backend.estimate.run_estimate import estimate_vs_measured, load_estimate

    estimate = load_estimate(record.run_dir) if record.run_dir else None
    data["estimate"] = estimate  # the pre-launch estimate (`run --model-size`, the Launch page), or null
    if estimate is not None and isinstance(data.get("resources"), dict) and "error" not in data["resources"]:
        data["estimate_vs_measured"] = estimate_vs_measured(estimate, data["resources"])
    return data


# ---- run ------------------------------------------------------------------------------------------------------
def _run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":  # separates our options from SCRIPT; later ones belong to the script
        command = command[1:]
    if not command:
        raise UserError("which script? usage: traindeck run [options] SCRIPT [ARGS...]")
    if args.sweep:  # a sweep is several runs: they wait in the queue
        from traindeck.backend.cli.queue_cmd import enqueue

        enqueue(args)
        return 0
    script, script_args = command[0], command[1:]
    if args.nproc is not None and args.nproc < 1:
        raise UserError("--nproc must be at least 1")
    from traindeck.backend.cli.queue_cmd import run_gpus
    from traindeck.backend.runs.watchdog import STOP_ON_NAN_ENV

    gpus = run_gpus(args.gpus)

    from traindeck.backend.launch.builders import LaunchRequest
    from traindeck.backend.runs.launch import launch_run

    preset = None
    if args.preset:
        preset = _load_preset(args.preset)
    config = Path(args.config).expanduser() if args.config else None
    if config is not None and not config.is_file():
        raise UserError(f"config file not found: {config}")
    request = LaunchRequest(script=script, script_args=script_args, preset=preset, config_file=config,
                            launcher=args.launcher, nproc=args.nproc, python=args.python, cwd=Path.cwd(),
                            gpus=gpus, env={STOP_ON_NAN_ENV: "1"} if args.stop_on_nan else {})
    environment = _probe(args.python)
    check = _memory_check(args.model_size, preset, config, args.nproc) if args.model_size else None
    name = args.name or Path(script).stem
    outcome = launch_run(request, name=name, preset_name=args.preset, environment=environment,
                         memory_check=check)
    plan = outcome.plan
    for warning in plan.warnings:
        print(f"traindeck: warning: {warning}", file=sys.stderr)
    if outcome.record is None:
        for error in plan.errors:
            print(f"traindeck: error: {error}", file=sys.stderr)
        return 2
    record = outcome.record
    if args.detach:
        print(f"started run {record.id} ({plan.launcher}); follow it with: traindeck logs {record.id} --follow",
              file=sys.stderr)
        print(record.id)
        return 0
    print(f"traindeck: run {record.id} started; log: {record.log_path}", file=sys.stderr)
    from traindeck.backend.runs.store import RunStore

    return follow_run(RunStore(), record.id)


def _memory_check(size: str, preset: Any, config: Path | None, nproc: int | None) -> Any:
    """The pre-launch memory check, printed; None when there is nothing to check against (python launcher)."""
    from traindeck.backend.estimate.prelaunch import check_preset, model_shape
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
        shape = model_shape(size)
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


def _load_preset(name: str) -> Any:
    from traindeck.backend.presets import PresetError, load_preset

    try:
        return load_preset(name)
    except PresetError as exc:
        raise UserError(str(exc)) from exc


def _probe(python: str | None) -> Any:
    """The training interpreter's packages (cached by the probe); None if it cannot be asked."""
    try:
        from traindeck.backend.launch.environ import python_problem, resolve_python
        from traindeck.backend.launch.probe import probe_environment
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


class _Console:
    """Prints run output; on a terminal keeps one live line at the bottom (a redrawn bar, or the progress)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.status = ""
        self.width = 120
        if self.tty:
            try:
                self.width = os.get_terminal_size(stream.fileno()).columns
            except OSError:
                pass

    def line(self, text: str) -> None:
        if self.tty and self.status:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        if self.tty and self.status:
            self.stream.write(self.status[: self.width - 1])
        self.stream.flush()

    def set_status(self, text: str) -> None:
        if not self.tty or text == self.status:
            return
        self.status = text
        self.stream.write("\r\x1b[K" + text[: self.width - 1])
        self.stream.flush()

    def clear_status(self) -> None:
        if self.tty and self.status:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
        self.status = ""


def follow_run(store: RunStore, run_id: str, stream: Any = None) -> int:
    """Follow a run in the foreground until it ends; returns the exit code for the shell."""
    from traindeck.backend.runs.control import supervisor_alive
    from traindeck.backend.runs.follow import LogReader
    from traindeck.backend.runs.layout import RunDir

    console = _Console(stream or sys.stdout)
    record = store.get_run(run_id)
    assert record is not None
    reader = LogReader(record.log_path)
    interrupts = 0

    def on_interrupt(_signum: int, _frame: Any) -> None:
        nonlocal interrupts
        interrupts += 1
        grace = 10.0 if interrupts == 1 else 0.0
        RunDir(Path(record.run_dir)).request_stop(grace)
        console.clear_status()
        if interrupts == 1:
            print(f"\ntraindeck: stopping run {run_id} (SIGINT to every process; SIGTERM after {grace:g} s, "
                  "then SIGKILL). Ctrl+C again to force.", file=sys.stderr)
        else:
            print("traindeck: forcing the stop (SIGKILL)", file=sys.stderr)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    last_check = 0.0
    bar_text = ""
    try:
        while True:
            for line in reader.read_new():
                if _is_report(line):
                    continue
                if line.transient:
                    bar_text = _line_text(line)
                    console.set_status(bar_text)
                else:
                    console.line(_line_text(line))
            now = time.monotonic()
            if now - last_check >= 0.5:
                last_check = now
                current = store.get_run(run_id)
                assert current is not None
                record = current
                if record.finished:
                    break
                if not supervisor_alive(record):
                    from traindeck.backend.runs.control import end_lost_run

                    end_lost_run(store, run_id, "its supervisor is no longer running")
                    continue
                # Scripts without a redrawn bar (DeepSpeed step lines, the reporting helper) get one from the store.
                if not bar_text and record.progress:
                    console.set_status(f"[{record.name}] {_progress_text(record.progress)}")
            if reader.at_end:
                time.sleep(0.05)
        for line in reader.finish():
            if not line.transient and not _is_report(line):
                console.line(_line_text(line))
    finally:
        reader.close()
        console.clear_status()
        signal.signal(signal.SIGINT, previous)
    record = store.get_run(run_id) or record
    _print_ending(record)
    if interrupts:
        return 130
    return exit_status(record)


def exit_status(record: RunRecord) -> int:
    """The shell's view of a run's end: 0 succeeded, its exit code (128+N for signal N), else 1."""
    if record.state == "succeeded":
        return 0
    code = record.exit_code
    if code is None or code == 0:
        return 1
    return 128 - code if code < 0 else min(code, 255)


def _print_ending(record: RunRecord) -> None:
    out = sys.stderr
    summary = (record.diagnosis or {}).get("summary") if record.diagnosis else None
    took = ""
    if record.started_at and record.ended_at:
        took = f" after {_clock(record.ended_at - record.started_at)}"
    print(f"traindeck: run {record.id} {record.state}{took}" + (f": {summary}" if summary else ""), file=out)
    for item in (record.diagnosis or {}).get("evidence", [])[:6]:
        print(f"  - {item}", file=out)
    for item in ((record.diagnosis or {}).get("follow_ons") or [])[:4]:
        print(f"  - then: {item}", file=out)
    advice = (record.diagnosis or {}).get("advice")
    if advice:
        print(f"  {advice}", file=out)


# ---- runs list / show -------------------------------------------------------------------------------------------
def _list(args: argparse.Namespace) -> int:
    store = _store()
    records = store.list_runs()
    if args.json:
        print(json.dumps([{"id": r.id, "name": r.name, "state": r.state, "exit_code": r.exit_code,
                           "launcher": r.launcher, "preset": r.preset, "script": r.script,
                           "progress": r.progress, "created_at": _iso(r.created_at), "started_at": _iso(r.started_at),
                           "ended_at": _iso(r.ended_at), "log": str(r.log_path)} for r in records], indent=2))
        return 0
    if not records:
        print("no runs yet (start one with `traindeck run SCRIPT`)")
        return 0
    rows = [("ID", "NAME", "STATE", "PROGRESS", "STARTED", "TIME", "EXIT")]
    for r in records:
        end = r.ended_at or time.time()
        rows.append((r.id, r.name[:24], r.state, _progress_text(r.progress)[:32],
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created_at)),
                     _clock(end - r.started_at) if r.started_at else "-",
                     "" if r.exit_code is None else str(r.exit_code)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _show(args: argparse.Namespace) -> int:
    from traindeck.backend.runs.diagnosis import MEMORY_WORDS

    store = _store()
    record = _resolve(store, args.id)
    data = run_summary(store, record)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"run       {data['id']}  ({data['name']})")
    state = data["state"] + (f" ({data['state_detail']})" if data["state_detail"] else "")
    print(f"state     {state}" + (f", exit code {data['exit_code']}" if data["exit_code"] is not None else ""))
    print(f"launcher  {data['launcher']}" + (f", preset {data['preset']}" if data["preset"] else ""))
    print(f"command   {' '.join(data['argv'])}")
    print(f"started   {data['started_at'] or '-'}   ended {data['ended_at'] or '-'}")
    if data["progress"]:
        print(f"progress  {_progress_text(record.progress)}")
    if data["metrics"]:
        print("metrics   " + ", ".join(f"{k}={v:.6g}" for k, v in data["metrics"].items()))
    for p in data["pids"]:
        role = p["role"] + (f" {p['rank']}" if p["rank"] is not None else "")
        end = "" if p["returncode"] is None else f" ({_ended(p['returncode'])})"
        print(f"process   {p['pid']} {role}{end}")
    if data["diagnosis"]:
        print(f"diagnosis {data['diagnosis']['summary']}")
        memory = MEMORY_WORDS.get(data["diagnosis"].get("memory") or "")
        if memory:
            print(f"          memory: {memory}")
        for item in data["diagnosis"].get("evidence", []):
            print(f"          - {item}")
        follow_ons = data["diagnosis"].get("follow_ons") or []
        if follow_ons:
            print("          then (consequences, not the cause):")
            for item in follow_ons:
                print(f"          - {item}")
        if data["diagnosis"].get("advice"):
            print(f"          {data['diagnosis']['advice']}")
    for i, pair in enumerate(data.get("estimate_vs_measured") or []):
        measured = pair["measured_bytes"]
        print(f"{'memory' if i == 0 else '':9} {pair['what']}: estimated {_gib(pair['estimated_bytes'])}, measured "
              + (f"{_gib(measured)} (x{pair['measured_over_estimate']:.2f})" if measured is not None
                 else "not recorded"))
    print(f"log       {data['log']}")
    return 0


def _gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def _ended(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# ---- logs / stop ------------------------------------------------------------------------------------------------
def _logs(args: argparse.Namespace) -> int:
    from traindeck.backend.runs.control import supervisor_alive
    from traindeck.backend.runs.follow import follow_lines

    store = _store()
    record = _resolve(store, args.id)
    if args.raw:
        return _raw_logs(store, record, args.follow)

    def finished() -> bool:
        current = store.get_run(record.id)
        return current is None or current.finished or not supervisor_alive(current)

    out = sys.stdout
    try:
        for line in follow_lines(record.log_path, follow=args.follow, finished=finished):
            if line.transient or _is_report(line):
                continue
            if args.rank is not None and getattr(line, "rank", None) != args.rank:
                continue
            out.write(_line_text(line) + "\n")
            if args.follow:
                out.flush()
    except BrokenPipeError:  # `traindeck logs ID | head`
        sys.stderr.close()
        return 0
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
    from traindeck.backend.runs.control import stop_run

    if args.grace < 0:
        raise UserError("--grace must be 0 or more seconds")
    store = _store()
    record = _resolve(store, args.id)
    outcome = stop_run(store, record.id, grace_s=args.grace, report=lambda text: print(text, flush=True))
    return 0 if not outcome.remaining else 1

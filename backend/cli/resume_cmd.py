"""What a run leaves behind, on the command line: `runs checkpoints|bundle|save`, `resume`, `rerun`.

`runs` itself is registered by runs_cmd (ORDER 31); this module (ORDER 32) adds its actions to it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from traindeck.backend.cli import UserError
from traindeck.backend.core import format_size

ORDER = 32


def register(sub: argparse._SubParsersAction) -> None:
    runs = sub.choices.get("runs")
    if runs is not None:
        actions = next(a for a in runs._actions if isinstance(a, argparse._SubParsersAction))
        ckpt = actions.add_parser("checkpoints", help="the checkpoints a run wrote (HF Trainer, DeepSpeed, "
                                                      "accelerate): path, step, kind, time, size")
        ckpt.add_argument("id", metavar="ID")
        ckpt.add_argument("--json", action="store_true")
        ckpt.set_defaults(handler=_checkpoints)
        bundle = actions.add_parser("bundle", help="one zip for a bug report: logs, configs, command, diagnosis, "
                                                   "provenance, resources (secrets masked)")
        bundle.add_argument("id", metavar="ID")
        bundle.add_argument("-o", "--output", required=True, metavar="FILE.zip")
        bundle.set_defaults(handler=_bundle)
        save = actions.add_parser("save", help="ask a run's script to save a checkpoint now (needs traindeck's "
                                               "companion in the script)")
        save.add_argument("id", metavar="ID")
        save.set_defaults(handler=_save)

    resume = sub.add_parser("resume", help="start a run again from one of its checkpoints (default: the newest)",
                            description="Start a new run with everything the same as run ID plus the resume "
                                        "argument: --resume_from_checkpoint PATH for HF Trainer checkpoints, else "
                                        "the template given with --resume-arg (remembered for the script).")
    resume.add_argument("id", metavar="ID")
    resume.add_argument("--checkpoint", metavar="PATH", help="default: the newest checkpoint of the run")
    resume.add_argument("--resume-arg", metavar="TEMPLATE",
                        help="how the script resumes, e.g. '--load {checkpoint}' or "
                             "'--load_dir {checkpoint_dir} --tag {tag}' ({step} too)")
    resume.add_argument("--detach", action="store_true", help="print the new run's id instead of following it")
    resume.set_defaults(handler=_resume)
    rerun = sub.add_parser("rerun", help="start the same run again (script, arguments, configs, interpreter)")
    rerun.add_argument("id", metavar="ID")
    rerun.add_argument("--detach", action="store_true", help="print the new run's id instead of following it")
    rerun.set_defaults(handler=_rerun)


def _store_and_record(text: str) -> tuple[Any, Any]:
    from traindeck.backend.cli.run_lookup import open_store, resolve_run

    store = open_store()
    return store, resolve_run(store, text)


def _checkpoints(args: argparse.Namespace) -> int:
    from traindeck.backend.runs import checkpoints_of

    _store_, record = _store_and_record(args.id)
    found = checkpoints_of(record)
    if args.json:
        print(json.dumps([c.to_json() for c in found], indent=2))
        return 0
    if not found:
        print(f"run {record.id} has written no checkpoint (looked in {record.cwd} and the folders its arguments "
              "name)")
        return 0
    rows = [("STEP", "KIND", "WRITTEN", "SIZE", "PATH")]
    for c in found:
        rows.append(("-" if c.step is None else str(c.step), c.kind + (" (latest)" if c.latest else ""),
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c.time)), format_size(c.bytes), c.path))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _follow_or_print(outcome: Any, detach: bool, what: str) -> int:
    from traindeck.backend.cli.run_follow import report_plan

    if not report_plan(outcome.plan, outcome.record is not None):
        return 2
    record = outcome.record
    print(f"traindeck: {what}: run {record.id}; log: {record.log_path}", file=sys.stderr)
    if detach:
        print(record.id)
        return 0
    from traindeck.backend.cli.run_follow import follow_run
    from traindeck.backend.runs import RunStore

    return follow_run(RunStore(), record.id)


def _resume(args: argparse.Namespace) -> int:
    from traindeck.backend.runs import ResumeError, resume

    store, record = _store_and_record(args.id)
    if record.state == "running":
        raise UserError(f"run {record.id} is still running; stop it first (`traindeck stop {record.id}`)")
    try:
        outcome, checkpoint = resume(record, checkpoint=args.checkpoint, template=args.resume_arg, store=store)
    except ResumeError as exc:
        raise UserError(str(exc)) from None
    step = "" if checkpoint.step is None else f" (step {checkpoint.step})"
    return _follow_or_print(outcome, args.detach, f"resuming {record.id} from {checkpoint.path}{step}")


def _rerun(args: argparse.Namespace) -> int:
    from traindeck.backend.runs import ResumeError, rerun

    store, record = _store_and_record(args.id)
    try:
        outcome = rerun(record, store=store)
    except ResumeError as exc:
        raise UserError(str(exc)) from None
    return _follow_or_print(outcome, args.detach, f"rerunning {record.id}")


def _bundle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from traindeck.backend.cli.runs_cmd import run_summary
    from traindeck.backend.runs import write_bundle

    store, record = _store_and_record(args.id)
    target = Path(args.output).expanduser()
    if target.suffix.lower() != ".zip":
        raise UserError(f"{target}: the bundle is a .zip file")
    try:
        size, names = write_bundle(record.run_dir, run_summary(store, record), target)
    except OSError as exc:
        raise UserError(f"{target}: cannot be written: {exc.strerror or exc}") from None
    print(f"wrote {target} ({format_size(size)}, {size} bytes): {', '.join(names)}")
    return 0


def _save(args: argparse.Namespace) -> int:
    from traindeck.backend.runs import request_save

    _store_, record = _store_and_record(args.id)
    if record.finished:
        raise UserError(f"run {record.id} has ended ({record.state})")
    if not request_save(record.run_dir):
        raise UserError(f"run {record.id}'s script does not use traindeck's companion (traindeck_report."
                        "hf_callback() or SaveStop()); it cannot be asked to save")
    print(f"asked run {record.id} to save a checkpoint at its next step")
    return 0

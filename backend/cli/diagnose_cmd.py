"""`traindeck diagnose LOGFILE...`: the diagnosis of a log from anywhere, as the supervisor makes it for its runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from traindeck.backend.cli import UserError

ORDER = 33


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diagnose", help="why a run ended, from its log alone (a paste, a cluster job's output)",
                       description="The diagnosis traindeck gives its own runs, for a log from anywhere: a "
                                   "colleague's paste, a cluster job's output file, a run started without traindeck. "
                                   "The log's end is read as the supervisor reads a run's output.log (the last MiB; "
                                   "rank tags of traindeck, torch and torchrun --tee understood), the launchers' "
                                   "reports in it (torchrun's ChildFailedError table, DeepSpeed's 'exits with return "
                                   "code') stand in for the ends a supervisor sees, and what a log alone cannot tell "
                                   "is said.")
    p.add_argument("logs", nargs="+", type=Path, metavar="LOGFILE", help="the log(s), read in the order given")
    p.add_argument("--exit-code", type=int, metavar="N", help="the exit status the job ended with, where known")
    p.add_argument("--json", action="store_true", help="the diagnosis and what was unknown, as JSON")
    p.set_defaults(handler=_diagnose)


def _diagnose(args: argparse.Namespace) -> int:
    from traindeck.backend.cli.runs_cmd import diagnosis_lines
    from traindeck.backend.runs import diagnose_logs

    for path in args.logs:
        if not path.is_file():
            raise UserError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    try:
        found = diagnose_logs(list(args.logs), args.exit_code)
    except OSError as exc:
        raise UserError(f"{exc.filename or args.logs[0]}: cannot read: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps({"diagnosis": found.diagnosis.to_json(), "unknown": found.unknown}, indent=2))
        return 0
    print("\n".join(diagnosis_lines(found.diagnosis.to_json())))
    print("not known from a log alone:")
    for item in found.unknown:
        print(f"          - {item}")
    return 0

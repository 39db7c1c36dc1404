"""`traindeck stacks ID`: every rank's Python stack (all threads) without stopping the run, who is where, and which
collective each rank reached (the flight recorder's ledger)."""

from __future__ import annotations

import argparse
import json
import sys

from traindeck.backend.cli import UserError

ORDER = 35


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stacks", help="dump every rank's Python stack (all threads) without stopping the run",
                       description="Dump every rank's Python stack (all threads) of a running run, without stopping "
                                   "it, and say where each rank is: the rank not where the others are comes first. "
                                   "Each rank's flight recorder (torch's record of its collectives) is read too: "
                                   "the first collective where the ranks part (a rank that never entered it, "
                                   "another op, other sizes) leads the summary. The dump is kept in the run "
                                   "directory (stacks.json).")
    p.add_argument("id", metavar="ID", help="run id (or a unique part of it, or the run's name)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--frames", type=int, default=12, metavar="N", help="frames shown per thread (default 12)")
    p.set_defaults(handler=_stacks)


def _stacks(args: argparse.Namespace) -> int:
    from pathlib import Path

    from traindeck.backend.runs import RunStore, reconcile, report_text, take_run_stacks

    with RunStore() as store:
        reconcile(store, report=lambda text: print(f"traindeck: {text}", file=sys.stderr))
        run_id = store.resolve_id(args.id)
        record = store.get_run(run_id) if run_id else None
    if record is None:
        raise UserError(f"no run matches {args.id!r} (see `traindeck runs list`)")
    if record.finished:
        raise UserError(f"run {record.id} already ended ({record.state}): stacks can only be taken while it runs"
                        + _kept_note(Path(record.run_dir)))
    report = take_run_stacks(Path(record.run_dir), record.processes)
    if report is None:
        raise UserError(f"run {record.id} has no living rank to dump (yet)")
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report_text(report, frames=max(1, args.frames)), end="")
    return 0 if any(r.threads for r in report.ranks) else 1


def _kept_note(run_dir: object) -> str:
    from pathlib import Path

    assert isinstance(run_dir, Path)
    kept = [name for name in ("stall_stacks.json", "stacks.json") if (run_dir / name).exists()]
    return f" (stacks taken earlier: {', '.join(str(run_dir / k) for k in kept)})" if kept else ""

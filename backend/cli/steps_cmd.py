"""`traindeck steps ID`: where each rank's step time and memory go, and what bounds the run."""

from __future__ import annotations

import argparse
import json

from traindeck.backend.cli import UserError

ORDER = 34


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("steps", help="each rank's step phases and memory, and what bounds the run",
                       description="Each rank's typical step (the mean of the middle half of its steps by time): forward, backward, communication, optimizer, NVMe swap "
                                   "and the time outside the engine (data loading, the script's own work), their "
                                   "share of the step, the memory peaks, the slowest rank, and one line naming what "
                                   "bounds the run, with advice. Measured inside every rank by the run's site hook "
                                   "(no change to the script or its config); `run --no-step-timing` turns it off.")
    p.add_argument("id", metavar="ID", help="run id (or a unique part of it, or the run's name)")
    p.add_argument("--rank", type=int, metavar="N", help="only this rank's row (the verdict stays the run's)")
    p.add_argument("--json", action="store_true", help="the same as `runs show ID --json`'s step_anatomy")
    p.set_defaults(handler=_steps)


def _steps(args: argparse.Namespace) -> int:
    from traindeck.backend.cli.run_lookup import open_store, resolve_run
    from traindeck.backend.runs import run_step_anatomy
    from traindeck.backend.steps import anatomy_table

    with open_store() as store:
        record = resolve_run(store, args.id)
        # All ranks, whichever is shown: what bounds the run is the slowest rank's, and a rank that waits for it
        # alone would read as communication-bound.
        anatomy = run_step_anatomy(record, store)
    if args.rank is not None and args.rank not in anatomy.ranks and (anatomy.ranks or not args.json):
        timed = ", ".join(str(r) for r in sorted(anatomy.ranks))
        raise UserError(f"run {record.id} has no timed step of rank {args.rank}"
                        + (f" (ranks timed: {timed})" if timed else ""))
    if args.json:
        data = anatomy.to_json()
        if args.rank is not None:
            data["ranks"] = {r: a for r, a in data["ranks"].items() if r == str(args.rank)}
        print(json.dumps(data, indent=2))
    else:
        print(f"run {record.id} ({record.name}, {record.state})")
        print(anatomy_table(anatomy, args.rank), end="")
    return 0

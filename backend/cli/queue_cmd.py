"""`traindeck queue ...` (unattended runs) and `traindeck notify ...` (alerts): the queue's command line.

`queue add` takes every option of `run` (its parser is built from run's), so the two never drift apart.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from traindeck.backend.cli import UserError

if TYPE_CHECKING:
    from traindeck.backend.queue import QueueStore

ORDER = 35
NAME_WIDTH = 60  # a default name (script, preset, swept value) fits whole; a longer one is cut with "…"


def register(sub: argparse._SubParsersAction) -> None:
    from traindeck.backend.cli import run_cmd

    q = sub.add_parser("queue", help="queue runs to start unattended, one after another or as GPUs free up",
                       description="Queued runs wait in order and start when what they need is free (their GPUs, or "
                                   "a free slot). The queue outlives this command, the dashboard and your login.")
    q.add_argument("--max-running", type=int, metavar="N",
                   help="runs at once (default: 1 on a machine without GPUs, else as many as the GPUs allow)")
    failure = q.add_mutually_exclusive_group()
    failure.add_argument("--stop-on-failure", action="store_true", help="pause the queue when a run fails")
    failure.add_argument("--continue-on-failure", action="store_true", help="go on after a failed run (default)")
    qs = q.add_subparsers(dest="queue_command", metavar="ACTION")

    # "every option of run": copied from run's own parser.
    scratch = argparse.ArgumentParser(add_help=False).add_subparsers()
    run_cmd.register(scratch)
    add = qs.add_parser("add", parents=[scratch.choices["run"]], conflict_handler="resolve",
                        help="queue a run (options as for `run`); prints its id as the last line",
                        description="Queue SCRIPT, a module (-m MODULE) or a command (--command -- COMMAND) with "
                                    "the options of `traindeck run`. Prints the run id(s), the last line being the "
                                    "(last) queued run's id.")
    add.add_argument("--hold", action="store_true", help="queue it held (it starts once released)")
    add.set_defaults(handler=_add)
    lst = qs.add_parser("list", help="queued and running runs: id, name, position, waiting_for, state")
    lst.add_argument("--json", action="store_true")
    lst.add_argument("--all", action="store_true", help="also the runs of the queue that have ended")
    lst.set_defaults(handler=_list)
    for action, text in (("pause", "start no more runs (running ones go on)"), ("resume", "start runs again")):
        qs.add_parser(action, help=text).set_defaults(handler=_pause if action == "pause" else _resume)
    for action, text in (("remove", "take a run that has not started out of the queue"),
                         ("start", "start a queued run now, ahead of the order"),
                         ("hold", "keep a queued run from starting"), ("release", "let a held run start again")):
        p = qs.add_parser(action, help=text)
        p.add_argument("id", metavar="ID")
        p.set_defaults(handler=_by_id)
    move = qs.add_parser("move", help="put a queued run at another place in the order")
    move.add_argument("id", metavar="ID")
    move.add_argument("position", type=int, metavar="POSITION", help="1 = next to start")
    move.set_defaults(handler=_move)
    q.set_defaults(handler=_settings)
    keeper = sub.add_parser("_queue-keeper")  # internal: how a frozen app starts the keeper
    keeper.set_defaults(handler=lambda _a: __import__("traindeck.backend.queue.keeper", fromlist=["main"]).main([]))

    n = sub.add_parser("notify", help="run your command when a run ends, stalls or its loss becomes NaN",
                       description="The command (an argv, no shell) gets TRAINDECK_EVENT (succeeded|failed|stopped|"
                                   "lost|stalled|nan), TRAINDECK_RUN_ID, TRAINDECK_RUN_NAME and TRAINDECK_DIAGNOSIS "
                                   "in its environment. It runs with a time limit; what it did is logged.")
    how = n.add_mutually_exclusive_group()
    how.add_argument("--command", nargs=argparse.REMAINDER, metavar="CMD", help="the command and its arguments")
    how.add_argument("--off", action="store_true", help="no more alerts")
    how.add_argument("--test", action="store_true", help="run the command once now with a test event")
    n.add_argument("--time-limit", type=float, default=30.0, metavar="SECONDS",
                   help="end the command after this long (default 30)")
    n.set_defaults(handler=_notify)


# ---- adding -------------------------------------------------------------------------------------------------
def _queue() -> QueueStore:
    from traindeck.backend.cli.run_inputs import open_queue

    return open_queue()


def _add(args: argparse.Namespace) -> int:
    from traindeck.backend.cli.run_inputs import enqueue

    enqueue(args, held=args.hold)
    return 0


# ---- list / settings / actions ------------------------------------------------------------------------------
def _list(args: argparse.Namespace) -> int:
    from traindeck.backend.queue import ensure_keeper, keeper_running

    queue = _queue()
    try:
        ensure_keeper(queue)  # a keeper that was killed comes back as soon as anyone looks
        from traindeck.backend.queue import queue_rows

        rows = queue_rows(queue, args.all)
        settings = queue.settings()
        alive = keeper_running(queue)
    finally:
        queue.close()
    if args.json:
        print(json.dumps({"paused": settings.paused, "pause_reason": settings.pause_reason,
                          "max_running": settings.max_running, "stop_on_failure": settings.stop_on_failure,
                          "keeper_pid": settings.keeper_pid if alive else None, "runs": rows}, indent=2))
        return 0
    state = "paused" + (f" ({settings.pause_reason})" if settings.pause_reason else "") if settings.paused else \
        "running"
    print(f"queue {state}; keeper " + (f"pid {settings.keeper_pid}" if alive else "not running") +
          f"; max running {settings.max_running if settings.max_running is not None else 'default'}; "
          f"on failure: {'stop' if settings.stop_on_failure else 'continue'}")
    if not rows:
        print("the queue is empty (add a run with `traindeck queue add SCRIPT`)")
        return 0
    table = [("POS", "ID", "NAME", "STATE", "WAITING FOR")]
    for r in rows:
        table.append((str(r["position"] or "-"), r["id"], _cut(r["name"], NAME_WIDTH), r["state"] + (" (held)" if r["held"] else ""),
                      r["waiting_for"] or ("GPUs " + ",".join(map(str, r["assigned_gpus"]))
                                           if r["assigned_gpus"] else "")))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _settings(args: argparse.Namespace) -> int:
    changes: dict[str, Any] = {}
    if args.max_running is not None:
        if args.max_running < 1:
            raise UserError("--max-running must be at least 1")
        changes["max_running"] = args.max_running
    if args.stop_on_failure or args.continue_on_failure:
        changes["stop_on_failure"] = bool(args.stop_on_failure)
    if not changes:
        args.json, args.all = False, False
        return _list(args)
    queue = _queue()
    try:
        queue.update_settings(**changes)
        from traindeck.backend.queue import ensure_keeper

        ensure_keeper(queue)
    finally:
        queue.close()
    print("queue: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in changes.items()))
    return 0


def _pause(_args: argparse.Namespace) -> int:
    queue = _queue()
    try:
        queue.update_settings(paused=True, pause_reason="")
    finally:
        queue.close()
    print("queue paused: no run starts until `traindeck queue resume` (running runs go on)")
    return 0


def _resume(_args: argparse.Namespace) -> int:
    from traindeck.backend.queue import ensure_keeper

    queue = _queue()
    try:
        queue.update_settings(paused=False, pause_reason="")
        ensure_keeper(queue)
    finally:
        queue.close()
    print("queue resumed")
    return 0


def _resolve_queued(queue: QueueStore, text: str) -> str:
    run_id = queue.runs.resolve_id(text)
    if run_id is None or queue.entry(run_id) is None:
        raise UserError(f"no queued run matches {text!r} (see `traindeck queue list`)")
    return run_id


def _by_id(args: argparse.Namespace) -> int:
    from traindeck.backend.queue import ensure_keeper

    queue = _queue()
    try:
        run_id = _resolve_queued(queue, args.id)
        entry = queue.entry(run_id)
        assert entry is not None
        action = args.queue_command
        if action != "hold" and action != "release" and entry.state != "queued":
            raise UserError(f"run {run_id} is {entry.state}, not waiting in the queue")
        if action == "remove":
            if not queue.remove(run_id):
                raise UserError(f"run {run_id} started meanwhile; stop it with `traindeck stop {run_id}`")
            print(f"removed run {run_id} ({entry.name}) from the queue")
        elif action in ("hold", "release"):
            queue.set_held(run_id, action == "hold")
            ensure_keeper(queue)
            print(f"run {run_id} ({entry.name}) " + ("held" if action == "hold" else "released"))
        else:
            from traindeck.backend.queue import gpus_now, start_queued

            try:
                gpus = gpus_now(queue, entry.gpus)
            except ValueError as exc:
                raise UserError(str(exc)) from None

            if not start_queued(queue, entry, gpus):
                raise UserError(f"run {run_id} started meanwhile")
            record = queue.runs.get_run(run_id)
            state = record.state if record else "?"
            print(f"started run {run_id} ({entry.name}): {state}"
                  + (f"; {record.state_detail}" if record and record.state != "running" else ""))
            if state != "running":
                return 1
    finally:
        queue.close()
    return 0


def _move(args: argparse.Namespace) -> int:
    queue = _queue()
    try:
        run_id = _resolve_queued(queue, args.id)
        try:
            queue.move(run_id, args.position)
        except KeyError:
            raise UserError(f"run {run_id} is not waiting in the queue") from None
    finally:
        queue.close()
    print(f"run {run_id} moved to position {max(1, args.position)}")
    return 0


# ---- notify -------------------------------------------------------------------------------------------------
def _notify(args: argparse.Namespace) -> int:
    from traindeck.backend.runs.supervisor import alerts

    if args.command is not None:
        command = list(args.command)
        if command and command[0] == "--":
            command = command[1:]
        if not command:
            raise UserError("--command needs the command to run (an argv: notify-send traindeck ...)")
        if args.time_limit <= 0:
            raise UserError("--time-limit must be more than 0 seconds")
        alerts.save_command(command, args.time_limit)
        print(f"alerts on: {' '.join(command)} (time limit {args.time_limit:g} s; log: {alerts.log_path()})")
        return 0
    if args.off:
        alerts.save_command(None)
        print("alerts off")
        return 0
    saved = alerts.notify_command()
    if args.test:
        if not saved:
            raise UserError("no notify command set (traindeck notify --command CMD...)")
        outcome = alerts.run_test_alert()
        print(f"ran {saved[0]}: {outcome or 'see the log'} (log: {alerts.log_path()})")
        return 0
    print(f"alerts: {' '.join(saved)}" if saved else "alerts off (set one with `traindeck notify --command CMD...`)")
    return 0

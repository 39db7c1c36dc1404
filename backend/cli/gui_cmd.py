"""`traindeck gui`: open the dashboard (the default when no command is given)."""

from __future__ import annotations

import argparse

from traindeck.backend.cli import UserError

ORDER = 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gui", help="open the dashboard window (default)")
    p.add_argument("--demo", action="store_true", help="open with the demo script and the CPU demo preset selected")
    p.add_argument("--screenshot", metavar="DIR", help="render every page to PNG files in DIR and exit")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.open_gui is None:
        raise UserError("the dashboard is not available from this entry point; run `traindeck gui`")
    return int(args.open_gui(args.demo, args.screenshot))

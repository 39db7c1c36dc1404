"""The `traindeck` command: the headless twin of the dashboard.

Each command group lives in its own module with `register(subparsers)`; a command's handler returns the exit
code. Bad input is reported as one clear line on stderr, never as a traceback; so is an exception nobody expected
(exit 70, EX_SOFTWARE), whose traceback goes to a private crash report file named in that line (backend/crash.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from traindeck import __version__


def _command_modules() -> list[str]:
    """Every `*_cmd` module beside this file; each registers one command group (listed by its ORDER).

    Command modules keep their top level light (argparse only) and import their work inside the handler, so that
    `traindeck --help` and the dashboard's start never pay for, say, SQLite or the estimator.
    """
    import pkgutil

    return [m.name for m in pkgutil.iter_modules(__path__) if m.name.endswith("_cmd")]


class UserError(Exception):
    """A problem with what the user gave us (a file, a name, an option): printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="traindeck",
        description="Configure, launch and watch Accelerate/DeepSpeed training runs.",
    )
    parser.add_argument("--version", action="version", version=f"traindeck {__version__}")
    # Handled before parsing (main(): the rest of the line is the remote's to parse); listed here for --help.
    parser.add_argument("--host", metavar="USER@MACHINE", help="run the command with that machine's traindeck "
                        "over SSH (exit 68: unreachable, 77: authentication refused, 127: no traindeck there)")
    parser.add_argument("--remote-traindeck", metavar="PATH", help="with --host: the traindeck command there "
                        "(default: TRAINDECK_REMOTE, else `traindeck` on the remote PATH)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    import importlib

    modules = [importlib.import_module(f"{__name__}.{name}") for name in _command_modules()]
    for module in sorted(modules, key=lambda m: getattr(m, "ORDER", 100)):
        module.register(sub)
    return parser


GuiOpener = Callable[[bool, "str | None"], int]


def main(argv: Sequence[str] | None = None, open_gui: GuiOpener | None = None) -> int:
    """Run one command; `open_gui` is how the `gui` command opens the window (passed in: backend never imports Qt)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    import os

    if os.environ.get("TRAINDECK_END_WITH_STDIN") == "1":  # we are the remote side of `traindeck --host`
        from traindeck.backend.remote import start_stdin_watch

        start_stdin_watch()
    try:
        remote, rest = _remote_options(args_list)
        if remote is not None:
            return _forward(remote, rest)
        return _run(args_list, open_gui)
    except BrokenPipeError:  # the reader of our output went away (`traindeck ... | head`): not a crash
        _silence_stdout()
        return 141
    except Exception as exc:  # a bug, or input no check foresaw: one line and a report, never a traceback
        full = disk_full_line(exc)
        if full is not None:  # not a bug: said as what it is, with no crash report (there is no room for one)
            print(f"traindeck: {full}", file=sys.stderr)
            return DISK_FULL
        return _crashed(exc, args_list)


def _run(args_list: list[str], open_gui: GuiOpener | None) -> int:
    parser = build_parser()
    args = parser.parse_args(args_list or ["gui"])
    args.open_gui = open_gui
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        code = int(handler(args) or 0)
        sys.stdout.flush()  # here, not at exit: a reader that went away (`| head`) is handled in main()
        return code
    except UserError as exc:
        print(f"traindeck: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _remote_options(args: list[str]) -> tuple[tuple[str, str | None] | None, list[str]]:
    """(host, remote traindeck) from `--host`/`--remote-traindeck` before the command, and the rest; None when
    there is no --host. Only leading options count: after the command name everything is the command's."""
    found: dict[str, str] = {}
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name not in ("--host", "--remote-traindeck"):
            break
        if not eq:
            if i + 1 >= len(args):
                print(f"traindeck: {name} needs a value", file=sys.stderr)
                raise SystemExit(2)
            value, i = args[i + 1], i + 1
        found[name] = value
        i += 1
    if "--host" not in found:
        if "--remote-traindeck" in found:
            print("traindeck: --remote-traindeck goes with --host USER@MACHINE", file=sys.stderr)
            raise SystemExit(2)
        return None, args
    return (found["--host"], found.get("--remote-traindeck")), args[i:]


def _forward(remote: tuple[str, str | None], rest: list[str]) -> int:
    from traindeck.backend.remote import RemoteError, Target, run_remote

    try:
        return run_remote(Target.make(*remote), rest)
    except RemoteError as exc:
        print(f"traindeck: {exc}", file=sys.stderr)
        return exc.code


def _silence_stdout() -> None:
    # Python flushes stdout again at exit; pointing it at /dev/null keeps that from printing a second error.
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout has no descriptor (captured in a test): nothing will be flushed to it
        pass


INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE: distinct from 1 (findings) and 2 (bad input)
DISK_FULL = 74  # sysexits' EX_IOERR


def disk_full_line(exc: BaseException) -> str | None:
    """'disk full at PATH (N free): ...' when `exc` (or what caused it) is a full disk or an exhausted quota: from
    SQLite ("database or disk is full") or from the file system (ENOSPC, EDQUOT); None for anything else."""
    import errno
    import sqlite3

    path: str | None = None
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            path = str(seen.filename or "")
            break
        if isinstance(seen, sqlite3.OperationalError) and any(
                words in str(seen) for words in ("disk is full", "disk I/O error", "readonly database")):
            from traindeck.backend.core import disk_full, run_store_path

            store = run_store_path()
            # SQLite says "disk I/O error" when it cannot grow its shared-memory or WAL file on a full disk, and a
            # store opened read-only for that reason refuses writes as a "readonly database".
            if "disk is full" in str(seen) or disk_full(store.parent):
                path = str(store)
                break
            return None
        seen = seen.__cause__ or seen.__context__
    else:
        return None
    if not path:
        from traindeck.backend.core import run_store_path

        path = str(run_store_path().parent)
    from traindeck.backend.core import free_bytes

    free = free_bytes(path)
    free_text = f" ({free / 2**20:.1f} MiB free)" if free >= 0 else ""
    return (f"disk full at {path}{free_text}: nothing more could be written there; free some space (or move the data "
            f"folder, TRAINDECK_HOME) and run the command again")


def _crashed(exc: BaseException, argv: list[str]) -> int:
    from traindeck.backend.crash import one_line, write_crash_report

    report = write_crash_report(exc, argv)
    print(f"traindeck: {one_line(exc, report)}", file=sys.stderr)
    return INTERNAL_ERROR

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
    try:
        return _run(args_list, open_gui)
    except BrokenPipeError:  # the reader of our output went away (`traindeck ... | head`): not a crash
        _silence_stdout()
        return 141
    except Exception as exc:  # a bug, or input no check foresaw: one line and a report, never a traceback
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


def _crashed(exc: BaseException, argv: list[str]) -> int:
    from traindeck.backend.crash import one_line, write_crash_report

    report = write_crash_report(exc, argv)
    print(f"traindeck: {one_line(exc, report)}", file=sys.stderr)
    return INTERNAL_ERROR

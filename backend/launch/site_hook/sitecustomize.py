"""Imported at start-up by every Python process of a traindeck run (this folder is first on PYTHONPATH).

Makes stdout and stderr line-buffered, so each line (and each carriage-return progress redraw) leaves the process
in one write: ranks sharing the launcher's pipe then never cut into each other's lines, which PYTHONUNBUFFERED
alone does (print() writes every argument separately). Then runs the sitecustomize this file shadows, if any.
Kept to the standard library and old-Python syntax: it runs inside whatever interpreter the user trains with.
"""

import os
import sys


def _line_buffered():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, write_through=False)  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # None, replaced or closed: leave it as it is
            pass


def _run_shadowed_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        folder = os.path.abspath(entry or os.curdir)
        candidate = os.path.join(folder, "sitecustomize.py")
        if folder != here and os.path.isfile(candidate):
            import importlib.util

            spec = importlib.util.spec_from_file_location("sitecustomize", candidate)
            if spec is None or spec.loader is None:
                return
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
            return


_line_buffered()
_run_shadowed_sitecustomize()

"""Imported at start-up by every Python process of a traindeck run (this folder is first on PYTHONPATH).

Makes stdout and stderr line-buffered, so each line (and each carriage-return progress redraw) leaves the process
in one write: ranks sharing the launcher's pipe then never cut into each other's lines, which PYTHONUNBUFFERED
alone does (print() writes every argument separately).

In a rank of a multi-rank run (RANK and WORLD_SIZE > 1 set by the launcher) it also starts each line with
"[rankN]: ", the tag torch itself puts on a rank's traceback: DeepSpeed's launcher passes every rank's output through
one pipe untagged, so without it nobody (the console's rank filter, the diagnosis) can tell whose line is whose.
TRAINDECK_RANK_TAGS=0 turns that off. Then runs the sitecustomize this file shadows, if any.

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


class _RankTagged:
    """A text stream that starts every line (and every carriage-return redraw) with a rank tag; the rest of the
    stream's interface is the wrapped stream's (fileno, isatty, buffer, encoding... for faulthandler, tqdm, logging)."""

    def __init__(self, stream, rank):
        self._stream = stream
        self._own = "[rank" + rank + "]:"
        self._tag = self._own + " "
        self._at_line_start = True

    def write(self, text):
        if not text:
            return self._stream.write(text)
        tag = self._tag
        out = []
        at_start = self._at_line_start
        lines = text.split("\n")
        for i, line in enumerate(lines):
            segments = line.split("\r")
            for j, segment in enumerate(segments):
                if segment:
                    if at_start:
                        out.append(tag)
                    out.append(segment)
                    at_start = False
                if j < len(segments) - 1:
                    out.append("\r")
                    at_start = True
            if i < len(lines) - 1:
                out.append("\n")
                at_start = True
        self._at_line_start = at_start
        # torch tags a rank's traceback itself: one tag is enough.
        self._stream.write("".join(out).replace(tag + self._own, self._own))
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _tag_ranks():
    rank = os.environ.get("RANK", "")
    try:
        several = int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        several = False
    if not (rank.isdigit() and several) or os.environ.get("TRAINDECK_RANK_TAGS", "1") == "0":
        return
    # Only the rank itself: the Python subprocesses it starts inherit RANK, and their parent may read what they
    # print (py-cpuinfo, which DeepSpeed's CPU Adam calls, parses its child's JSON output).
    owner = os.environ.get("TRAINDECK_RANK_TAGS_PID")
    if owner and owner != str(os.getpid()):
        return
    os.environ["TRAINDECK_RANK_TAGS_PID"] = str(os.getpid())
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _RankTagged):
            setattr(sys, name, _RankTagged(stream, rank))


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
_tag_ranks()
_run_shadowed_sitecustomize()

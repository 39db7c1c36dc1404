"""Imported at start-up by every Python process of a traindeck run (this folder is first on PYTHONPATH).

Makes stdout and stderr line-buffered, so each line (and each carriage-return progress redraw) leaves the process
in one write: ranks sharing the launcher's pipe then never cut into each other's lines, which PYTHONUNBUFFERED
alone does (print() writes every argument separately).

In a rank of a multi-rank run (RANK and WORLD_SIZE > 1 set by the launcher) it also starts each line with
"[rankN]: ", the tag torch itself puts on a rank's traceback: DeepSpeed's launcher passes every rank's output through
one pipe untagged, so without it nobody (the console's rank filter, the diagnosis) can tell whose line is whose.
TRAINDECK_RANK_TAGS=0 turns that off.

In each rank (and in the run's first Python process, the launcher or a single-process script) it arms faulthandler
on SIGUSR2: `traindeck stacks` (and the supervisor, once, when the run stalls) sends it to dump every thread's
Python stack into <run dir>/stacks/<pid>.txt without stopping the process, even while it is stuck in C code
holding the GIL (the dump is written by a C signal handler). It arms step timing (_traindeck_steps: each
optimizer step's phases and memory, written to <run dir>/steps/; TRAINDECK_STEP_TIMING=0 turns it off). Then runs the sitecustomize this file shadows, if any.

Kept to the standard library and old-Python syntax: it runs inside whatever interpreter the user trains with.
"""

import io
import os
import sys


def _line_buffered():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, write_through=False)  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # None, replaced or closed: leave it as it is
            pass


class _RankTaggedFile(io.RawIOBase):
    """The bytes side of a rank's stdout/stderr: starts every line (and every carriage-return redraw) with the rank
    tag, then writes to the original file descriptor. Below a line-buffered TextIOWrapper it sees one write per
    line, not one per print() argument: tagging costs ~1.4 us a line (tests/perf/bench_run_output.py). Only output
    written through Python is tagged; C libraries writing to the descriptor themselves are not."""

    def __init__(self, fd, rank):
        io.RawIOBase.__init__(self)
        self._fd = fd
        self._own = ("[rank" + rank + "]:").encode()
        self._tag = self._own + b" "
        self._twice = self._tag + self._own
        self._at_line_start = True

    def writable(self):
        return True

    def fileno(self):
        return self._fd

    def isatty(self):
        return os.isatty(self._fd)

    def write(self, data):
        data = bytes(data)
        if not data:
            return 0
        tag = self._tag
        newline = data.find(b"\n")
        if (newline < 0 or newline == len(data) - 1) and b"\r" not in data:  # the usual case: one line or a piece
            out = tag + data if self._at_line_start and newline != 0 else data
            self._at_line_start = newline >= 0
        else:
            pieces = []
            at_start = self._at_line_start
            lines = data.split(b"\n")
            for i, line in enumerate(lines):
                segments = line.split(b"\r")
                for j, segment in enumerate(segments):
                    if segment:
                        if at_start:
                            pieces.append(tag)
                        pieces.append(segment)
                        at_start = False
                    if j < len(segments) - 1:
                        pieces.append(b"\r")
                        at_start = True
                if i < len(lines) - 1:
                    pieces.append(b"\n")
                    at_start = True
            self._at_line_start = at_start
            out = b"".join(pieces)
        if self._twice in out:  # torch tags a rank's traceback itself: one tag is enough
            out = out.replace(self._twice, self._own)
        written = os.write(self._fd, out)
        while written < len(out):  # a pipe takes a whole line at once unless it is longer than the pipe's buffer
            written += os.write(self._fd, out[written:])
        return len(data)


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
        try:
            fd = stream.fileno()
            stream.flush()
            tagged = io.TextIOWrapper(io.BufferedWriter(_RankTaggedFile(fd, rank)), encoding=stream.encoding,
                                      errors=stream.errors, line_buffering=True)
        except (AttributeError, ValueError, OSError):  # None, closed or not a file: leave it as it is
            continue
        setattr(sys, name, tagged)


_STACK_FILE = None  # kept open for faulthandler, which writes to its descriptor from a signal handler


def _arm_stack_dumps():
    global _STACK_FILE
    run_dir = os.environ.get("TRAINDECK_RUN_DIR")
    if not run_dir or os.environ.get("TRAINDECK_STACKS", "1") == "0":
        return
    rank = os.environ.get("RANK", "")
    first = os.environ.get("TRAINDECK_STACKS_PID")
    if rank.isdigit():
        if os.environ.get("TRAINDECK_STACKS_RANK") == rank:
            return  # a Python started by this rank (it inherits RANK): only the rank itself is dumped
        os.environ["TRAINDECK_STACKS_RANK"] = rank
    elif first and first != str(os.getppid()):
        return  # deeper than a child of the run's first Python: not where a script runs
    if not first:  # the run's first Python (the launcher, or the script); its children are armed too (the script
        os.environ["TRAINDECK_STACKS_PID"] = str(os.getpid())  # under accelerate's single-process launcher)
    try:
        import faulthandler
        import signal

        folder = os.path.join(run_dir, "stacks")
        if not os.path.isdir(folder):
            os.makedirs(folder, mode=0o700, exist_ok=True)
        _STACK_FILE = open(os.path.join(folder, str(os.getpid()) + ".txt"), "a")
        # SIGUSR2: torch elastic and DeepSpeed's launchers handle SIGINT/SIGTERM/SIGHUP/SIGQUIT, none handles it.
        faulthandler.register(signal.SIGUSR2, file=_STACK_FILE, all_threads=True, chain=False)
    except (ImportError, AttributeError, OSError, ValueError, RuntimeError):
        _STACK_FILE = None  # no dumps for this process; `traindeck stacks` says so instead of signalling it


def _arm_step_timing():
    if not os.environ.get("TRAINDECK_RUN_DIR") or os.environ.get("TRAINDECK_STEP_TIMING", "1") == "0":
        return
    try:
        import _traindeck_steps

        _traindeck_steps.arm()
    except Exception:  # noqa: BLE001 - timing is an extra: the run goes on without it
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
_tag_ranks()
_arm_stack_dumps()
_arm_step_timing()
_run_shadowed_sitecustomize()

"""Imported at start-up by every Python process of a traindeck run (this folder is first on PYTHONPATH).

Makes stdout and stderr line-buffered, so each line (and each carriage-return progress redraw) leaves the process
in one write: ranks sharing the launcher's pipe then never cut into each other's lines, which PYTHONUNBUFFERED
alone does (print() writes every argument separately).

In a rank of a multi-rank run (RANK and WORLD_SIZE > 1 set by the launcher) it also starts each line with
"[rankN]: ", the tag torch itself puts on a rank's traceback: DeepSpeed's launcher passes every rank's output through
one pipe untagged, so without it nobody (the console's rank filter, the diagnosis) can tell whose line is whose.
TRAINDECK_RANK_TAGS=0 turns that off.

Where the output reaches the supervisor through a forwarder that passes whole lines only (pdsh and ssh on a
multi-node run, srun under Slurm: TRAINDECK_LINE_FORWARDER=1, set by those launch paths only), a progress bar's
carriage-return redraws would wait there until the bar's final newline. There each rank (and the run's first
Python) sends its newest redraw as a line of its own instead, at most every LINE_EVERY_S seconds, ending in the
cursor-up escape the line assembler reads as a redraw (the drawing, ESC[A, a newline: a terminal draws it over the
same line too), and the bar's last drawing as a normal line when its newline comes.

In each rank (and in the run's first Python process, the launcher or a single-process script) it arms faulthandler
on SIGUSR2: `traindeck stacks` (and the supervisor, once, when the run stalls) sends it to dump every thread's
Python stack into <run dir>/stacks/<pid>.txt (a rank of a multi-node run: <TRAINDECK_NODE_DIR>/stacks on its own
machine, read there by the run's node agent) without stopping the process, even while it is stuck in C code
holding the GIL (the dump is written by a C signal handler). It arms step timing (_traindeck_steps: each
optimizer step's phases and memory, written to <run dir>/steps/; TRAINDECK_STEP_TIMING=0 turns it off). Where
it arms stack dumps it arms on-demand dumps of torch's flight recorder (_arm_collective_dumps: which collectives a
rank entered, read by backend/runs/diagnosis/collectives.py; a rank of a multi-node run answers in
<TRAINDECK_NODE_DIR>/collectives, where the run's node agent asks it; TRAINDECK_FLIGHT_RECORDER=0 turns it off).
Then runs the sitecustomize this file shadows, if any.

Kept to the standard library and old-Python syntax: it runs inside whatever interpreter the user trains with.
"""

import atexit
import io
import os
import sys
import time

LINE_EVERY_S = 0.5  # the most often a line forwarder gets a bar's newest redraw, per stream
DRAWING_MAX = 1 << 16  # a drawing that grows past this (text printed after a bar, never a newline) goes out as a line


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
        self._own = ("[rank" + rank + "]:").encode() if rank is not None else b""  # None: no tag
        self._tag = self._own + b" " if rank is not None else b""
        self._twice = self._tag + self._own if rank is not None else None
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
        self._send(out)
        return len(data)

    def _send(self, out):
        if self._twice is not None and self._twice in out:  # torch tags a rank's traceback itself: one tag is enough
            out = out.replace(self._twice, self._own)
        written = os.write(self._fd, out)
        while written < len(out):  # a pipe takes a whole line at once unless it is longer than the pipe's buffer
            written += os.write(self._fd, out[written:])


class _LineForwardedFile(_RankTaggedFile):
    """A rank's stdout/stderr where a line forwarder (pdsh, ssh, srun) passes whole lines only: text that is not
    redrawn goes out as _RankTaggedFile writes it; a line redrawn with "\\r" (a progress bar) is held, and its
    newest drawing goes out as a line of its own ending in ESC[A (read as a redraw) at most every `every_s`
    seconds, checked at each write. When the bar's newline comes, its last drawing goes out as a normal line;
    `finish` (at exit) sends a drawing still held. `rank` None: no tag."""

    def __init__(self, fd, rank, every_s=LINE_EVERY_S, clock=time.monotonic):
        _RankTaggedFile.__init__(self, fd, rank)
        self._every_s = every_s
        self._clock = clock
        self._drawing = None  # the current line's text since its latest "\r"; None: the line is not redrawn
        self._previous = b""  # the drawing before that "\r": what shows while the newest one is still empty
        self._sent = None  # the drawing last sent as a line of its own, and when
        self._sent_at = None

    def write(self, data):
        data = bytes(data)
        if self._drawing is None and b"\r" not in data:
            return _RankTaggedFile.write(self, data)
        out = []  # type: list[bytes]
        lines = data.split(b"\n")
        for i, line in enumerate(lines):
            for j, segment in enumerate(line.split(b"\r")):
                if j:
                    self._carriage_return(out)
                if not segment:
                    continue
                if self._drawing is None:
                    out.append(self._tag + segment if self._at_line_start else segment)
                    self._at_line_start = False
                else:
                    self._drawing += segment
                    if len(self._drawing) > DRAWING_MAX:
                        self._newline(out)
            if i < len(lines) - 1:
                self._newline(out)
        self._send_drawing(out, False)
        if out:
            self._send(b"".join(out))
        return len(data)

    def finish(self):
        """Sends the drawing still held (a bar without its final newline), once."""
        out = []  # type: list[bytes]
        self._send_drawing(out, True)
        self._drawing = None
        if out:
            self._send(b"".join(out))

    def _carriage_return(self, out):
        if self._drawing is None:
            if not self._at_line_start:
                out.append(b"\r")  # the line's text already went out: the drawing overwrites it, as on a terminal
            self._drawing = self._previous = b""
        else:
            if self._drawing:
                self._previous = self._drawing
            self._drawing = b""

    def _newline(self, out):
        if self._drawing is not None:
            shown = self._drawing or self._previous
            self._drawing, self._previous, self._sent = None, b"", None
            if shown.strip():
                out.append(self._tag + shown)  # a drawing starts a line, or follows the "\r" sent after text
                self._at_line_start = False
            elif self._at_line_start:
                return  # a redrawn line with nothing left to show (an erased bar) was never a line
        out.append(b"\n")
        self._at_line_start = True

    def _send_drawing(self, out, now_anyway):
        if self._drawing is None:
            return
        shown = self._drawing or self._previous
        if not shown.strip() or shown == self._sent:
            return
        now = self._clock()
        if not now_anyway and self._sent_at is not None and now - self._sent_at < self._every_s:
            return
        out.append(self._tag + shown + b"\x1b[A\n")
        self._at_line_start = True
        self._sent, self._sent_at = shown, now


def _tag_ranks():
    rank = os.environ.get("RANK", "")
    try:
        several = int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        several = False
    tags = rank.isdigit() and several and os.environ.get("TRAINDECK_RANK_TAGS", "1") != "0"
    forwarded = os.environ.get("TRAINDECK_LINE_FORWARDER") == "1"
    if rank.isdigit():
        if not (tags or forwarded):
            return
        # Only the rank itself: the Python subprocesses it starts inherit RANK, and their parent may read what
        # they print (py-cpuinfo, which DeepSpeed's CPU Adam calls, parses its child's JSON output).
        owner = os.environ.get("TRAINDECK_RANK_TAGS_PID")
        if owner and owner != str(os.getpid()):
            return
        os.environ["TRAINDECK_RANK_TAGS_PID"] = str(os.getpid())
    else:
        # Not a rank: only the run's first Python here (a script under srun, the launcher on a node) redraws for
        # the forwarder; the Pythons it starts inherit the marker.
        if not forwarded or os.environ.get("TRAINDECK_LINE_FORWARDER_PID"):
            return
        os.environ["TRAINDECK_LINE_FORWARDER_PID"] = str(os.getpid())
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            fd = stream.fileno()
            stream.flush()
            raw = (_LineForwardedFile if forwarded else _RankTaggedFile)(fd, rank if tags else None)
            wrapped = io.TextIOWrapper(io.BufferedWriter(raw), encoding=stream.encoding, errors=stream.errors,
                                       line_buffering=True)
        except (AttributeError, ValueError, OSError):  # None, closed or not a file: leave it as it is
            continue
        setattr(sys, name, wrapped)
        if forwarded:
            atexit.register(_finish_drawing, wrapped, raw)


def _finish_drawing(stream, raw):
    try:
        stream.flush()
        raw.finish()
    except (ValueError, OSError):  # closed, or the forwarder is gone
        pass


_STACK_FILE = None  # kept open for faulthandler, which writes to its descriptor from a signal handler


def _stacks_folder():
    """<run dir>/stacks; for a rank of a multi-node run, <TRAINDECK_NODE_DIR>/stacks on its own machine instead (the
    run directory is on the launching machine; the run's agent there signals the rank and sends its dump back)."""
    node_dir = os.environ.get("TRAINDECK_NODE_DIR")
    if node_dir and os.environ.get("RANK", "").isdigit():
        return os.path.join(os.path.expanduser(node_dir), "stacks")
    run_dir = os.environ.get("TRAINDECK_RUN_DIR")
    return os.path.join(run_dir, "stacks") if run_dir else None


def _arm_stack_dumps():
    global _STACK_FILE
    folder = _stacks_folder()
    if not folder or os.environ.get("TRAINDECK_STACKS", "1") == "0":
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

        if not os.path.isdir(folder):
            os.makedirs(folder, mode=0o700, exist_ok=True)
        # Never through a link planted at the file's name (O_NOFOLLOW: no dumps then), readable by the user only.
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        _STACK_FILE = os.fdopen(os.open(os.path.join(folder, str(os.getpid()) + ".txt"), flags, 0o600), "a")
        # SIGUSR2: torch elastic and DeepSpeed's launchers handle SIGINT/SIGTERM/SIGHUP/SIGQUIT, none handles it.
        faulthandler.register(signal.SIGUSR2, file=_STACK_FILE, all_threads=True, chain=False)
    except (ImportError, AttributeError, OSError, ValueError, RuntimeError):
        _STACK_FILE = None  # no dumps for this process; `traindeck stacks` says so instead of signalling it


def _collectives_folder():
    """<run dir>/collectives; for a rank of a multi-node run, <TRAINDECK_NODE_DIR>/collectives on its own machine."""
    node_dir = os.environ.get("TRAINDECK_NODE_DIR")
    if node_dir and os.environ.get("RANK", "").isdigit():
        return os.path.join(os.path.expanduser(node_dir), "collectives")
    run_dir = os.environ.get("TRAINDECK_RUN_DIR")
    return os.path.join(run_dir, "collectives") if run_dir else None


def _arm_collective_dumps():
    """In a rank (and, as stack dumps are, in the run's first Python and its children: ranks started by
    torch.multiprocessing.spawn have no RANK yet): a thread that waits on <run dir>/collectives/<pid>.fifo and, for
    each line written there, writes torch's flight recorder buffer (every collective of this process's groups) to
    collectives/rank<R>.pkl, R from its process group, then its answer, collectives/<pid>.answer: R, or nothing
    while the process has no process group. A thread, not a signal handler: Python runs a handler on the main
    thread only, which is blocked in the collective when the ledger is wanted; torch waits on a collective without
    the GIL, so this thread runs meanwhile. A rank of a multi-node run uses <TRAINDECK_NODE_DIR>/collectives on its
    own machine instead (as for its stacks: the run's agent there asks it and sends the dump back).
    TRAINDECK_FLIGHT_RECORDER=0 turns it off."""
    folder = _collectives_folder()
    if not folder or os.environ.get("TRAINDECK_FLIGHT_RECORDER", "1") == "0":
        return
    if os.environ.get("RANK", "").isdigit():
        if os.environ.get("TRAINDECK_FR_PID"):
            return  # a Python started by this rank (it inherits RANK): only the rank itself answers
        os.environ["TRAINDECK_FR_PID"] = str(os.getpid())
    elif _STACK_FILE is None:
        return  # not where a script runs (stack dumps say where that is)
    # Where torch writes its own dump when an NCCL collective times out (prefix + rank).
    os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", os.path.join(folder, "torch_dump_rank"))
    os.environ.setdefault("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", os.path.join(folder, "torch_dump_rank"))
    try:
        import _thread  # built in; threading would be a module to load in every process

        if not os.path.isdir(folder):
            os.makedirs(folder, mode=0o700, exist_ok=True)
        fifo = os.path.join(folder, str(os.getpid()) + ".fifo")
        if os.path.exists(fifo):
            os.unlink(fifo)  # a reused pid's leftover
        os.mkfifo(fifo, 0o600)
        atexit.register(_remove_quietly, fifo)
        _thread.start_new_thread(_answer_collective_dumps, (fifo, folder))  # not joined at exit
    except (ImportError, AttributeError, OSError, RuntimeError):
        pass  # no ledger for this process; `traindeck stacks` says so


def _answer_collective_dumps(fifo, folder):
    pid = str(os.getpid())
    while True:
        try:
            fd = os.open(fifo, os.O_RDONLY)  # blocks, without the GIL, until a writer opens it
        except OSError:
            return
        try:
            while os.read(fd, 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        data, rank = b"", ""
        try:
            # Only what the process loaded itself: torch.distributed, once it has a process group.
            distributed = sys.modules.get("torch.distributed")
            c10d = sys.modules.get("torch._C._distributed_c10d")
            if distributed is not None and c10d is not None and distributed.is_initialized():
                rank = str(distributed.get_rank())
                dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace", None)
                # Without the Python stack of each entry: symbolizing them takes ~2 s (holding the GIL) at a
                # process's first dump, and the rank's own stack dump says where it is.
                data = dump(includeStackTraces=False) if dump is not None else b""
        except Exception:  # noqa: BLE001 - an older torch: no dump
            data, rank = b"", ""
        try:
            if rank and data:
                target = os.path.join(folder, "rank" + rank + ".pkl")
                with open(target + "." + pid, "wb") as handle:
                    handle.write(data)
                os.replace(target + "." + pid, target)
            else:
                rank = ""
            answer = os.path.join(folder, pid + ".answer")
            with open(answer + ".tmp", "w") as handle:
                handle.write(rank)
            os.replace(answer + ".tmp", answer)
        except OSError:
            pass


def _remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _arm_step_timing():
    if not (os.environ.get("TRAINDECK_RUN_DIR") or os.environ.get("TRAINDECK_NODE_DIR")) \
            or os.environ.get("TRAINDECK_STEP_TIMING", "1") == "0":
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


if __name__ == "sitecustomize":  # the interpreter's start-up import; tests load this file under another name
    _line_buffered()
    _tag_ranks()
    _arm_stack_dumps()
    _arm_collective_dumps()
    _arm_step_timing()
    _run_shadowed_sitecustomize()

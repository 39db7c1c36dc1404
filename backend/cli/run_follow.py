"""`traindeck run` in the foreground: the run's output on this terminal, a live progress line, the run's end.

The job never waits for this: its output goes to output.log through the supervisor, and this only reads the file.
But a reader that tries to show every line of a flood takes a core of its own on a small machine, and the job
pays for it (a 3M-line flood takes 3x longer under a reader that prints every line than with `| cat > file`).
So, like the Runs page, it shows what it can: more than SKIP_AT_BYTES behind, it jumps to the newest output, says
so on stderr (output.log keeps every line: `traindeck logs ID`), and while the flood lasts it only looks a few
times a second at the newest lines (reading everything in between, even without printing it, takes most of a core).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindeck.backend.cli.run_lookup import clock, progress_text

if TYPE_CHECKING:
    from traindeck.backend.runs import RunRecord, RunStore

SKIP_AT_BYTES = 2 << 20  # this far behind the log, jump ahead (a terminal shows ~50 lines: 2 MiB is ~30k)
KEEP_BYTES = 16 << 10  # during a flood, what is shown of each look: the newest ~250 lines
READ_BYTES = 1 << 20  # read in steps this big, checking the lag between them
FLOOD_PAUSE_S = 0.25  # during a flood, look this often; it lasts until less than KEEP_BYTES came in a pause
NOTE_EVERY_S = 5.0  # say how much was skipped at most this often (and once more at the end)


def is_report(line: Any) -> bool:
    """The reporting helper's machine-readable lines: parsed by the supervisor, not shown (they stay in the log)."""
    from traindeck.backend.logparse import REPORT_MARKER

    return bool(line.text.startswith(REPORT_MARKER + "{"))


def line_text(line: Any) -> str:
    """A line as the terminal shows it: its node and rank tag in front, when it has them."""
    rank = getattr(line, "rank", None)
    node = getattr(line, "node", None)
    text = f"[rank{rank}]: {line.text}" if rank is not None else line.text
    return f"{node}: {text}" if node else text


class Console:
    """Prints run output in batches (one write per read, not per line); on a terminal keeps one live line at the
    bottom (a redrawn bar, or the progress)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.status = ""
        self.width = 120
        if self.tty:
            try:
                self.width = os.get_terminal_size(stream.fileno()).columns
            except OSError:
                pass

    def lines(self, texts: list[str]) -> None:
        if not texts:
            return
        out = "\r\x1b[K" if self.tty and self.status else ""
        out += "\n".join(texts) + "\n"
        if self.tty and self.status:
            out += self.status[: self.width - 1]
        self.stream.write(out)
        self.stream.flush()

    def set_status(self, text: str) -> None:
        if not self.tty or text == self.status:
            return
        self.status = text
        self.stream.write("\r\x1b[K" + text[: self.width - 1])
        self.stream.flush()

    def clear_status(self) -> None:
        if self.tty and self.status:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
        self.status = ""


class SkipNotes:
    """Says on stderr how much output was jumped over: at once the first time, then at most every NOTE_EVERY_S."""

    def __init__(self, run_id: str, console: Console) -> None:
        self.run_id, self.console = run_id, console
        self.total = 0
        self.unsaid = 0
        self.said_at = -NOTE_EVERY_S

    def skipped(self, count: int) -> None:
        if count <= 0:
            return
        self.total += count
        self.unsaid += count
        if time.monotonic() - self.said_at >= NOTE_EVERY_S:
            self._say()

    def _say(self) -> None:
        self.console.clear_status()
        first = self.said_at < 0
        print(f"traindeck: output arrives faster than this terminal can show it: skipped "
              f"{self.unsaid / 2**20:.1f} MiB" + (f" (output.log keeps every line: traindeck logs {self.run_id})"
                                                 if first else ""), file=sys.stderr, flush=True)
        self.unsaid, self.said_at = 0, time.monotonic()

    def finish(self) -> None:
        if self.unsaid:
            self._say()
        if self.total:
            print(f"traindeck: {self.total / 2**20:.1f} MiB of output were skipped here; every line is in "
                  f"output.log (traindeck logs {self.run_id})", file=sys.stderr, flush=True)


def report_plan(plan: Any, started: bool) -> bool:
    """A launch plan's warnings, and its errors when nothing started, on stderr (run, resume and rerun alike)."""
    for warning in plan.warnings:
        print(f"traindeck: warning: {warning}", file=sys.stderr)
    if not started:
        for error in plan.errors:
            print(f"traindeck: error: {error}", file=sys.stderr)
    return started


def follow_run(store: RunStore, run_id: str, stream: Any = None) -> int:
    """Follow a run in the foreground until it ends; returns the exit code for the shell."""
    from traindeck.backend.runs import LogReader, RunDir, end_lost_run, save_hold_s, supervisor_alive

    console = Console(stream or sys.stdout)
    found = store.get_run(run_id)
    assert found is not None
    record: RunRecord = found  # narrowed for the handlers below, which mypy does not follow
    reader = LogReader(record.log_path)
    notes = SkipNotes(run_id, console)
    interrupts = 0

    def on_interrupt(_signum: int, _frame: Any) -> None:
        nonlocal interrupts
        interrupts += 1
        grace = 10.0 if interrupts == 1 else 0.0
        # Asked before the request: with the companion, the supervisor holds its signals while the script saves.
        hold = save_hold_s(record.run_dir, grace)
        RunDir(Path(record.run_dir)).request_stop(grace)
        console.clear_status()
        print(interrupt_message(run_id, interrupts, grace, hold), file=sys.stderr)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    last_check = 0.0
    bar_text = ""
    flooding = False
    try:
        while True:
            behind = reader.unread_bytes()
            if flooding and behind < KEEP_BYTES:
                flooding = False  # less than KEEP_BYTES in a pause: the flood is over, show every line again
            elif flooding or behind > SKIP_AT_BYTES:
                notes.skipped(reader.skip_to_tail(KEEP_BYTES))
                flooding = True
            shown: list[str] = []
            for line in reader.read_new(READ_BYTES):
                if is_report(line):
                    continue
                if line.transient:
                    bar_text = line_text(line)
                else:
                    shown.append(line_text(line))
            console.lines(shown)
            if bar_text:
                console.set_status(bar_text)
            now = time.monotonic()
            if now - last_check >= 0.5:
                last_check = now
                current = store.get_run(run_id)
                assert current is not None
                record = current
                if record.finished:
                    break
                if not supervisor_alive(record):
                    end_lost_run(store, run_id, "its supervisor is no longer running")
                    continue
                # Scripts without a redrawn bar (DeepSpeed step lines, the reporting helper) get one from the store.
                if not bar_text and record.progress:
                    console.set_status(f"[{record.name}] " + progress_text(
                        record.progress, stalled=record.state_detail.startswith("stalled")))
            if flooding:
                time.sleep(FLOOD_PAUSE_S)  # a sample of the newest output is all a flood needs; the CPU is the job's
            elif reader.at_end:
                time.sleep(0.05)
        if reader.unread_bytes() > SKIP_AT_BYTES:
            notes.skipped(reader.skip_to_tail(KEEP_BYTES))
        console.lines([line_text(line) for line in reader.finish() if not line.transient and not is_report(line)])
    finally:
        reader.close()
        console.clear_status()
        signal.signal(signal.SIGINT, previous)
    notes.finish()
    record = store.get_run(run_id) or record
    print_ending(record)
    if interrupts:
        return 130
    return exit_status(record)


def interrupt_message(run_id: str, interrupts: int, grace: float, hold: float) -> str:
    """What a Ctrl+C in the foreground does, as the supervisor will do it: the first one asks for the stop (with the
    companion: save a checkpoint, then stop; signals only after `hold` s), the next ones force it."""
    if interrupts > 1:
        return "traindeck: forcing the stop (SIGKILL)"
    if hold:
        return (f"\ntraindeck: saving a checkpoint before stopping run {run_id} (its script has traindeck's "
                f"companion; signals only if it is still running after {hold:g} s). Ctrl+C again to stop now "
                "without saving (SIGKILL).")
    return (f"\ntraindeck: stopping run {run_id} (SIGINT to every process; SIGTERM after {grace:g} s, then SIGKILL)."
            " Ctrl+C again to force.")


def exit_status(record: RunRecord) -> int:
    """The shell's view of a run's end: 0 succeeded, its exit code (128+N for signal N), else 1."""
    if record.state == "succeeded":
        return 0
    code = record.exit_code
    if code is None or code == 0:
        return 1
    return 128 - code if code < 0 else min(code, 255)


def print_ending(record: RunRecord) -> None:
    """The run's end on stderr: its state and duration, the diagnosis' evidence, follow-ons and advice."""
    out = sys.stderr
    summary = (record.diagnosis or {}).get("summary") if record.diagnosis else None
    took = ""
    if record.started_at and record.ended_at:
        took = f" after {clock(record.ended_at - record.started_at)}"
    print(f"traindeck: run {record.id} {record.state}{took}" + (f": {summary}" if summary else ""), file=out)
    for item in (record.diagnosis or {}).get("evidence", [])[:6]:
        print(f"  - {item}", file=out)
    for item in ((record.diagnosis or {}).get("follow_ons") or [])[:4]:
        print(f"  - then: {item}", file=out)
    advice = (record.diagnosis or {}).get("advice")
    if advice:
        print(f"  {advice}", file=out)

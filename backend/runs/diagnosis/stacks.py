"""Every rank's Python stack (all threads), taken without stopping the run, and where the ranks are.

How: the run's sitecustomize (backend/launch/site_hook) arms `faulthandler` on SIGUSR2 in each rank, writing into
<run dir>/stacks/<pid>.txt. Taking stacks = noting each file's size, sending SIGUSR2 to the ranks whose
/proc/PID/status says they catch it (a process that does not would be killed by it), and reading what each appended.
faulthandler's handler is C code that walks the interpreter's frames without the GIL, so a rank stuck in a collective
or in C code holding the GIL still answers; the process carries on as before. py-spy would need ptrace rights
(CAP_SYS_PTRACE in containers, kernel.yama.ptrace_scope) and a separate install; this needs neither.

Then: the innermost frame in the user's own code (not the standard library, not site-packages) says where a rank
is; a rank whose innermost frames are in torch.distributed / DeepSpeed's comm layer waits in a collective. Ranks at
the same place form a group; the rank not where the others are is named first.

A rank of a multi-node run dumps on its own machine; the run's node agent there signals it and sends the dump back
(nodes/stack_requests.py): run_stacks.take_run_stacks adds those ranks with their host, and the summary names it.

With the stacks, run_stacks.take_run_stacks asks each rank for its flight recorder buffer (collectives.py: which
collective each rank reached); where ranks part there, that line leads the summary, and the ledger is kept in the
report.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text

STACK_SIGNAL = signal.SIGUSR2
STACKS_DIR = "stacks"
DUMP_TIMEOUT_S = 5.0
SETTLE_S = 0.3  # a dump is written in many small writes: done when the file stops growing this long

_THREAD = re.compile(r"^(?P<current>Current thread|Thread) (?P<ident>0x[0-9a-fA-F]+)(?: \[(?P<name>[^\]]*)\])?"
                     r" \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<function>.+)$')
_LIBRARY = re.compile(r"[/\\](?:site-packages|dist-packages)[/\\]|[/\\]lib[/\\]python\d+(?:\.\d+)?[/\\]|^<frozen "
                      r"|[/\\]site_hook[/\\](?:sitecustomize|_traindeck_steps)\.py$|^<string>$")
# torch.utils.cpp_extension waits here, polling, while another process holds an op's build lock (FileBaton).
_BATON_FILE = re.compile(r"torch[/\\]utils[/\\]file_baton\.py$")
BUILD_LOCK_WAIT = "an op build lock"
_COLLECTIVE_FILE = re.compile(r"torch[/\\]distributed[/\\]|deepspeed[/\\]comm[/\\]|deepspeed[/\\]runtime[/\\]comm")
_COLLECTIVE_FUNCTION = re.compile(r"^(?:all_reduce|all_gather\w*|reduce_scatter\w*|broadcast\w*|barrier|monitored_barrier"
                                  r"|reduce|gather|scatter|all_to_all\w*|send|recv|isend|irecv|wait|"
                                  r"_all_gather\w*|_reduce_scatter\w*|allreduce\w*)$")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int | None
    function: str

    @property
    def user_code(self) -> bool:
        return not _LIBRARY.search(self.file)

    def short(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line if self.line is not None else '?'} {self.function}"


@dataclass
class ThreadStack:
    ident: str
    current: bool
    frames: list[Frame]  # innermost first, as faulthandler writes them
    name: str = ""


@dataclass
class RankStack:
    pid: int
    rank: int | None
    threads: list[ThreadStack] = field(default_factory=list)
    error: str = ""  # why there is no stack for this process
    where: str = ""  # innermost user frame of its main thread: "train.py:88 load_batch"
    waits_in: str = ""  # the collective it is blocked in ("all_reduce"), or ""
    host: str = ""  # the node it runs on, for a rank of a multi-node run (its dump came through the node's agent)

    @property
    def label(self) -> str:
        name = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"
        return f"{name} on {self.host}" if self.host else name


@dataclass
class StackReport:
    taken_at: float
    reason: str  # "request" | "stall"
    ranks: list[RankStack]
    summary: str = ""
    # The collectives ledger (collectives.py: which collective each rank reached), None when not taken.
    collectives: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StackReport:
        ranks = []
        for r in data.get("ranks", []):
            threads = [ThreadStack(t["ident"], bool(t["current"]), [Frame(**f) for f in t["frames"]], t.get("name", ""))
                       for t in r.get("threads", [])]
            ranks.append(RankStack(int(r["pid"]), r.get("rank"), threads, r.get("error", ""), r.get("where", ""),
                                   r.get("waits_in", ""), str(r.get("host") or "")))
        ledger = data.get("collectives")
        return cls(float(data["taken_at"]), str(data.get("reason", "")), ranks, str(data.get("summary", "")),
                   ledger if isinstance(ledger, dict) else None)


# ---- reading a dump -----------------------------------------------------------------------------------------
def parse_dump(text: str) -> list[ThreadStack]:
    """faulthandler's all-threads dump -> one ThreadStack per thread (innermost frame first)."""
    threads: list[ThreadStack] = []
    for line in text.splitlines():
        header = _THREAD.match(line)
        if header:
            threads.append(ThreadStack(header["ident"], header["current"] == "Current thread", [],
                                       header["name"] or ""))
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            number = frame["line"]
            threads[-1].frames.append(Frame(frame["file"], int(number) if number.isdigit() else None,
                                            frame["function"].strip()))
    return threads


def main_thread(threads: Sequence[ThreadStack]) -> ThreadStack | None:
    """The thread running the script: its outermost frame is a script's <module> (else the thread that took the
    signal, else the first)."""
    for thread in threads:
        if thread.frames and thread.frames[-1].function == "<module>" and thread.frames[-1].user_code:
            return thread
    for thread in threads:
        if thread.frames and any(f.function == "<module>" for f in thread.frames):
            return thread
    current = [t for t in threads if t.current and t.frames]
    return current[0] if current else next((t for t in threads if t.frames), None)


def locate(stack: RankStack) -> None:
    """Fill `where` and `waits_in` from the main thread."""
    thread = main_thread(stack.threads)
    if thread is None:
        return
    user = next((f for f in thread.frames if f.user_code), None)
    inner = thread.frames[: thread.frames.index(user)] if user is not None else thread.frames
    stack.where = user.short() if user is not None else (thread.frames[0].short() if thread.frames else "")
    collective = [f for f in inner if _COLLECTIVE_FILE.search(f.file) and _COLLECTIVE_FUNCTION.match(f.function)]
    if any(_BATON_FILE.search(f.file) for f in inner):
        stack.waits_in = BUILD_LOCK_WAIT
    elif collective:
        # The outermost collective call below the user's code names it (all_reduce, not the wait() inside it).
        stack.waits_in = collective[-1].function
    elif any(_COLLECTIVE_FILE.search(f.file) for f in inner):
        stack.waits_in = next(f.function for f in reversed(inner) if _COLLECTIVE_FILE.search(f.file))


def summarize(ranks: Sequence[RankStack], build_locks: Sequence[str] = ()) -> str:
    """One line: who is where, the rank that is not where the others are first (with its node, in a multi-node run:
    "rank 1 on node-b is in train.py:88 load_batch; rank 0 on node-a waits in all_reduce (train.py:40 main)").

    "rank 1 is in train.py:88 load_batch; ranks 0, 2, 3 wait in all_reduce (train.py:40 main)". Ranks waiting on an
    op build lock say which and who holds it (`build_locks`, one phrase per lock): "ranks 0, 1 waiting for
    DeepSpeed's cpu_adam build lock (held by PID 1234, ninja -v), in train.py:30 main"."""
    located = [r for r in ranks if r.where]
    if not located:
        missing = [r for r in ranks if r.error]
        return f"no stacks: {missing[0].label}: {missing[0].error}" if missing else "no stacks"
    groups: dict[tuple[str, str], list[RankStack]] = {}
    for r in located:
        groups.setdefault((r.waits_in, r.where), []).append(r)

    def order(item: tuple[tuple[str, str], list[RankStack]]) -> tuple[int, int, int]:
        (waits, _where), members = item
        # Ranks outside any collective come first (the others wait for them), then the smaller group.
        return (1 if waits else 0, len(members), min(m.rank if m.rank is not None else m.pid for m in members))

    parts = []
    for (waits, where), members in sorted(groups.items(), key=order):
        names = sorted(m.rank if m.rank is not None else m.pid for m in members)
        noun = "pid" if members[0].rank is None else "rank"
        who = f"{noun}s {', '.join(map(str, names))}" if len(names) > 1 else f"{noun} {names[0]}"
        hosts = sorted({m.host for m in members})
        if hosts == [""]:
            pass
        elif len(hosts) == 1:
            who += f" on {hosts[0]}"
        else:
            on = {m.rank if m.rank is not None else m.pid: m.host for m in members}
            who = f"{noun}s " + ", ".join(f"{n} ({on[n]})" if on[n] else str(n) for n in names)
        if waits == BUILD_LOCK_WAIT:
            parts.append(f"{who} waiting for {' or '.join(build_locks) or BUILD_LOCK_WAIT}, in {where}")
        elif waits:
            verb = "wait" if len(names) > 1 else "waits"
            parts.append(f"{who} {verb} in {waits} ({where})")
        elif len(groups) > 1 or len(names) == 1:
            parts.append(f"{who} {'are' if len(names) > 1 else 'is'} in {where}")
        else:
            parts.append(f"{who} are all in {where}")
    for r in ranks:
        if r.error:
            parts.append(f"{r.label}: {r.error}")
    return "; ".join(parts)


# ---- taking stacks --------------------------------------------------------------------------------------------
def catches_signal(pid: int, signum: int = STACK_SIGNAL) -> bool | None:
    """Whether the process has a handler for `signum` (/proc/PID/status SigCgt); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def take_stacks(run_dir: Path, targets: Sequence[tuple[int, int | None]], *, reason: str = "request",
                timeout_s: float = DUMP_TIMEOUT_S,
                build_locks: Callable[[Sequence[int]], Sequence[str]] | None = None) -> StackReport:
    """Dump the stacks of `targets` ((pid, rank) of the run's living ranks) and say where they are. Never stops
    a process: one that does not catch the signal is left alone and reported. `build_locks` is asked, given the
    pids of the ranks waiting on an op build lock, which locks they may wait on and who holds each."""
    folder = run_dir / STACKS_DIR
    ranks: list[RankStack] = []
    waiting: dict[int, tuple[Path, int]] = {}
    for pid, rank in targets:
        stack = RankStack(pid, rank)
        ranks.append(stack)
        path = folder / f"{pid}.txt"
        caught = catches_signal(pid)
        if caught is None:
            stack.error = "the process is gone"
            continue
        if not caught or not path.exists():
            stack.error = ("its Python did not arm stack dumps (started without traindeck's sitecustomize, or the "
                           "script took SIGUSR2 for itself)")
            continue
        size = path.stat().st_size
        try:
            os.kill(pid, STACK_SIGNAL)
        except ProcessLookupError:
            stack.error = "the process is gone"
            continue
        except PermissionError:
            stack.error = "not allowed to signal it"
            continue
        waiting[pid] = (path, size)
    texts = _collect(waiting, timeout_s)
    for stack in ranks:
        if stack.pid in waiting:
            text = texts.get(stack.pid, "")
            stack.threads = parse_dump(text)
            if not stack.threads:
                stack.error = f"no dump within {timeout_s:g} s (the process may be stopped or in uninterruptible I/O)"
            locate(stack)
    report = StackReport(time.time(), reason, ranks)
    waiting_on_lock = [stack.pid for stack in ranks if stack.waits_in == BUILD_LOCK_WAIT]
    locks = build_locks(waiting_on_lock) if waiting_on_lock and build_locks is not None else ()
    report.summary = summarize(ranks, locks)
    return report


def _collect(waiting: dict[int, tuple[Path, int]], timeout_s: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout_s
    sizes = {pid: size for pid, (_path, size) in waiting.items()}
    changed = {pid: 0.0 for pid in waiting}
    while time.monotonic() < deadline:
        now = time.monotonic()
        for pid, (path, _start) in waiting.items():
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size != sizes[pid]:
                sizes[pid], changed[pid] = size, now
        if all(changed[pid] and now - changed[pid] >= SETTLE_S for pid in waiting):
            break
        time.sleep(0.05)
    texts: dict[int, str] = {}
    for pid, (path, start) in waiting.items():
        try:
            with open(path, "rb") as handle:
                handle.seek(start)
                texts[pid] = handle.read(4 << 20).decode("utf-8", "replace")
        except OSError:
            texts[pid] = ""
    return texts


def save_report(path: Path, report: StackReport) -> None:
    atomic_write_text(path, json.dumps(report.to_json(), indent=1) + "\n")


def load_report(path: Path) -> StackReport | None:
    try:
        return StackReport.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def report_text(report: StackReport, *, frames: int = 12) -> str:
    """The report for a terminal: the summary, then each rank's threads (main thread first, innermost frame first)."""
    lines = [report.summary, ""]
    ledger = (report.collectives or {}).get("summary")
    if ledger and ledger not in report.summary:
        lines[1:1] = [f"collectives: {ledger}"]
    for stack in report.ranks:
        head = f"== {stack.label} (pid {stack.pid})" if stack.rank is not None and stack.pid else f"== {stack.label}"
        if stack.error:
            lines += [f"{head}: {stack.error}", ""]
            continue
        lines.append(head + (f": waits in {stack.waits_in} at {stack.where}" if stack.waits_in
                             else f": in {stack.where}" if stack.where else ""))
        main = main_thread(stack.threads)
        for thread in sorted(stack.threads, key=lambda t: t is not main):
            kind = "main thread" if thread is main else f"thread {thread.ident}"
            lines.append(f"  {kind}{' [' + thread.name + ']' if thread.name else ''}:")
            for frame in thread.frames[:frames]:
                lines.append(f"    {frame.file}:{frame.line if frame.line is not None else '?'} in {frame.function}")
            if len(thread.frames) > frames:
                lines.append(f"    ... {len(thread.frames) - frames} outer frame(s)")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def add_node_stacks(ranks: list[RankStack], nodes: Sequence[Any]) -> None:
    """The ranks of a multi-node run's nodes, as its node watch answered (nodes/stack_requests.py's NodeStacks),
    added to `ranks` with their host. A planned rank a node did not send is said so (why: not running there, or
    the node did not answer). Where the
    nodes sent ranks, this machine's processes without a rank (DeepSpeed's runner, pdsh) are dropped: the summary
    is about the ranks."""
    remote: list[RankStack] = []
    for node in nodes:
        for item in node.ranks:
            stack = RankStack(item.pid, item.rank, host=node.host)
            stack.threads = parse_dump(item.text) if item.text else []
            stack.error = "" if stack.threads else (item.error or "its node sent no dump")
            locate(stack)
            remote.append(stack)
        why = "not running on its node (not started yet, or ended)" if node.answered else \
            node.error or "its node did not answer"
        sent = {r.rank for r in node.ranks}
        remote += [RankStack(0, rank, error=why, host=node.host) for rank in node.ranks_planned if rank not in sent]
    if not remote:
        return
    numbers = {r.rank for r in remote}
    ranks[:] = [r for r in ranks if r.rank is not None and r.rank not in numbers] + remote
    ranks.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else r.pid))


def stack_targets(processes: Sequence[dict[str, Any]]) -> list[tuple[int, int | None]]:
    """(pid, rank) of a run's living ranks from its recorded processes (their start time checked, so a reused pid
    is never signalled); a run without ranks (one plain Python) gives its launcher."""
    import psutil

    def living(entry: dict[str, Any]) -> bool:
        if entry.get("returncode") is not None or entry.get("ended_at") is not None:
            return False
        try:
            proc = psutil.Process(int(entry["pid"]))
            return abs(proc.create_time() - float(entry.get("started") or 0)) < 1.0 \
                and proc.status() != psutil.STATUS_ZOMBIE
        except (psutil.Error, KeyError, TypeError, ValueError):
            return False

    ranks = sorted(((int(p["pid"]), p.get("rank")) for p in processes if p.get("role") == "rank" and living(p)),
                   key=lambda item: (item[1] is None, item[1] or 0))
    if ranks:
        return ranks
    return [(int(p["pid"]), None) for p in processes if p.get("role") == "launcher" and living(p)]


def armed_processes(run_dir: Path) -> list[tuple[int, int | None]]:
    """(pid, None) of the run's living processes that armed stack dumps (a file in stacks/, the run's directory in
    their environment, so a reused pid is never taken): for runs without ranks, e.g. a script under accelerate's
    single-process launcher, which is the launcher's child."""
    found: list[tuple[int, int | None]] = []
    for path in sorted((run_dir / STACKS_DIR).glob("*.txt")):
        if not path.stem.isdigit():
            continue
        pid = int(path.stem)
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if f"TRAINDECK_RUN_DIR={run_dir}".encode() in environ:
            found.append((pid, None))
    return found



"""The collectives ledger: which collective each rank reached, from torch's flight recorder, and where ranks part.

torch (2.5 and later) keeps a ring buffer per process of the collectives its process groups ran (gloo and NCCL
alike: op, sequence number per process group, tensor sizes and dtypes, whether the work is done). The run's
sitecustomize (backend/launch/site_hook) makes each rank wait on a FIFO, <run dir>/collectives/<pid>.fifo, on a
thread of its own; a line written there makes it write torch's dump of that buffer to
<run dir>/collectives/rank<R>.pkl. That thread runs while the main thread is blocked in a collective (torch
releases the GIL while waiting), which is when the ledger is wanted.

Reading: a dump is a pickle of plain containers ({"entries": [...], "pg_status": {...}, ...}); it is read with an
unpickler that refuses every class, so a dump can name nothing to import or call. torch's own analyzer (fr_trace) is
not used: it keys groups by pg_config, which gloo fills with one empty entry.

Matching: per process group (its name, `process_group[0]`), the collectives by `collective_seq_id` (the same number
on every member for the same call; op_id and record_id are per process). The members are the ranks whose dump
names the group (entries or pg_status), and for the default group every rank with a dump. A buffer that wrapped
(its oldest record_id is not 0) is compared only from its oldest sequence number on, and the ledger says what was
cut. The first sequence number where members differ (a member that never entered it, another op, other sizes or
dtypes) is the group's divergence; a rank that never entered a collective the others entered is "behind".
Point-to-point entries carry per-pair sequence numbers and are left out of the matching (gloo records none).

A multi-node run's ranks answer on their own machines (in the run's folder there); the run's node agents send
their dumps back and the node watch writes them here as collectives/rank<R>.pkl (R the global rank), so
collect_dumps reads them with this machine's (`remote`), and the ledger names each rank with its host.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.runs.diagnosis.stacks import Frame

COLLECTIVES_DIR = "collectives"
DUMP_TIMEOUT_S = 5.0
MAX_DUMP_BYTES = 64 << 20
_DUMP_NAME = re.compile(r"^rank(\d+)\.pkl$")


class _PlainUnpickler(pickle.Unpickler):
    """Builtin containers and scalars only: any class or function a pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a flight recorder dump names {module}.{name}: refused")


def load_dump(data: bytes) -> dict[str, Any]:
    """A flight recorder dump (torch's pickle) -> its dict; ValueError when it is not one."""
    try:
        value = _PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, AttributeError, MemoryError) as e:
        raise ValueError(f"not a flight recorder dump: {e}") from e
    if not isinstance(value, dict) or not isinstance(value.get("entries", []), list):
        raise ValueError("not a flight recorder dump: no list of entries")
    return value


# ---- one rank's buffer ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One collective as one rank recorded it."""

    seq: int
    op: str  # "all_reduce" (the backend's prefix, "gloo:", dropped)
    sizes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    completed: bool
    created_ns: int | None
    where: str = ""  # the innermost frame outside torch: "train.py:40 main"

    def shape(self) -> str:
        sizes = ", ".join("[" + ", ".join(map(str, s)) + "]" for s in self.sizes) or "no tensors"
        dtypes = "/".join(sorted(set(self.dtypes))).lower()
        return f"{self.op} {sizes}{' ' + dtypes if dtypes else ''}"


@dataclass
class RankBuffer:
    rank: int
    calls: dict[str, dict[int, Call]]  # group -> seq -> call
    groups: set[str]  # every group the dump names (pg_status too: a group whose entries all rolled out)
    wrapped: bool  # older entries were overwritten


def _op(name: Any) -> str:
    text = str(name or "?")
    return text.split(":", 1)[1] if ":" in text else text


def _sizes(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list):
        return ()
    return tuple(tuple(int(d) for d in s) if isinstance(s, list) else () for s in value)


def _where(frames: Any) -> str:
    """The innermost frame of the user's own code in an entry's Python stack (innermost first)."""
    if not isinstance(frames, list):
        return ""
    for item in frames:
        if not isinstance(item, dict):
            continue
        line = item.get("line")
        frame = Frame(str(item.get("filename", "")), line if isinstance(line, int) else None,
                      str(item.get("name", "?")))
        if frame.user_code:
            return frame.short()
    return ""


def rank_buffer(rank: int, dump: Mapping[str, Any]) -> RankBuffer:
    calls: dict[str, dict[int, Call]] = {}
    groups: set[str] = {str(k) for k in (dump.get("pg_status") or {})}
    record_ids = []
    for entry in dump.get("entries") or []:
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("record_id"), int):
            record_ids.append(entry["record_id"])
        pg = entry.get("process_group")
        group = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(entry.get("pg_id", "?"))
        groups.add(group)
        if entry.get("is_p2p") or not isinstance(entry.get("collective_seq_id"), int):
            continue
        seq = entry["collective_seq_id"]
        created = entry.get("time_created_ns")
        calls.setdefault(group, {})[seq] = Call(
            seq, _op(entry.get("profiling_name")), _sizes(entry.get("input_sizes")),
            tuple(str(d) for d in entry.get("input_dtypes") or ()),
            bool(entry.get("retired")) or entry.get("state") == "completed",
            created if isinstance(created, int) else None, _where(entry.get("frames")))
    return RankBuffer(rank, calls, groups, bool(record_ids) and min(record_ids) > 0)


# ---- the ledger ----------------------------------------------------------------------------------------------
@dataclass
class Group:
    id: str
    ranks: list[int]
    last_sequence: dict[str, int | None]  # rank -> the newest sequence number it entered
    divergence: str | None = None
    behind: list[int] = field(default_factory=list)  # members that never entered a collective others did
    cut: str | None = None  # what a wrapped buffer no longer shows
    last_arrival: dict[str, Any] | None = None  # {"sequence": N, "rank": R}: the newest call every member entered

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Ledger:
    groups: list[Group]
    behind: list[int]
    summary: str
    missing: dict[str, str] = field(default_factory=dict)  # rank -> why it has no dump

    def to_json(self) -> dict[str, Any]:
        return {"groups": [g.to_json() for g in self.groups], "behind": self.behind, "summary": self.summary,
                "missing": self.missing}


def _names(ranks: Iterable[int], hosts: Mapping[int, str] | None = None) -> str:
    """"ranks 0, 2"; with hosts, "rank 1 on node-b", "ranks 0, 2 on node-a", "ranks 0 (node-a), 2 (node-b)"."""
    ranks = sorted(ranks)
    on = {r: (hosts or {}).get(r, "") for r in ranks}
    where = set(on.values())
    if len(where) > 1:
        return "ranks " + ", ".join(f"{r} ({on[r]})" if on[r] else str(r) for r in ranks)
    tail = f" on {on[ranks[0]]}" if on[ranks[0]] else ""
    return (f"ranks {', '.join(map(str, ranks))}" if len(ranks) > 1 else f"rank {ranks[0]}") + tail


def _group_label(group: str) -> str:
    return f"process group {group}"


def compare_group(group: str, buffers: Sequence[RankBuffer], hosts: Mapping[int, str] | None = None) -> Group:
    everyone = sorted(b.rank for b in buffers if group in b.groups)
    calls = {b.rank: b.calls.get(group, {}) for b in buffers if group in b.groups}
    last = {str(r): (max(calls[r]) if calls[r] else None) for r in everyone}
    result = Group(group, everyone, last)
    # A wrapped buffer that no longer shows the group at all cannot be compared; the others are, from the newest
    # of the members' oldest sequence numbers (a buffer that did not wrap shows everything from 1).
    wrapped = {b.rank for b in buffers if b.wrapped}
    gone = [r for r in everyone if r in wrapped and not calls[r]]
    members = [r for r in everyone if r not in gone]
    first = {r: (min(calls[r]) if r in wrapped else 1) for r in members}
    lows = [r for r in members if first[r] > 1]
    start = max(first.values(), default=1)
    cut = [f"rank {r}'s buffer wrapped: it starts at #{first[r]}" for r in lows]
    cut += [f"rank {r}'s buffer wrapped past every call of {_group_label(group)}" for r in gone]
    if cut:
        result.cut = "; ".join(cut) + (f" (#1 to #{start - 1} of {_group_label(group)} not compared)"
                                       if start > 1 else "")
    top = max((s for s in last.values() if s is not None), default=None)
    if top is None:
        return result
    for seq in range(start, top + 1):
        entered = {r: calls[r][seq] for r in members if seq in calls[r]}
        if not entered:
            continue
        shapes: dict[str, list[int]] = {}
        for r, call in entered.items():
            shapes.setdefault(call.shape(), []).append(r)
        if len(shapes) > 1:
            parts = ", ".join(f"{_names(rs, hosts)} {shape}"
                              for shape, rs in sorted(shapes.items(), key=lambda i: i[1]))
            ops = {c.op for c in entered.values()}
            what = "different collectives" if len(ops) > 1 else "different sizes or dtypes"
            result.divergence = f"{what} at #{seq} ({_group_label(group)}): {parts}"
            return result
        absent = [r for r in members if r not in entered]
        # A member absent from a call the others entered: never entered it, unless its buffer lacks that number
        # for another reason (it wrapped past it, or its last call is later: the entry was cut mid-buffer).
        never = [r for r in absent if last[str(r)] is None or (last[str(r)] or 0) < seq]
        if never:
            call = next(iter(entered.values()))
            waiting = sorted(r for r, c in entered.items() if not c.completed)
            verb = "wait" if len(waiting) > 1 else "waits"
            tail = f" that {_names(waiting, hosts)} {verb} in" if waiting else \
                f" that {_names(entered, hosts)} entered"
            where = {c.where for c in entered.values() if c.where}  # only in dumps that carry Python stacks
            called = f" (called at {sorted(where)[0]})" if len(where) == 1 else ""
            result.divergence = (f"{_names(never, hosts)} never entered {call.op} #{seq} ({_group_label(group)}){tail}"
                                 f"{called}")
            result.behind = never
            return result
        arrivals = {r: c.created_ns for r, c in entered.items() if c.created_ns is not None}
        if len(entered) == len(members) and len(arrivals) == len(members) and len(members) > 1:
            latest = max(arrivals, key=lambda r: (arrivals[r], r))
            result.last_arrival = {"sequence": seq, "rank": latest}
    return result


def build_ledger(dumps: Mapping[int, Mapping[str, Any]], missing: Mapping[int, str] | None = None,
                 hosts: Mapping[int, str] | None = None) -> Ledger:
    """The ledger of one moment: `dumps` rank -> its flight recorder dump; `missing` rank -> why it has none;
    `hosts` rank -> the node it runs on (a multi-node run's), named with it."""
    buffers = [rank_buffer(r, d) for r, d in sorted(dumps.items())]
    # Every rank with a process group is in the default one (torch names it "0", "default_pg"), even before its
    # first collective there, when its dump does not name it yet.
    world = next((str(e["process_group"][0]) for d in dumps.values() for e in d.get("entries") or []
                  if isinstance(e, dict) and isinstance(e.get("process_group"), (list, tuple))
                  and len(e["process_group"]) > 1 and e["process_group"][1] == "default_pg"), "0")
    for buffer in buffers:
        buffer.groups.add(world)
    names = sorted({g for b in buffers for g in b.groups}, key=lambda g: (not g.isdigit(), int(g) if g.isdigit()
                                                                          else 0, g))
    groups = [compare_group(g, buffers, hosts) for g in names]
    behind = sorted({r for g in groups for r in g.behind})
    missing = dict(missing or {})
    parts = [g.divergence for g in groups if g.divergence]
    if not parts:
        if not buffers:
            parts.append("no flight recorder dumps")
        elif not any(b.calls for b in buffers):
            parts.append("no collective recorded yet")
        else:
            newest = ", ".join(f"{_group_label(g.id)} at #{max((s for s in g.last_sequence.values() if s), default=0)}"
                               for g in groups if any(g.last_sequence.values()))
            parts.append(f"ranks agree on every collective ({newest})")
    cut = [g.cut for g in groups if g.cut]
    if cut:
        parts.append("compared where buffers overlap: " + "; ".join(cut))
    parts += [f"{_names([r], hosts)}: {why}" for r, why in sorted(missing.items())]
    return Ledger(groups, behind, "; ".join(parts), {str(r): why for r, why in sorted(missing.items())})


def read_dumps(folder: Path, ranks: Iterable[int] | None = None) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """rank<R>.pkl files in `folder` -> (rank -> dump, rank -> why unreadable). An empty file: the rank had no
    process group when asked."""
    dumps: dict[int, dict[str, Any]] = {}
    missing: dict[int, str] = {}
    wanted = set(ranks) if ranks is not None else None
    for path in sorted(folder.glob("rank*.pkl")):
        match = _DUMP_NAME.match(path.name)
        if not match or (wanted is not None and int(match[1]) not in wanted):
            continue
        rank = int(match[1])
        try:
            data = path.read_bytes()[:MAX_DUMP_BYTES + 1]
        except OSError as e:
            missing[rank] = f"its dump cannot be read ({e.strerror})"
            continue
        if not data:
            missing[rank] = "no process group yet"
            continue
        if len(data) > MAX_DUMP_BYTES:
            missing[rank] = "its dump is too large to read"
            continue
        try:
            dumps[rank] = load_dump(data)
        except ValueError as e:
            missing[rank] = str(e)
    for rank in sorted((wanted or set()) - set(dumps) - set(missing)):
        missing[rank] = "no flight recorder dump"
    return dumps, missing


# ---- asking the ranks ----------------------------------------------------------------------------------------
def request_dumps(run_dir: Path, targets: Sequence[tuple[int, int | None]]) -> dict[int, str]:
    """Ask each process of `targets` ((pid, rank or None)) to dump its flight recorder; pid -> why it was not
    asked. Its old answer is removed first, so an answer present later is new."""
    folder = run_dir / COLLECTIVES_DIR
    refused: dict[int, str] = {}
    for pid, _rank in targets:
        try:
            (folder / f"{pid}.answer").unlink(missing_ok=True)
            fd = os.open(folder / f"{pid}.fifo", os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: nobody reads it
        except FileNotFoundError:
            refused[pid] = "the flight recorder dump is not armed in this rank"
            continue
        except OSError:
            refused[pid] = "the rank does not answer flight recorder requests"
            continue
        try:
            os.write(fd, b"dump\n")
        except OSError:
            refused[pid] = "the rank does not answer flight recorder requests"
        finally:
            os.close(fd)
    return refused


def collect_dumps(run_dir: Path, targets: Sequence[tuple[int, int | None]], refused: Mapping[int, str], *,
                  timeout_s: float = DUMP_TIMEOUT_S, started: float | None = None,
                  remote: Mapping[int, str] | None = None, hosts: Mapping[int, str] | None = None) -> Ledger:
    """Wait (up to `timeout_s` from `started`) for the asked processes' answers, then build the ledger from the
    dumps they name. A process without a rank (the parent of spawned ranks) that has no process group is left
    out; a rank that did not answer is named. `remote`: the ranks on a multi-node run's nodes, rank -> "" (the
    node watch wrote its dump here for this request) or why there is none; `hosts` names their nodes."""
    folder = run_dir / COLLECTIVES_DIR
    asked = [(pid, rank) for pid, rank in targets if pid not in refused]
    deadline = (started if started is not None else time.monotonic()) + timeout_s
    while asked and time.monotonic() < deadline:
        if all((folder / f"{pid}.answer").exists() for pid, _rank in asked):
            break
        time.sleep(0.05)
    answered: list[int] = []
    missing: dict[int, str] = {}
    for pid, rank in asked:
        try:
            text = (folder / f"{pid}.answer").read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            if rank is not None:
                missing[rank] = f"no flight recorder dump within {timeout_s:g} s (its Python may hold the GIL)"
            continue
        if text.isdigit():
            answered.append(int(text))
        elif rank is not None:
            missing[rank] = "no process group yet"
    remote = dict(remote or {})
    answered += [rank for rank, why in remote.items() if not why and rank not in answered]
    dumps, unread = read_dumps(folder, answered)
    missing.update(unread)
    missing.update({rank: refused[pid] for pid, rank in targets if pid in refused and rank is not None})
    missing.update({rank: why for rank, why in remote.items() if why and rank not in dumps})
    return build_ledger(dumps, missing, hosts)


def divergence_in(summary: str) -> str | None:
    """The ledger's divergence clause in a stacks summary ("rank 1 never entered all_reduce #6 (process group 0)
    that rank 0 waits in"), or None: for a diagnosis that keeps only the summary text of the stall's stacks."""
    for part in summary.split("; "):
        if re.search(r" never entered \S+ #\d+ \(process group ", part) or \
                re.match(r"different (?:collectives|sizes or dtypes) at #\d+ \(process group ", part):
            return part
    return None

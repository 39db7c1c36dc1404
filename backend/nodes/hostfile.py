"""DeepSpeed hostfiles: one host a line, `HOST slots=N`, `#` comments and blank lines ignored.

DeepSpeed's own reader (launcher/runner.py fetch_hostfile) stops on a malformed line with a bare ValueError and
on a repeated host with a message that does not name the line; here every problem names the file, the line and
the field, and all problems are reported at once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from traindeck.backend.core.fileio import atomic_write_text

MAX_BYTES = 1 << 20  # a hostfile of a million bytes is not a hostfile
_HOST = re.compile(r"^[A-Za-z0-9_.:\[\]-]+$")  # names, IPv4, IPv6; nothing a shell or pdsh would interpret


@dataclass(frozen=True)
class Host:
    name: str
    slots: int
    line: int = 0  # where it was read (0: made in the editor)


class HostfileError(ValueError):
    """Every problem of one hostfile, one line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


def parse_hostfile_text(text: str, source: str = "hostfile") -> list[Host]:
    hosts: list[Host] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        where = f"{source}, line {number}"
        name = fields[0]
        if not _HOST.match(name):
            problems.append(f"{where}: host {name!r} is not a host name or address")
            continue
        if len(fields) != 2 or not fields[1].startswith("slots="):
            problems.append(f"{where}: expected 'HOST slots=N', got {line!r}")
            continue
        value = fields[1][len("slots="):]
        if not value.isdigit() or int(value) < 1:
            problems.append(f"{where}: slots: {value!r} is not a whole number of 1 or more")
            continue
        if name in seen:
            problems.append(f"{where}: host {name} is already on line {seen[name]}")
            continue
        seen[name] = number
        hosts.append(Host(name, int(value), number))
    if not hosts and not problems:
        problems.append(f"{source}: no hosts (expected lines like 'node1 slots=8')")
    if problems:
        raise HostfileError(problems)
    return hosts


def read_hostfile_text(path: Path) -> str:
    """The file's text (HostfileError: it cannot be read, or is too large to be a hostfile)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise HostfileError([f"{path}: cannot read the hostfile: {exc.strerror or exc}"]) from None
    if len(data) > MAX_BYTES:
        raise HostfileError([f"{path}: larger than {MAX_BYTES >> 20} MiB; not a hostfile"])
    return data.decode("utf-8", errors="replace")


def read_hostfile(path: Path) -> list[Host]:
    """The hosts of a hostfile, in order; HostfileError (every problem, each naming file and line) otherwise."""
    return parse_hostfile_text(read_hostfile_text(path), str(Path(path)))


def hostfile_text(hosts: Sequence[Host]) -> str:
    return "".join(f"{h.name} slots={h.slots}\n" for h in hosts)


def write_hostfile(path: Path, hosts: Sequence[Host]) -> None:
    """Write atomically; refuses (HostfileError) what it could not read back."""
    text = hostfile_text(hosts)
    parse_hostfile_text(text, str(path))
    atomic_write_text(Path(path), text)


def active_hosts(hosts: Sequence[Host], *, include: str | None = None, exclude: str | None = None,
                 num_nodes: int | None = None, num_gpus: int | None = None) -> list[Host]:
    """The hosts a DeepSpeed launch runs on, each with the number of ranks it starts there, as DeepSpeed's runner
    works them out (launcher/runner.py: parse_inclusion_exclusion, then apply_num_nodes_and_gpus): an --include
    or --exclude filter `NAME[:SLOT,...][@NAME...]` over the hostfile's slots, or the first --num_nodes hosts,
    each with --num_gpus slots whatever the hostfile says. HostfileError (DeepSpeed's own refusals, said before
    the launch) for a filter naming a host or slot the hostfile lacks, or one that leaves nothing.

    The same rules in this process rather than DeepSpeed's function: importing DeepSpeed costs the dashboard ~2 s
    and ~240 MB (tests/unit/nodes hold this to DeepSpeed's own on every case)."""
    if include and exclude:
        raise HostfileError(["--include and --exclude cannot be given together (DeepSpeed refuses them)"])
    if (include or exclude) and (num_nodes or num_gpus):
        raise HostfileError(["--num_nodes / --num_gpus cannot be given with --include / --exclude "
                             "(DeepSpeed refuses them)"])
    pool = {h.name: list(range(h.slots)) for h in hosts}
    chosen: dict[str, list[int]] = {name: list(slots) for name, slots in pool.items()}
    spec = include or exclude
    if spec:
        asked: dict[str, list[int]] = {}
        for part in spec.split("@"):
            name, sep, slot_text = part.partition(":")
            try:
                slots = [int(x) for x in slot_text.split(",")] if sep else []
            except ValueError:
                raise HostfileError([f"{'--include' if include else '--exclude'} {spec}: {part!r} is not "
                                     "HOST or HOST:SLOT,SLOT"]) from None
            asked.setdefault(name, []).extend(slots)
        if include:
            chosen = {}
        for name, slots in asked.items():
            if name not in pool:
                raise HostfileError([f"{'--include' if include else '--exclude'} {spec}: host {name!r} is not "
                                     "in the hostfile"])
            for slot in slots:
                if slot not in pool[name]:
                    raise HostfileError([f"{'--include' if include else '--exclude'} {spec}: host {name} has no "
                                         f"slot {slot} (slots 0-{len(pool[name]) - 1} in the hostfile)"])
            wanted = sorted(set(slots))
            if include:
                chosen[name] = wanted or pool[name]
            else:
                chosen[name] = [s for s in chosen[name] if s not in wanted] if wanted else []
    names = [h.name for h in hosts if chosen.get(h.name)]
    if num_nodes is not None and num_nodes > 0:
        names = names[:num_nodes]
    lines = {h.name: h.line for h in hosts}
    active = [Host(name, num_gpus if num_gpus is not None and num_gpus > 0 else len(chosen[name]), lines[name])
              for name in names]
    if not active:
        raise HostfileError([f"--exclude {spec}: no host is left to run on"])
    return active


def rank_layout(hosts: Sequence[Host]) -> dict[str, list[int]]:
    """Global ranks per host, as DeepSpeed numbers them: hosts in hostfile order, each host's slots in a row."""
    layout: dict[str, list[int]] = {}
    first = 0
    for host in hosts:
        layout[host.name] = list(range(first, first + host.slots))
        first += host.slots
    return layout


# ---- the dashboard's hostfile editor: rows edited in a table, written back into the file they came from ----------
@dataclass(frozen=True)
class HostRow:
    """One row of the editor: a host and its slots, and the file line it came from (None: added in the editor)."""

    name: str
    slots: int
    origin: int | None = None  # 0-based index into the file's lines


def host_rows(text: str) -> list[HostRow]:
    """Every line that is not blank or a comment, as a row, also lines the parser refuses (their problems are shown
    beside the table and saving rewrites them from the row): the person fixes them in the table."""
    rows = []
    for index, raw in enumerate(text.splitlines()):
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        value = fields[1][len("slots="):] if len(fields) > 1 and fields[1].startswith("slots=") else ""
        rows.append(HostRow(fields[0], int(value) if value.isdigit() and int(value) >= 1 else 1, index))
    return rows


def edited_hostfile_text(original: str, rows: Sequence[HostRow]) -> str:
    """`original` with its host lines replaced by `rows`: comments, blank lines and a host line's own trailing
    comment stay where they were; a row removed drops its line; rows added go after the last host line."""
    lines = original.splitlines()
    by_origin = {row.origin: row for row in rows if row.origin is not None}
    added = [row for row in rows if row.origin is None or not 0 <= row.origin < len(lines)]
    out: list[str] = []
    last_host = -1
    for index, raw in enumerate(lines):
        body, hash_, comment = raw.partition("#")
        if not body.strip():
            out.append(raw)
            continue
        row = by_origin.get(index)
        if row is None:
            continue
        out.append(f"{row.name} slots={row.slots}" + (f"  #{comment}" if hash_ else ""))
        last_host = len(out) - 1
    at = last_host + 1 if last_host >= 0 else len(out)
    out[at:at] = [f"{row.name} slots={row.slots}" for row in added]
    return "".join(line + "\n" for line in out)


def row_problems(rows: Sequence[HostRow]) -> list[str]:
    """What would stop the rows from being a hostfile, each naming its row (1-based, as the table numbers them)."""
    if not rows:
        return ["no hosts: add a row per machine (its name or address, and its slots: GPUs or processes)"]
    problems = []
    seen: dict[str, int] = {}
    for number, row in enumerate(rows, start=1):
        if not row.name:
            problems.append(f"row {number}: no host (a name or address)")
        elif not _HOST.match(row.name):  # the parser's rule; a space would split the line into other fields
            problems.append(f"row {number}: host {row.name!r} is not a host name or address")
        elif row.name in seen:
            problems.append(f"row {number}: host {row.name} is already on row {seen[row.name]}")
        else:
            seen[row.name] = number
        if row.slots < 1:
            problems.append(f"row {number}: slots: {row.slots} is not a whole number of 1 or more")
    return problems


def save_edited_hostfile(path: Path, original: str, rows: Sequence[HostRow]) -> str:
    """Write `rows` into the hostfile at `path` (read before as `original`; "" for a new file) atomically, and
    return the text written. Refuses (HostfileError) what the parser would not read back."""
    problems = row_problems(rows)
    if problems:
        raise HostfileError(problems)
    text = edited_hostfile_text(original, rows)
    parse_hostfile_text(text, str(path))
    atomic_write_text(Path(path), text)
    return text

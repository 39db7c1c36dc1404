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

from traindeck.backend.fileio import atomic_write_text

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


def read_hostfile(path: Path) -> list[Host]:
    """The hosts of a hostfile, in order; HostfileError (every problem, each naming file and line) otherwise."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise HostfileError([f"{path}: cannot read the hostfile: {exc.strerror or exc}"]) from None
    if len(data) > MAX_BYTES:
        raise HostfileError([f"{path}: larger than {MAX_BYTES >> 20} MiB; not a hostfile"])
    return parse_hostfile_text(data.decode("utf-8", errors="replace"), str(path))


def hostfile_text(hosts: Sequence[Host]) -> str:
    return "".join(f"{h.name} slots={h.slots}\n" for h in hosts)


def write_hostfile(path: Path, hosts: Sequence[Host]) -> None:
    """Write atomically; refuses (HostfileError) what it could not read back."""
    text = hostfile_text(hosts)
    parse_hostfile_text(text, str(path))
    atomic_write_text(Path(path), text)


def rank_layout(hosts: Sequence[Host]) -> dict[str, list[int]]:
    """Global ranks per host, as DeepSpeed numbers them: hosts in hostfile order, each host's slots in a row."""
    layout: dict[str, list[int]] = {}
    first = 0
    for host in hosts:
        layout[host.name] = list(range(first, first + host.slots))
        first += host.slots
    return layout

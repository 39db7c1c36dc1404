"""The shared-memory buffers DeepSpeed's CPU collectives leave in /dev/shm, freed when their run is over.

On DeepSpeed's CPU accelerator every rank creates a 64 MiB all-reduce buffer with shm_open (csrc/cpu/comm/shm.cpp,
0.19: `deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>`) and never unlinks it: `shared_close`
exists but nothing calls it. So each CPU DeepSpeed run leaves 64 MiB per rank in /dev/shm, which is RAM, until the
next reboot; on this kind of machine 160 of them (11 GB of 24) were found after a day of test runs, with the kernel
swapping. sglang hit the same leak in CI (PR #38638: /dev/shm filled over weeks, later jobs died of SIGBUS).

The supervisor knows each rank's MASTER_ADDR/MASTER_PORT (read from its environment when it is recognised as a
rank); once nothing of the run remains, the buffers of exactly those rendezvous are removed, unless a live process
still maps one (another run reusing the port). Pure file work, no DeepSpeed import.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIX = "deepspeed_allreduce_buffer"


def buffer_pattern(addr: str, port: str, uid: int | None = None) -> re.Pattern[str]:
    """The names DeepSpeed gives the buffers of one rendezvous (one per rank)."""
    owner = os.getuid() if uid is None else uid
    return re.compile(rf"{PREFIX}_{owner}_{re.escape(addr)}_{re.escape(port)}_\d+")


def mapped_paths(proc: Path = Path("/proc")) -> set[str]:
    """Every /dev/shm file some live process has mapped (what must not be removed)."""
    found: set[str] = set()
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(entry / "maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    at = line.find("/dev/shm/")
                    if at >= 0:
                        found.add(line[at:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:
            continue
    return found


def free_buffers(rendezvous: Iterable[tuple[str, str]], shm_dir: Path = SHM_DIR) -> tuple[int, int]:
    """Remove the buffers of these (MASTER_ADDR, MASTER_PORT) pairs that no live process maps.

    Returns (files removed, bytes freed); never raises for a file that vanished or cannot be removed.
    """
    patterns = [buffer_pattern(addr, port) for addr, port in set(rendezvous) if addr and port]
    if not patterns or not shm_dir.is_dir():
        return 0, 0
    candidates = [p for p in shm_dir.iterdir() if any(pattern.fullmatch(p.name) for pattern in patterns)]
    if not candidates:
        return 0, 0
    in_use = mapped_paths()
    removed = freed = 0
    for path in candidates:
        if str(SHM_DIR / path.name) in in_use or str(path) in in_use:
            continue
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            continue
        removed, freed = removed + 1, freed + size
    return removed, freed

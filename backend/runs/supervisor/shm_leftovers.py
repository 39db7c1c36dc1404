"""The shared-memory buffers DeepSpeed's CPU collectives leave in /dev/shm, freed when their run is over.

On DeepSpeed's CPU accelerator every rank creates a 64 MiB all-reduce buffer with shm_open (csrc/cpu/comm/shm.cpp,
0.19: `deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>`) and never unlinks it: `shared_close`
exists but nothing calls it. So each CPU DeepSpeed run leaves 64 MiB per rank in /dev/shm, which is RAM, until the
next reboot; on this kind of machine 160 of them (11 GB of 24) were found after a day of test runs, with the kernel
swapping. sglang hit the same leak in CI (PR #38638: /dev/shm filled over weeks, later jobs died of SIGBUS).

The supervisor knows each rank's MASTER_ADDR/MASTER_PORT (read from its environment when it is recognised as a
rank); once nothing of the run remains, the buffers of exactly those rendezvous are removed, unless a live process
still maps one (another run reusing the port). Pure file work, no DeepSpeed import.

Runs whose supervisor was killed (and DeepSpeed runs started without traindeck) never get that far: each new run's
supervisor also frees the abandoned buffers of this user, those no live process maps and made over ABANDONED_AFTER_S
ago (a rank maps its buffer within milliseconds of creating it; peers map it once all have joined). Nothing can
use such a buffer again: a later run on the same rendezvous would create it anew.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIX = "deepspeed_allreduce_buffer"
ABANDONED_AFTER_S = 120.0


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
    return _remove_unmapped(candidates)


def free_abandoned_buffers(shm_dir: Path = SHM_DIR, min_age_s: float = ABANDONED_AFTER_S,
                           now: float | None = None) -> tuple[int, int]:
    """Remove this user's DeepSpeed buffers that no live process maps and that are older than `min_age_s`, whatever
    run left them. Returns (files removed, bytes freed)."""
    import time

    mine = re.compile(rf"{PREFIX}_{os.getuid()}_.+")
    if not shm_dir.is_dir():
        return 0, 0
    try:
        candidates = [p for p in shm_dir.iterdir() if mine.fullmatch(p.name)]
    except OSError:
        return 0, 0
    if not candidates:
        return 0, 0
    now = time.time() if now is None else now

    def abandoned(info: os.stat_result) -> bool:
        return now - max(info.st_mtime, info.st_ctime) >= min_age_s

    return _remove_unmapped(candidates, abandoned)


def _remove_unmapped(candidates: Iterable[Path], also: Callable[[os.stat_result], bool] | None = None) -> tuple[int, int]:
    """Remove the candidates no live process maps (and for which `also` holds); (files removed, bytes freed)."""
    in_use = mapped_paths()
    removed = freed = 0
    for path in candidates:
        if str(SHM_DIR / path.name) in in_use or str(path) in in_use:
            continue
        try:
            info = path.stat()
            if also is not None and not also(info):
                continue
            path.unlink()
        except OSError:
            continue
        removed, freed = removed + 1, freed + info.st_size
    return removed, freed

"""Leaving the process that started us, for traindeck's own background processes (the queue's keeper, a trial's
driver): they must outlive the command or window that started them."""

from __future__ import annotations

import os


def fork_away() -> None:
    """Fork once: the parent writes the child's pid on stdout (what the starter reads) and exits at once; the child
    goes on with stdin and stdout on /dev/null, so a closed pipe of the starter never ends it."""
    child = os.fork()
    if child:
        os.write(1, f"{child}\n".encode())
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


__all__ = ["fork_away"]

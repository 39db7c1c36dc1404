"""A run's processes that are compiling a DeepSpeed / torch extension right now (ninja, c++, nvcc under a rank),
and which op: ninja runs in the op's build folder (<TORCH_EXTENSIONS_DIR>/<op>), compilers get
-DTORCH_EXTENSION_NAME=<op>. Seen this way even when the build prints nothing (torch 2.x logs quietly)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

import psutil

from traindeck.backend.logparse.op_build import op_display_name

COMPILERS = frozenset({"ninja", "c++", "g++", "gcc", "cc", "cc1plus", "clang", "clang++", "nvcc", "cicc", "ptxas",
                       "hipcc", "ld", "collect2", "as", "icpx", "icx"})
_EXTENSION_NAME = re.compile(r"-DTORCH_EXTENSION_NAME=(\w+)")


def ops_being_built(processes: Iterable[psutil.Process]) -> list[str]:
    """The ops the given processes (a run's living ones) are compiling; [] when none compiles."""
    ops: set[str] = set()
    for proc in processes:
        try:
            name = proc.name()
            if name not in COMPILERS and not name.startswith(("cc1", "x86_64-linux-gnu-g", "aarch64-linux-gnu-g")):
                continue
            op = _op_of(proc)
        except (psutil.Error, OSError):
            continue
        ops.add(op or "ops")
    named = {op for op in ops if op != "ops"}
    return sorted(named) if named else sorted(ops)


def _op_of(proc: psutil.Process) -> str | None:
    for arg in proc.cmdline():
        match = _EXTENSION_NAME.search(arg)
        if match:
            return op_display_name(match.group(1))
    if proc.name() == "ninja":  # torch runs ninja in <extensions root>/<op>
        return op_display_name(os.path.basename(proc.cwd()))
    return None

"""Build DeepSpeed's CPU Adam op once, ahead of the first run: `python -m traindeck.backend.launch.prebuild_ops
[--python PATH]` (what `make setup` calls). Built in the training interpreter, into the folder its runs will use
(TORCH_EXTENSIONS_DIR when set, else environ.torch_extensions_dir), so no run and no test waits minutes on a
first-use build. Prints what it does and how long it took; a missing deepspeed is a note, not a failure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from traindeck.backend.launch.environ import resolve_python, torch_extensions_dir, unfrozen_environ
from traindeck.backend.launch.extension_locks import clear_stale_locks

_BUILD = """
import importlib.util, sys
if importlib.util.find_spec("deepspeed") is None:
    sys.exit(3)
import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.ops.op_builder import CPUAdamBuilder
CPUAdamBuilder().load()  # as DeepSpeedCPUAdam loads it (ZeRO-Offload's optimizer)
# On DeepSpeed's CPU accelerator every run also loads its shared-memory collectives (deepspeed.comm.torch).
shm = get_accelerator().create_op_builder("ShareMemCommBuilder") if get_accelerator()._name == "cpu" else None
if shm is not None and deepspeed.ops.__compatible_ops__.get(shm.NAME, False):
    shm.load()
"""
NO_DEEPSPEED = 3


def extensions_folder(python: str, environ: dict[str, str]) -> str:
    return environ.get("TORCH_EXTENSIONS_DIR") or str(torch_extensions_dir(python))


def prebuild(python: str, *, timeout_s: float = 1800.0) -> int:
    """Build (or find already built) CPU Adam with `python`; 0 when it is ready or deepspeed is absent."""
    env = unfrozen_environ(os.environ)
    folder = extensions_folder(python, env)
    env["TORCH_EXTENSIONS_DIR"] = folder
    for line in clear_stale_locks(Path(folder)):  # else the build below would wait on it forever, silently
        print(f"  {line}", flush=True)
    print(f"Building DeepSpeed's CPU Adam op once (~2 min; into {folder})...", flush=True)
    started = time.monotonic()
    try:
        done = subprocess.run([python, "-c", _BUILD], env=env, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"traindeck: could not build DeepSpeed's CPU Adam op: {exc}", file=sys.stderr)
        return 1
    took = time.monotonic() - started
    if done.returncode == NO_DEEPSPEED:
        print("  skipped: deepspeed is not installed in this interpreter")
        return 0
    if done.returncode != 0:
        tail = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()][-5:]
        print(f"traindeck: building DeepSpeed's CPU Adam op failed after {took:.0f} s:", file=sys.stderr)
        for line in tail:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"  CPU Adam ready in {took:.0f} s" + (" (already built)" if took < 20 else ""), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m traindeck.backend.launch.prebuild_ops", description=__doc__)
    parser.add_argument("--python", metavar="PATH", help="the training interpreter (default: this Python)")
    args = parser.parse_args(argv)
    return prebuild(resolve_python(args.python))


if __name__ == "__main__":
    sys.exit(main())

"""Build DeepSpeed's ops once, ahead of the first run: `python -m traindeck.backend.launch.prebuild_ops
[--python PATH]` (what `make setup` calls). Built in the training interpreter, into the folder its runs will use
(TORCH_EXTENSIONS_DIR when set, else environ.torch_extensions_dir), so no run and no test waits minutes on a
first-use build, and no two runs compile the same op side by side. Prints each op and how long it took; a missing
deepspeed is a note, not a failure.

The ops are those a run on this machine loads (`OPS`): CPU Adam (ZeRO-Offload's optimizer) everywhere; on
DeepSpeed's CPU accelerator also its shared-memory collectives (every run, deepspeed.comm.torch) and its fused Adam
(a config's plain Adam without offload); and where libaio's headers are installed, the async_io op that ZeRO-Infinity's
NVMe swappers load. CPU Adam failing fails set-up; an op only some configs load failing is said and set-up goes on
(the run that needs it builds it then, and shows that it is building).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from traindeck.backend.launch.environ import resolve_python, torch_extensions_dir, unfrozen_environ
from traindeck.backend.launch.extension_locks import clear_stale_locks

# (DeepSpeed's builder class name, required, on the CPU accelerator only). Required ops fail set-up when they fail.
OPS = (
    ("CPUAdamBuilder", True, False),
    ("ShareMemCommBuilder", False, True),
    ("FusedAdamBuilder", False, True),
    ("AsyncIOBuilder", False, False),
)

# Loads each op as the run would (the accelerator's own builder), one JSON line per op on stdout.
_BUILD = """
import importlib.util, json, sys, time
if importlib.util.find_spec("deepspeed") is None:
    sys.exit(3)
import deepspeed
from deepspeed.accelerator import get_accelerator
accelerator = get_accelerator()
for name, cpu_only in json.loads(sys.argv[1]):
    said = {"op": name}
    builder = accelerator.create_op_builder(name) if accelerator._name == "cpu" or not cpu_only else None
    if builder is None:
        said["skipped"] = "not used on this accelerator"
    elif not builder.is_compatible(verbose=False):
        said["skipped"] = "cannot build here" + (" (no libaio headers)" if name == "AsyncIOBuilder" else "")
    else:
        said["op"] = builder.NAME
        started = time.monotonic()
        try:
            builder.load(verbose=False)
            said["seconds"] = time.monotonic() - started
        except Exception as exc:  # noqa: BLE001 - a build error is reported, then the next op
            said["error"] = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
    print(json.dumps(said), flush=True)
"""
NO_DEEPSPEED = 3
ALREADY_BUILT_S = 20.0


def extensions_folder(python: str, environ: dict[str, str]) -> str:
    return environ.get("TORCH_EXTENSIONS_DIR") or str(torch_extensions_dir(python))


def prebuild(python: str, *, timeout_s: float = 2400.0) -> int:
    """Build (or find already built) the ops of OPS with `python`; 0 unless a required op could not be built."""
    env = unfrozen_environ(os.environ)
    folder = extensions_folder(python, env)
    env["TORCH_EXTENSIONS_DIR"] = folder
    for line in clear_stale_locks(Path(folder)):  # else the build below would wait on it forever, silently
        print(f"  {line}", flush=True)
    print(f"Building DeepSpeed's ops once (CPU Adam, and the CPU accelerator's and NVMe offload's where they apply; "
          f"a few minutes; into {folder})...", flush=True)
    started = time.monotonic()
    wanted = json.dumps([[name, cpu_only] for name, _required, cpu_only in OPS])
    try:
        done = _run_build([python, "-c", _BUILD, wanted], env, timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"traindeck: could not build DeepSpeed's ops: {exc}", file=sys.stderr)
        for line in clear_stale_locks(Path(folder)):  # the build just killed left its lock
            print(f"  {line}", file=sys.stderr)
        return 1
    took = time.monotonic() - started
    if done.returncode == NO_DEEPSPEED:
        print("  skipped: deepspeed is not installed in this interpreter")
        return 0
    said = _said(done.stdout)
    failed = done.returncode != 0 or len(said) < len(OPS)
    for (name, required, _cpu_only), report in zip(OPS, said, strict=False):
        op = report.get("op", name)
        if "seconds" in report:
            seconds = float(report["seconds"])
            print(f"  {op} ready in {seconds:.0f} s" + (" (already built)" if seconds < ALREADY_BUILT_S else ""),
                  flush=True)
        elif "skipped" in report:
            print(f"  {op}: skipped, {report['skipped']}", flush=True)
        else:
            print(f"traindeck: building DeepSpeed's {op} failed: {report.get('error', 'no reason given')}"
                  + ("" if required else " (a run that needs it builds it on first use)"), file=sys.stderr)
            failed = failed or required
    if done.returncode != 0:
        tail = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()][-5:]
        print(f"traindeck: building DeepSpeed's ops failed after {took:.0f} s:", file=sys.stderr)
        for line in tail:
            print(f"  {line}", file=sys.stderr)
    return 1 if failed else 0


def _run_build(argv: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """The build, whole: past `timeout_s` the Python, its ninja and the compilers are killed together (a ninja
    left behind would go on compiling, and its op's lock would then make the next load wait)."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            tree = [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]
        except psutil.Error:
            tree = []
        for member in tree:
            with contextlib.suppress(psutil.Error):
                member.kill()
        psutil.wait_procs(tree, timeout=10)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def _said(stdout: str) -> list[dict[str, Any]]:
    """The build script's JSON lines (DeepSpeed may print other lines between them)."""
    lines = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and "op" in value:
                lines.append(value)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m traindeck.backend.launch.prebuild_ops", description=__doc__)
    parser.add_argument("--python", metavar="PATH", help="the training interpreter (default: this Python)")
    args = parser.parse_args(argv)
    return prebuild(resolve_python(args.python))


if __name__ == "__main__":
    sys.exit(main())

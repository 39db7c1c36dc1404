"""The set-up's op build, cut short: the Python that builds, its ninja and the compilers go together (a ninja left
behind would go on compiling while the op's lock makes the next load wait), and the lock is cleared."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from traindeck.backend.launch import prebuild_ops

# A build that never ends: the Python starts a "ninja" in the op's folder, which starts a "compiler".
BUILD = """
import os, subprocess, sys, time
op = os.environ["TORCH_EXTENSIONS_DIR"] + "/async_io"
open(op + "/lock", "w").close()
subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                  "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"], cwd=op)
print("started", flush=True)
time.sleep(600)
"""


def test_a_build_past_its_time_is_killed_whole_and_leaves_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    op = tmp_path / "ext" / "async_io"
    op.mkdir(parents=True)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setattr(prebuild_ops, "_BUILD", BUILD)
    started = time.monotonic()
    # Past extension_locks.MIN_AGE_S (10 s): a lock younger than that is taken for a build starting now.
    assert prebuild_ops.prebuild(sys.executable, timeout_s=12.0) == 1
    assert time.monotonic() - started < 60
    said = capsys.readouterr()
    assert "could not build DeepSpeed's ops" in said.err, said.err
    assert not _working_in(op)
    assert not (op / "lock").exists(), said.err
    assert "removed a stale build lock" in said.err, said.err



def _working_in(folder: Path) -> list[list[str]]:
    """The command lines of processes working in `folder` (the "ninja" and the "compiler" run there)."""
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and Path(proc.cwd()).is_relative_to(folder):
                out.append(proc.cmdline())
        except psutil.Error:
            continue
    return out

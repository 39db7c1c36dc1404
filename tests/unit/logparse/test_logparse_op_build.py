"""First-use op builds told apart from a stall: the build messages torch and DeepSpeed really write (copied from the
installed torch/utils/cpp_extension.py and deepspeed/ops/op_builder/builder.py), and compiler processes of a run."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil
import pytest

from traindeck.backend.logparse.op_build import OpBuildTracker, build_text
from traindeck.backend.runs.diagnosis.op_builds import ops_being_built


@pytest.mark.parametrize(("line", "change"), [
    ("Building extension module cpu_adam...", "building:cpu_adam"),
    ("Emitting ninja build file /root/.cache/torch_extensions/py311_cpu/cpu_adam/build.ninja...", "building:cpu_adam"),
    ("[1/3] c++ -MMD -MF cpu_adam.o.d -DTORCH_EXTENSION_NAME=cpu_adam -DTORCH_API_INCLUDE_EXTENSION_H -O3 -c "
     "/ds/csrc/adam/cpu_adam.cpp -o cpu_adam.o", "building:cpu_adam"),
    ("Building extension module cpu_adam_v1...", "building:cpu_adam"),  # torch's bumped name
    ("Loading extension module cpu_adam...", "loaded:cpu_adam"),
    ("Time to load cpu_adam op: 93.61 seconds", "loaded:cpu_adam"),
    ("Using /root/.cache/torch_extensions/py311_cpu as PyTorch extensions root...", None),
    ("step 10 loss 2.31", None),
])
def test_build_lines(line: str, change: str | None) -> None:
    assert OpBuildTracker().feed(line, 0.0) == change


def test_a_build_is_open_until_its_op_is_loaded() -> None:
    tracker = OpBuildTracker()
    assert tracker.feed("Emitting ninja build file /x/cpu_adam/build.ninja...", 1.0) == "building:cpu_adam"
    assert tracker.feed("Building extension module cpu_adam...", 2.0) is None, "announced once"
    assert tracker.building_now == {"cpu_adam": 1.0}
    assert tracker.feed("[rank0]: Time to load cpu_adam op: 93.61 seconds", 95.0) == "loaded:cpu_adam"
    assert tracker.building_now == {} and tracker.loaded == {"cpu_adam": 93.61}


@pytest.mark.parametrize(("ops", "text"), [
    (["cpu_adam"], "building DeepSpeed's cpu_adam (first use, a few minutes)"),
    (["deepspeed_shm_comm", "cpu_adam"], "building DeepSpeed's cpu_adam, deepspeed_shm_comm (first use, a few minutes)"),
    (["tiny_op"], "building the torch extension tiny_op (first use, a few minutes)"),
    (["ops"], "building DeepSpeed/torch ops (first use, a few minutes)"),
])
def test_build_text(ops: list[str], text: str) -> None:
    assert build_text(ops) == text


def test_compiler_processes_name_the_op_from_their_build_folder(tmp_path: Path) -> None:
    # torch runs ninja in <TORCH_EXTENSIONS_DIR>/<op>; a process is named after the file it runs.
    folder = tmp_path / "cpu_adam"
    folder.mkdir()
    ninja = tmp_path / "bin" / "ninja"
    ninja.parent.mkdir()
    ninja.write_text("#!/bin/sh\nsleep 30\n")
    ninja.chmod(0o755)
    proc = subprocess.Popen([str(ninja), "-v"], cwd=folder)
    other = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(proc.pid).name() != "ninja" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ops_being_built([psutil.Process(proc.pid), psutil.Process(other.pid)]) == ["cpu_adam"]
        assert ops_being_built([psutil.Process(other.pid)]) == []
    finally:
        for p in (proc, other):
            p.kill()
            p.wait()

"""A run whose ranks exited before its launcher reaped them (torchrun and DeepSpeed's launcher look every few
seconds): recorded by the real recorder from a real process tree, read back into the Offload tab's host chart."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pynvml
import pytest

pytest.importorskip("PySide6")

from fixtures.nvml.fake_driver import MIB, FakePynvml, recording  # noqa: E402

# A stand-in `torch.distributed.run` (found first on sys.path): two ranks that hold 40 MiB each and exit when their
# stdin closes; it sees them exit without reaping them (waitid WNOWAIT: they stay zombies) and reaps them only once
# the file named by its last argument exists.
FAKE_TORCHRUN = r"""
import json, os, subprocess, sys, time
rank_code = "import sys; data = b'\x01' * (40 * 1024 * 1024); print('ready', flush=True); sys.stdin.read()"
ranks = [subprocess.Popen([sys.executable, "-c", rank_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2")) for r in range(2)]
for rank in ranks:
    rank.stdout.readline()
print(json.dumps({"ranks": [rank.pid for rank in ranks]}), flush=True)
sys.stdin.readline()
for rank in ranks:
    rank.stdin.close()
for rank in ranks:
    os.waitid(os.P_PID, rank.pid, os.WEXITED | os.WNOWAIT)
print("exited", flush=True)
while not os.path.exists(sys.argv[-1]):
    time.sleep(0.05)
for rank in ranks:
    rank.wait()
"""


def _record_ranks_that_end_before_the_launcher(tmp_path: Path, store: Path, run_id: str) -> None:
    from traindeck.backend.monitor.nvml import NvmlLibrary
    from traindeck.backend.monitor.recorder import RunResourceRecorder
    from traindeck.backend.monitor.store_read import resource_summary

    package = tmp_path / "torch" / "distributed"
    package.mkdir(parents=True)
    for init in (tmp_path / "torch" / "__init__.py", package / "__init__.py"):
        init.write_text("")
    (package / "run.py").write_text(FAKE_TORCHRUN)
    reap = tmp_path / "reap"
    launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py",
                                 str(reap)], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    no_gpu = NvmlLibrary(FakePynvml(recording("gt_1030"), init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    recorder = RunResourceRecorder(store, run_id, lambda: launcher.pid, interval_s=0.2, gpu_library=no_gpu)
    assert launcher.stdin is not None and launcher.stdout is not None
    try:
        json.loads(launcher.stdout.readline())
        recorder.start()
        _wait_for(lambda: resource_summary(store, run_id)["samples"] >= 3)
        launcher.stdin.write("end\n")
        launcher.stdin.flush()
        assert launcher.stdout.readline().strip() == "exited"
        recorded = resource_summary(store, run_id)["samples"]
        _wait_for(lambda: resource_summary(store, run_id)["samples"] >= recorded + 3)  # the ranks are zombies
    finally:
        recorder.stop()
        reap.touch()
        launcher.stdin.close()
        launcher.wait(30)


def _wait_for(condition, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_ranks_that_exited_leave_their_last_memory_in_the_host_charts_legend(qtbot, tmp_path):
    from traindeck.backend.monitor import run_offload
    from traindeck.gui.widgets.chart_axis import format_value
    from traindeck.gui.widgets.offload_view import OffloadView

    store = tmp_path / "runs.sqlite3"
    _record_ranks_that_end_before_the_launcher(tmp_path, store, "ended-ranks")
    view_data = run_offload("ended-ranks", store_path=store)
    ranks = np.asarray(view_data["ranks_host_bytes"], dtype=float)
    recorded = ranks[np.isfinite(ranks)]
    assert recorded.size >= 3 and np.all(recorded >= 80 * MIB)  # no 0 B from ranks that had exited
    assert np.isnan(ranks[-1])  # after they exited: a gap, not a figure

    view = OffloadView()
    qtbot.addWidget(view)
    view.set_view(view_data)
    view.host.flush()
    assert view.host.legend_text("ranks' RSS") == f"ranks' RSS  {format_value(recorded[-1], 'B')}"

"""The end of a real run (a real supervisor process) when NVML cannot tell whether the run's processes are off
the GPUs: the run says so instead of "confirmed", succeeds as trained, and records the driver's versions.
The supervisor's `import pynvml` gets the real module over a fake driver (fixtures/nvml/driver_shim)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import TESTS
from support.runhelp import events, python_job, wait_finished

from traindeck.backend.monitor.store_read import resource_summary
from traindeck.backend.runs.record.run_store import RunStore

SHIM = TESTS / "fixtures" / "nvml" / "driver_shim"


def _fake_driver(monkeypatch: pytest.MonkeyPatch, recording: str, **options: object) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(SHIM), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TRAINDECK_TEST_FAKE_NVML", json.dumps({"recording": recording, "options": options}))


def test_mig_lists_refused_make_the_end_unconfirmed_with_the_reason_and_the_run_still_succeeds(monkeypatch):
    _fake_driver(monkeypatch, "a100_sxm4_80gb_mig", privileged=False, pcie_delay_s=0)
    run = python_job("--steps", "5", "--step-time", "0.3")
    done = wait_finished(run.id, 90)
    assert done.state == "succeeded", (done.state_detail, events(run.id))
    kinds = dict(events(run.id))
    assert "confirmed" not in kinds
    assert "unknown: GPU 0: NVML lists a MIG-enabled GPU's processes only to root" in kinds["unconfirmed"]
    with RunStore() as store:
        summary = resource_summary(store.path, run.id)
    assert summary["gpu_versions"] == {"driver": "535.54.03", "cuda": "12.2", "nvml": "12.535.54.03"}
    assert summary["gpu_count"] == 1

    shown = subprocess.run([sys.executable, "-m", "traindeck", "runs", "show", run.id], capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    shown = shown.stdout
    assert "gpus      driver 535.54.03, cuda 12.2, nvml 12.535.54.03" in shown
    assert "end       unconfirmed: no process of the run remains" in shown
    assert "processes only to root" in shown


def test_a_driver_without_v3_no_longer_fails_a_run_that_trained_fine(monkeypatch):
    # Driver 470 exports no _v3 process functions: pynvml's own call raises NVMLLibraryMismatchError there.
    _fake_driver(monkeypatch, "gt_1030", pcie_delay_s=0)
    run = python_job("--steps", "3", "--step-time", "0.3")
    done = wait_finished(run.id, 90)
    assert done.state == "succeeded", (done.state_detail, events(run.id))
    kinds = dict(events(run.id))
    assert kinds["confirmed"].startswith("nothing of the run remains")  # the desktop's processes are not the run's

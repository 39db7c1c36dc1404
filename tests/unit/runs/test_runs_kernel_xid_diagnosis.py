"""A death's diagnosis names an XID the driver wrote to the kernel log even when NVML's event set never saw it:
the run's recorder wrote its GPUs' bus ids (the fake driver's dual A5000), the kernel log (a kmsg-format file put
where evidence.py reads /dev/kmsg) holds posted Xid lines, and the run end gathers them into the evidence."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fixtures.nvml.fake_driver import FakePynvml, recording

from traindeck.backend.core.paths import run_store_path
from traindeck.backend.monitor.kernel_log import boot_seconds_now
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.sample_store import ResourceWriter
from traindeck.backend.monitor.sampler import ResourceSampler
from traindeck.backend.runs.diagnosis import evidence as evidence_module
from traindeck.backend.runs.diagnosis.diagnose import Evidence, ProcessEnd, diagnose
from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.supervisor.run_end import RunEnd

LINES = json.loads((Path(__file__).parents[2] / "fixtures" / "kmsg" / "nvrm_xid_lines.json").read_text())["lines"]
RUN = "20261127-193000-5e1d"


def _record_gpus() -> None:
    """The run's recorder as it runs: samples of the fake driver's GPUs written to the run store."""
    fake = FakePynvml(recording("dual_rtx_a5000"))
    sampler = ResourceSampler(lambda: None, gpu_library=NvmlLibrary(fake, host_pid_namespace=True), interval_s=0.1)
    writer = ResourceWriter(run_store_path(), RUN, interval_s=1.0, started_at=time.time())
    sampler.start()
    try:
        writer.write(sampler.sample())
    finally:
        sampler.stop()
        writer.close()


def test_a_rank_killed_after_its_gpu_fell_off_the_bus_is_diagnosed_with_the_kernel_logs_xid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where /dev/kmsg is read: nothing there until the lines below are written.
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    monkeypatch.setattr(evidence_module, "KMSG_PATH", kmsg)
    end = RunEnd(RunDir(tmp_path / "run"), None, RUN, str(run_store_path()), None, None, None,  # type: ignore[arg-type]
                 sentinel_pid=lambda: None, reap=lambda: None, stop_detail=lambda: None)
    _record_gpus()
    uptime = boot_seconds_now()
    assert uptime is not None
    fallen = LINES[0]["line"].replace("0000:44:00", "0000:c1:00")  # the posted line, on the recorded GPU 1's bus
    other = LINES[1]["line"]  # a bus NVML did not list: named by its bus id
    before = "3,1,{},-;{}\n".format(int((end.boot_s_at_start - 60) * 1e6), LINES[5]["line"])  # before the run
    kmsg.write_text(before + "".join(f"3,{2 + i},{int((uptime + 0.5 + i) * 1e6)},-;{text}\n"
                                     for i, text in enumerate((fallen, other))))
    xids = end._gpu_xids(recorder_ran=True)
    assert [(x["gpu"], x["xid"], x["source"]) for x in xids] == [(1, 79, "kernel"), ("0000:cb:00", 109, "kernel")]
    assert "fallen off the bus" in xids[0]["text"]

    now = time.time()
    died = Evidence(launcher_returncode=1, ends=[ProcessEnd(101, "rank", 1, now, -9),
                                                ProcessEnd(100, "launcher", None, now + 1, 1)],
                    log_tail=["Traceback (most recent call last):", "RuntimeError: CUDA error: unspecified launch failure"],
                    gpu_xids=xids)
    diagnosis = diagnose(died)
    assert "GPU 1 reported XID 79 (the GPU has fallen off the bus)" in diagnosis.summary
    assert "GPU 0000:cb:00 reported XID 109" in diagnosis.summary
    assert any("kernel log: NVRM: Xid (PCI:0000:c1:00): 79" in line for line in diagnosis.evidence)
    assert diagnosis.advice.startswith("The GPU fell off the bus")


def test_no_readable_kernel_log_leaves_the_xids_to_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence_module, "KMSG_PATH", tmp_path / "hidden")  # a container without /dev/kmsg
    end = RunEnd(RunDir(tmp_path / "run"), None, RUN, str(run_store_path()), None, None, None,  # type: ignore[arg-type]
                 sentinel_pid=lambda: None, reap=lambda: None, stop_detail=lambda: None)
    assert end._gpu_xids(recorder_ran=False) == []
    assert evidence_module.kernel_gpu_xids({0: "00000000:81:00.0"}) is None

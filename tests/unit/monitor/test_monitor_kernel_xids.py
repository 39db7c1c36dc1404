"""XIDs from the kernel log: NVIDIA's driver's `NVRM: Xid` lines as they were posted publicly (the fixture names
each line's source), read from a kmsg-format file put where /dev/kmsg is read, named by the GPU NVML lists at that
bus and carried in each GPU's health (what `traindeck monitor --json` prints) with their source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.nvml.fake_driver import FakePynvml, recording

from traindeck.backend.monitor import kernel_log
from traindeck.backend.monitor.kernel_log import bus_key, kernel_records, parse_xid
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.sampler import ResourceSampler

LINES = json.loads((Path(__file__).parents[2] / "fixtures" / "kmsg" / "nvrm_xid_lines.json").read_text())


def kmsg_text(messages: list[tuple[float, str]]) -> str:
    """Records as /dev/kmsg gives them: "priority,sequence,microseconds since boot,flags;message", then a
    continuation line as the kernel adds for a device's messages."""
    return "".join(f"3,{1000 + i},{int(boot_s * 1e6)},-;{text}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:c1:00.0\n"
                   for i, (boot_s, text) in enumerate(messages))


@pytest.mark.parametrize("entry", LINES["lines"], ids=lambda e: f"xid{e['xid']}-{e['bus']}")
def test_each_posted_xid_line_gives_its_bus_xid_and_pid(entry: dict) -> None:  # type: ignore[type-arg]
    found = parse_xid(entry["line"])
    assert found is not None, entry["source"]
    assert (found["bus"], found["xid"], found["pid"]) == (entry["bus"], entry["xid"], entry["pid"])
    assert found["text"].startswith("NVRM: Xid (PCI:")  # the driver's words, without dmesg's stamp


@pytest.mark.parametrize("entry", LINES["not_xid"], ids=lambda e: e["line"][:30])
def test_other_driver_lines_are_not_xids(entry: dict) -> None:  # type: ignore[type-arg]
    assert parse_xid(entry["line"]) is None


def test_nvmls_bus_id_and_the_kernel_logs_name_the_same_gpu() -> None:
    assert bus_key("00000000:C1:00.0") == bus_key("0000:c1:00") == (0, 0xC1, 0)
    assert bus_key("00000019:01:00.0") == bus_key("0019:01:00") != bus_key("0000:01:00")
    assert bus_key("not a bus") is None


def test_a_kmsg_file_is_read_as_records_since_a_boot_time(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text(kmsg_text([(10.0, "usb 1-1: new device"), (20.0, LINES["lines"][0]["line"])]))
    records = kernel_records(log)
    assert records is not None and [(r.boot_s, r.message) for r in records] == [
        (10.0, "usb 1-1: new device"), (20.0, LINES["lines"][0]["line"])]  # continuation lines are not records
    assert [r.boot_s for r in kernel_records(log, since_boot_s=15.0) or []] == [20.0]
    assert kernel_records(tmp_path / "absent") is None  # a container that hides the log: None, not an error


def test_the_monitors_json_has_kernel_log_xids_on_the_gpu_at_that_bus(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The dual A5000's GPU 1 sits at 00000000:C1:00.0: the posted Xid 79 line, put on that bus, is GPU 1's; a
    line for a bus NVML does not list is on no GPU's health."""
    fallen = LINES["lines"][0]["line"].replace("0000:44:00", "0000:c1:00")
    uptime = kernel_log.boot_seconds_now()
    assert uptime is not None
    log = tmp_path / "kmsg"
    log.write_text(kmsg_text([(uptime - 30.0, fallen), (uptime - 20.0, LINES["lines"][1]["line"])]))
    monkeypatch.setattr(kernel_log, "KMSG", log)
    fake = FakePynvml(recording("dual_rtx_a5000"))
    sampler = ResourceSampler(lambda: None, gpu_library=NvmlLibrary(fake, host_pid_namespace=True), interval_s=0.1)
    sampler.start()
    try:
        data = json.loads(json.dumps(sampler.sample().to_json_dict()))
    finally:
        sampler.stop()
    gpu0, gpu1 = (g["health"] for g in data["gpus"])
    assert gpu0["xid"] == []
    assert [(e["xid"], e["source"]) for e in gpu1["xid"]] == [(79.0, "kernel")]
    assert abs(gpu1["xid"][0]["t"] - (data["t"] - 30.0)) < 5.0  # at the time the kernel stamped, not now

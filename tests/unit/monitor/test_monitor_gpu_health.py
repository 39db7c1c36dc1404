"""GPU health (throttling, the PCIe link against its maximum, replays, ECC, remapped rows, XID errors) read through
the real pynvml wrappers over the fake driver, from what nvidia-smi printed on real GPUs (the recordings'
`health`), then changed the way a failing GPU changes: a thermal slowdown, a link trained down, an XID."""

from __future__ import annotations

import json
import subprocess
import sys

from fixtures.nvml.fake_driver import FakePynvml, recording

from traindeck.backend.monitor.gpu_sampler import GpuSampler
from traindeck.backend.monitor.nvml import NvmlLibrary


def _sampler(name: str):  # type: ignore[no-untyped-def]
    fake = FakePynvml(recording(name))
    return GpuSampler(NvmlLibrary(fake, host_pid_namespace=True), pcie_interval_s=0.1), fake.driver


def test_an_idle_a5000s_link_at_gen1_of_gen4_is_read_and_not_flagged_while_idle() -> None:
    sampler, _ = _sampler("dual_rtx_a5000")
    with sampler:
        first = sampler.sample().gpus[0]
    health = first.health
    assert health is not None and health.throttle == ("gpu_idle",) and health.throttle_known
    assert health.pcie == {"gen": 1, "max_gen": 4, "width": 16, "max_width": 16}
    assert health.pcie_replays == 0
    assert health.ecc == {"enabled": False, "volatile_corrected": None, "volatile_uncorrected": None,
                          "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False}}
    assert health.throttled() == () and health.problems(first.utilization_percent) == []


def test_a_busy_gpu_throttled_with_its_link_trained_down_and_an_xid_says_each() -> None:
    sampler, driver = _sampler("dual_rtx_a5000")
    with sampler:
        driver.set_health(1, clocks_event_reasons=["hw_thermal_slowdown", "sw_power_cap"], pcie_gen=2, pcie_width=8,
                          replay_counter=37)
        driver.raise_xid(1, 79)
        second = sampler.sample().gpus[1]
        again = sampler.sample().gpus[1]
    health = second.health
    assert health is not None and health.throttled() == ("sw_power_cap", "hw_thermal_slowdown")
    assert health.problems(95.0) == [
        "throttled: power cap, thermal (hardware)", "PCIe link at Gen2 x8 of Gen4 x16 while busy", "37 PCIe replays",
        "XID 79"]
    assert "PCIe link" not in " ".join(health.problems(0.0))  # idle: a slow link is the link resting
    assert again.health is not None and [int(e["xid"]) for e in again.health.xid] == [79]  # kept, not repeated


def test_a_driver_before_r535_answers_through_the_older_throttle_reasons_call() -> None:
    sampler, driver = _sampler("gt_1030")
    with sampler:
        gpu = sampler.sample().gpus[0]
    assert "nvmlDeviceGetCurrentClocksEventReasons" not in driver.exported
    assert gpu.health is not None and gpu.health.throttle == ("gpu_idle",) and gpu.health.throttle_known
    assert gpu.health.pcie == {"gen": 3, "max_gen": 3, "width": 4, "max_width": 4}
    assert gpu.health.ecc is None  # a GeForce card: no ECC, no row remapping


def test_health_with_ecc_errors_and_a_pending_remap() -> None:
    sampler, driver = _sampler("dual_rtx_a5000")
    with sampler:
        driver.set_health(0, ecc_mode="Enabled", ecc_errors={"volatile": {"corrected": 4, "uncorrected": 2}},
                          remapped_rows={"corrected": 1, "uncorrected": 2, "pending": True, "failure": False})
        health = sampler.sample().gpus[0].health
    assert health is not None and health.ecc is not None
    assert (health.ecc["volatile_corrected"], health.ecc["volatile_uncorrected"]) == (4, 2)
    assert health.problems(0.0) == ["2 uncorrected ECC errors", "a row remap is pending (reset the GPU)"]


def test_the_monitors_json_has_each_gpus_health_as_the_command_line_prints_it() -> None:
    """`traindeck monitor --once --json` prints ResourceSample.to_json_dict(): each GPU gains "health"."""
    from traindeck.backend.monitor.sampler import ResourceSampler

    fake = FakePynvml(recording("dual_rtx_a5000"))
    fake.driver.set_health(0, clocks_event_reasons=["sw_power_cap"])
    sampler = ResourceSampler(lambda: None, gpu_library=NvmlLibrary(fake, host_pid_namespace=True), interval_s=0.1)
    sampler.start()
    try:
        data = json.loads(json.dumps(sampler.sample().to_json_dict()))
    finally:
        sampler.stop()
    health = data["gpus"][0]["health"]
    assert health["throttle"] == ["sw_power_cap"] and health["pcie"] == {"gen": 1, "max_gen": 4, "width": 16,
                                                                        "max_width": 16}
    assert health["pcie_replays"] == 0 and health["xid"] == [] and health["ecc"]["enabled"] is False
    done = subprocess.run([sys.executable, "-m", "traindeck", "monitor", "--once", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gpus"] == []  # this machine: no GPU, so no health to print


def test_a_run_recorded_on_a_throttled_gpu_has_it_in_its_step_verdict(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The recorder keeps a row when a GPU's health changes; the step anatomy names the throttling that covered
    its steps, before any advice on the setup."""
    import time

    from traindeck.backend.core.paths import run_store_path
    from traindeck.backend.monitor.sample_store import ResourceWriter
    from traindeck.backend.monitor.sampler import ResourceSampler
    from traindeck.backend.monitor.store_read import read_gpu_health
    from traindeck.backend.runs.control.step_view import run_step_anatomy
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore
    from traindeck.backend.steps import PHASES, StepRecord

    record = RunRecord(id="20261127-120000-7e7e", run_dir=str(tmp_path), created_at=time.time(), name="hot",
                       state="succeeded")
    with RunStore() as store:
        store.add_run(record)
    fake = FakePynvml(recording("dual_rtx_a5000"))
    sampler = ResourceSampler(lambda: None, gpu_library=NvmlLibrary(fake, host_pid_namespace=True), interval_s=0.1)
    writer = ResourceWriter(run_store_path(), record.id, interval_s=1.0, started_at=time.time())
    sampler.start()
    try:
        for _ in range(3):
            writer.write(sampler.sample())  # healthy: one row per GPU, then none while nothing changes
        fake.driver.set_health(0, clocks_event_reasons=["hw_thermal_slowdown"])
        hot = sampler.sample()
        writer.write(hot)
        writer.write(sampler.sample())
    finally:
        sampler.stop()
        writer.close()
    rows = read_gpu_health(run_store_path(), record.id)
    assert [(gpu, h["throttle"]) for gpu, _t, h in rows] == [(0, ["gpu_idle"]), (1, ["gpu_idle"]),
                                                            (0, ["hw_thermal_slowdown"])]
    phases = {p: 0.0 for p in PHASES} | {"forward": 30.0, "backward": 70.0}
    steps = [StepRecord(rank=0, step=n, t=hot.t + 0.2 * n, step_ms=100.0, phases_ms=dict(phases)) for n in range(1, 9)]
    with RunStore() as store:
        store.add_steps(record.id, steps)
    anatomy = run_step_anatomy(record)
    assert "GPU 0 was throttled (thermal (hardware)) for 100% of the timed steps" in anatomy.summary
    assert anatomy.advice[0].startswith("GPU 0 was throttled") and "GPU 1" not in anatomy.summary

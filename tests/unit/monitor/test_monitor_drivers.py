"""Real drivers' behaviours, reproduced under the real pynvml wrappers by a fake driver (fixtures/nvml/fake_driver):
what the sampler delivers, what the end-of-run GPU check concludes, for each case."""

from __future__ import annotations

import copy
import ctypes
import sys
import time

import pynvml
import pytest
from fixtures.monitor_run_tree import run_tree
from fixtures.nvml.fake_driver import MIB, FakeDriver, FakePynvml, install, no_driver, recording

from traindeck.backend.monitor.gpu_processes import gpu_memory_by_pid
from traindeck.backend.monitor.gpu_sampler import GpuSampler
from traindeck.backend.monitor.nvml import NvmlLibrary, wait_for_gpus_to_let_go
from traindeck.backend.monitor.sampler import ResourceSampler


def _library(module, **options) -> NvmlLibrary:
    options.setdefault("host_pid_namespace", True)
    return NvmlLibrary(module, **options)


def _read(module, **options):
    with GpuSampler(_library(module, **options), pcie_interval_s=0.1) as sampler:
        return sampler.sample()


def _three_processes(driver: str) -> dict:
    """The A100 recording without MIG, running three compute processes (what any driver can list)."""
    record = copy.deepcopy(recording("a100_sxm4_80gb_mig"))
    gpu = record["gpus"][0]
    gpu.pop("mig_mode")
    gpu["processes"] = [{"pid": pid, "type": "C", "name": "python", "used_memory": mib}
                        for pid, mib in ((1111, 1000), (2222, 2000), (3333, 3000))]
    record["driver_version"] = driver
    return record


# --- drivers without the _v3 process functions -------------------------------------------------------------


def test_driver_470_without_v3_lists_through_v2_where_pynvml_itself_raises():
    module = FakePynvml(recording("gt_1030"), pcie_delay_s=0)
    module.nvmlInit()
    handle = module.nvmlDeviceGetHandleByIndex(0)
    # What a caller of pynvml's unversioned function gets on this driver: a plain Exception, not an NVMLError.
    with pytest.raises(module.NVMLLibraryMismatchError):
        module.nvmlDeviceGetGraphicsRunningProcesses(handle)
    assert not issubclass(module.NVMLLibraryMismatchError, module.NVMLError)
    module.nvmlShutdown()

    readout = _read(module)
    (gt,) = readout.gpus
    assert gt.processes_unknown is None
    assert [p.pid for p in gt.processes][:3] == [607, 746, 750] and len(gt.processes) == 10
    assert readout.versions["driver"] == "470.74"
    assert module.driver.calls.get("nvmlDeviceGetGraphicsRunningProcesses_v2", 0) >= 2  # count, then fill


def test_driver_535_98_dropped_v3_and_the_lists_come_through_v2():
    module = FakePynvml(recording("dual_rtx_a5000"), driver="535.98", pcie_delay_s=0)
    lib = _library(module)
    readout = _read(module)
    assert [(p.pid, p.used_memory_bytes) for g in readout.gpus for p in g.processes] == [
        (100477, 22430 * MIB), (100477, 17246 * MIB)]
    lib.open()
    assert lib.process_api is not None and lib.process_api.suffix == "_v2"
    lib.close()


def test_driver_older_than_v2_lists_through_v1_entries():
    module = FakePynvml(recording("gt_1030"), pcie_delay_s=0)
    for name in ("nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v2"):
        module.driver.exported.discard(name)
    lib = _library(module)
    with GpuSampler(lib, pcie_interval_s=0.1) as sampler:
        (gt,) = sampler.sample().gpus
        assert lib.process_api is not None and ctypes.sizeof(lib.process_api.entry) == 16
    assert {p.pid: p.used_memory_bytes for p in gt.processes}[607] == 547 * MIB


# --- 535.43 - 535.86: 32-byte _v3 entries ------------------------------------------------------------------


def test_driver_535_54_writes_32_byte_entries_which_pynvml_misreads_and_we_read_right():
    module = FakePynvml(_three_processes("535.54.03"), pcie_delay_s=0)
    assert module.driver.v3_entry_size == 32
    module.nvmlInit()
    misread = [p.pid for p in module.nvmlDeviceGetComputeRunningProcesses(module.nvmlDeviceGetHandleByIndex(0))]
    module.nvmlShutdown()
    assert misread != [1111, 2222, 3333]  # pynvml's 24-byte stride over 32-byte entries
    print(f"pynvml 13.x over driver 535.54.03 reads PIDs {misread}")

    (gpu,) = _read(module).gpus
    assert [(p.pid, p.used_memory_bytes) for p in gpu.processes] == [
        (1111, 1000 * MIB), (2222, 2000 * MIB), (3333, 3000 * MIB)]


def test_driver_550_v3_entries_are_24_bytes_again():
    module = FakePynvml(_three_processes("550.54.14"), pcie_delay_s=0)
    (gpu,) = _read(module).gpus
    assert [p.pid for p in gpu.processes] == [1111, 2222, 3333]
    assert "nvmlDeviceGetComputeRunningProcesses_v3" in module.driver.calls


# --- cannot tell is not nothing ----------------------------------------------------------------------------


def test_mig_parent_lists_only_to_root_and_the_answer_is_unknown_not_none():
    module = FakePynvml(recording("a100_sxm4_80gb_mig"), privileged=False, pcie_delay_s=0)
    (a100,) = _read(module).gpus
    assert a100.processes == () and a100.processes_unknown == "NVML lists a MIG-enabled GPU's processes only to root"
    assert a100.memory_total_bytes == 81920 * MIB  # the rest of the GPU still reads
    holders = wait_for_gpus_to_let_go({1111}, timeout_s=0, library=_library(module))
    assert holders.outcome == "unknown" and "MIG" in (holders.unknown or "")

    as_root = FakePynvml(recording("a100_sxm4_80gb_mig"), pcie_delay_s=0)
    assert wait_for_gpus_to_let_go({1111}, timeout_s=0, library=_library(as_root)).outcome == "none"


def test_container_without_host_pids_gives_unknown_and_no_per_rank_gpu_memory():
    with run_tree(ranks=1, mib=1) as tree:
        (rank,) = tree["ranks"]
        module = FakePynvml(recording("dual_rtx_a5000"), pid_map={100477: 3_000_001}, pcie_delay_s=0)
        library = NvmlLibrary(module, host_pid_namespace=False)
        with ResourceSampler(tree["launcher"], gpu_library=library) as sampler:
            sample = sampler.sample()
        assert all("PID namespace" in (g.processes_unknown or "") for g in sample.gpus)
        assert gpu_memory_by_pid(sample.gpus) == {}
        assert {p.pid: p.gpu_memory_bytes for p in sample.run.processes}[rank] is None
        holders = wait_for_gpus_to_let_go({rank}, timeout_s=0,
                                          library=NvmlLibrary(module, host_pid_namespace=False))
    assert holders.outcome == "unknown" and "--pid=host" in (holders.unknown or "")


def test_end_of_run_check_three_outcomes_over_one_nvml_session():
    listed = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
    holders = wait_for_gpus_to_let_go({100477, 5}, timeout_s=1.2, library=_library(listed))
    assert holders.outcome == "pids" and holders.pids == {100477}
    assert listed.driver.calls["nvmlInitWithFlags"] == 1  # polled several times, opened once
    assert listed.driver.calls["nvmlDeviceGetComputeRunningProcesses_v3"] >= 6  # 2 GPUs x 2 calls x polls
    assert listed.driver.initialised == 0

    assert wait_for_gpus_to_let_go({5}, library=_library(listed)).outcome == "none"

    refused = FakePynvml(recording("dual_rtx_a5000"), init_error=pynvml.NVML_ERROR_NO_PERMISSION)
    outcome = wait_for_gpus_to_let_go({5}, library=_library(refused))
    assert outcome.outcome == "unknown" and outcome.unknown == "no permission to read the NVIDIA driver (NVML)"

    # No driver at all: nothing can hold GPU memory.
    assert wait_for_gpus_to_let_go({5}, library=_library(no_driver())).outcome == "none"


# --- one GPU failing ---------------------------------------------------------------------------------------


def test_no_permission_on_one_gpu_leaves_a_placeholder_and_reads_the_other():
    module = FakePynvml(recording("dual_rtx_a5000"), no_permission=(0,), pcie_delay_s=0)
    readout = _read(module)
    assert readout.error is None and len(readout.gpus) == 2
    first, second = readout.gpus
    assert first.error is not None and "no permission" in first.error and first.memory_used_bytes is None
    assert second.error is None and second.memory_used_bytes == 17253 * MIB
    assert [p.pid for p in second.processes] == [100477]
    # The end-of-run check says what it cannot see, unless a GPU it can see lists the PIDs.
    assert wait_for_gpus_to_let_go({5}, library=_library(module)).outcome == "unknown"
    assert wait_for_gpus_to_let_go({100477}, timeout_s=0, library=_library(module)).outcome == "pids"


def test_a_gpu_lost_mid_run_becomes_a_placeholder_and_host_and_run_samples_go_on():
    with run_tree(ranks=1, mib=1) as tree:
        module = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
        with ResourceSampler(tree["launcher"], gpu_library=_library(module)) as sampler:
            before = sampler.sample()
            module.driver.lose(1)
            after = sampler.sample()
            later = sampler.sample()
    assert before.gpus[1].error is None
    assert after.gpus[1].error is not None and "Xid 79" in after.gpus[1].error
    assert later.gpus[1].error == after.gpus[1].error and later.gpus[1].name == "NVIDIA RTX A5000"
    assert after.gpus[0].error is None and after.gpus[0].memory_used_bytes == 22437 * MIB
    assert after.host.ram_total_bytes > 0 and after.run is not None and after.run.processes


def test_a_gpu_sampler_that_raises_loses_neither_host_nor_run():
    with run_tree(ranks=1, mib=1) as tree:
        module = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
        with ResourceSampler(tree["launcher"], gpu_library=_library(module)) as sampler:
            def broken():
                raise module.NVMLLibraryMismatchError("a plain Exception from pynvml")

            sampler.gpus.sample = broken
            sample = sampler.sample()
    assert sample.gpus == () and "plain Exception" in (sample.gpu_error or "")
    assert sample.host.ram_total_bytes > 0 and sample.run is not None and sample.run.processes


def test_no_driver_then_the_driver_loads_and_the_open_dashboard_sees_the_gpus():
    module = no_driver()
    library = _library(module, retry_every_s=0.0)
    sampler = ResourceSampler(None, gpu_library=library)
    sampler.start()
    try:
        first = sampler.sample()
        assert first.gpus == () and "libnvidia-ml" in (first.gpu_error or "")
        install(module, FakeDriver(recording("dual_rtx_a5000"), pcie_delay_s=0))
        second = sampler.sample()
    finally:
        sampler.stop()
    assert second.gpu_error is None and [g.name for g in second.gpus] == ["NVIDIA RTX A5000"] * 2
    assert second.gpu_versions["driver"] == "590.44.01" and second.gpu_versions["cuda"] == "13.1"


def test_a_failed_start_is_retried_no_sooner_than_asked():
    module = FakePynvml(recording("dual_rtx_a5000"), init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    library = _library(module, retry_every_s=3600.0)
    assert library.open() == "the NVIDIA driver is installed but not loaded"
    module.driver.init_error = None
    assert library.open() == "the NVIDIA driver is installed but not loaded"  # not yet: no init storm
    assert module.driver.calls["nvmlInitWithFlags"] == 1


# --- versions, temperature, PCIe counters ------------------------------------------------------------------


def test_versions_are_read_and_the_new_temperature_call_is_used_where_exported():
    old = FakePynvml(recording("dual_rtx_a5000"), driver="550.54.14", pcie_delay_s=0)
    new = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
    assert _read(old).gpus[0].temperature_c == 13.0 and "nvmlDeviceGetTemperatureV" not in old.driver.calls
    readout = _read(new)
    assert readout.gpus[0].temperature_c == 13.0 and "nvmlDeviceGetTemperature" not in new.driver.calls
    assert readout.versions == {"driver": "590.44.01", "cuda": "13.1", "nvml": "13.590.44.01"}


def test_pcie_from_cumulative_counters_where_the_gpu_keeps_them():
    module = FakePynvml(recording("dual_rtx_a5000"), pcie_counters=True, pcie_delay_s=0)
    with GpuSampler(_library(module), pcie_interval_s=0.1) as sampler:
        sampler.sample()
        module.driver.move_pcie(0, h2d=300 * MIB, d2h=100 * MIB)
        readout = sampler.sample()
    gpu0, gpu1 = readout.gpus
    assert gpu0.pcie_source == "counter" and gpu1.pcie_source == "counter"
    assert gpu1.pcie_h2d_bytes_per_s == 0
    # The rate is bytes over the time between the two counter readings: bytes moved are exact when integrated.
    assert gpu0.pcie_h2d_bytes_per_s is not None and gpu0.pcie_h2d_bytes_per_s > 300 * MIB  # well under 1 s apart
    assert module.driver.pcie_calls == 0  # the 20 ms sampled window is never read

    sampled = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
    with GpuSampler(_library(sampled), pcie_interval_s=0.1) as sampler:
        assert sampler.wait_for_pcie(2)
        assert sampler.sample().gpus[0].pcie_source == "sampled"


def test_sampled_pcie_is_read_at_varying_points_of_the_interval():
    # A fixed phase would read the same part of every periodic training step; the reader picks a random point.
    module = FakePynvml(recording("gt_1030"), pcie_delay_s=0)
    with GpuSampler(_library(module), pcie_interval_s=0.1) as sampler:
        assert sampler.wait_for_pcie(2)
        time.sleep(1.5)
    times = module.driver.pcie_times[::2]  # one per round (RX then TX)
    start = times[0]
    phases = [((t - start) % 0.1) for t in times[1:]]
    assert len(phases) >= 8
    assert max(phases) - min(phases) > 0.02, phases


def test_the_estimators_gpu_detection_goes_through_the_same_wrapper(monkeypatch):
    from traindeck.backend.estimate.machine import detect_gpus

    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(recording("dual_rtx_a5000"), no_permission=(0,)))
    (gpu,) = detect_gpus() or []  # GPU 0 is another job's: left out, and no exception
    assert (gpu.index, gpu.name, gpu.total_bytes, gpu.free_bytes) == (1, "NVIDIA RTX A5000", 24564 * MIB, 6862 * MIB)
    monkeypatch.setitem(sys.modules, "pynvml", no_driver())
    assert detect_gpus() is None


def test_traindeck_monitor_text_says_which_gpu_could_not_be_read_and_which_lists_are_unknown():
    from traindeck.backend.cli.monitor_cmd import format_sample

    module = FakePynvml(recording("dual_rtx_a5000"), no_permission=(0,), pcie_delay_s=0)
    with ResourceSampler(None, gpu_library=_library(module, host_pid_namespace=False)) as sampler:
        text = format_sample(sampler.sample())
    assert "driver 590.44.01, cuda 13.1, nvml 13.590.44.01" in text
    assert "GPU0 ?: no permission to open this GPU" in text
    assert "processes unknown (NVML lists host PIDs" in text

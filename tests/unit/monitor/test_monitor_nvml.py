"""GPU sampling: NVML value handling against recordings from real GPUs (the real pynvml wrappers over a fake
driver answering from them), and the real no-driver path on this machine."""

from __future__ import annotations

import ctypes.util
import threading
import time

import pynvml
import pytest
from fixtures.monitor_run_tree import run_tree
from fixtures.nvml.fake_driver import MIB, FakePynvml, recording

from traindeck.backend.monitor.gpu_processes import gpu_memory_by_pid
from traindeck.backend.monitor.gpu_sampler import GpuSampler
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.sampler import ResourceSampler

KIB = 1024


def _sampler(name: str, **fake_options):
    fake = FakePynvml(recording(name), **fake_options)
    return GpuSampler(NvmlLibrary(fake, host_pid_namespace=True), pcie_interval_s=0.1), fake.driver


def test_dual_a5000_values_come_through_in_our_units():
    sampler, fake = _sampler("dual_rtx_a5000")
    with sampler:
        assert sampler.wait_for_pcie(timeout=2)
        readout = sampler.sample()
    assert readout.error is None
    first, second = readout.gpus
    assert (first.index, first.name, first.uuid) == (0, "NVIDIA RTX A5000", "GPU-12345678-aaaa-bbbb-cccc-0123456789ab")
    assert first.utilization_percent == 0.0
    # nvmlMemory_v2_t: "used" leaves out the driver's reservation, as nvidia-smi shows it.
    assert (first.memory_used_bytes, first.memory_total_bytes) == (22437 * MIB, 24564 * MIB)
    assert first.power_w == pytest.approx(6.41) and first.power_limit_w == pytest.approx(230.0)
    assert first.temperature_c == 13.0 and first.sm_clock_mhz == 210
    # NVML's RX is what the GPU receives (host to device); TX what it sends.
    assert first.pcie_h2d_bytes_per_s == 439 * KIB and first.pcie_d2h_bytes_per_s == 488 * KIB
    assert second.pcie_h2d_bytes_per_s == 488 * KIB and second.pcie_d2h_bytes_per_s == 439 * KIB
    assert first.pcie_t is not None and first.pcie_t <= readout.t
    assert second.memory_used_bytes == 17253 * MIB and second.power_w == pytest.approx(13.6)
    assert fake.initialised == 0  # stop() shut NVML down again


def test_one_process_on_two_gpus_maps_to_its_pid_with_both_amounts():
    sampler, _ = _sampler("dual_rtx_a5000")
    with sampler:
        readout = sampler.sample()
    assert [(p.pid, p.gpu_index, p.used_memory_bytes, p.kind) for g in readout.gpus for p in g.processes] == [
        (100477, 0, 22430 * MIB, "compute"),
        (100477, 1, 17246 * MIB, "compute"),
    ]
    assert gpu_memory_by_pid(readout.gpus) == {100477: (22430 + 17246) * MIB}


def test_not_supported_metrics_are_none_and_the_rest_still_read():
    # A100 with MIG enabled: NVML has no device-wide utilisation (nvidia-smi printed N/A).
    sampler, _ = _sampler("a100_sxm4_80gb_mig")
    with sampler:
        sampler.wait_for_pcie(timeout=2)
        (a100,) = sampler.sample().gpus
    assert a100.utilization_percent is None
    assert a100.memory_used_bytes == 50 * MIB and a100.memory_total_bytes == 81920 * MIB
    assert a100.power_w == pytest.approx(67.03) and a100.power_limit_w == pytest.approx(500.0)
    assert a100.pcie_d2h_bytes_per_s == 4000 * KIB and a100.pcie_h2d_bytes_per_s == 0.0
    assert a100.processes == ()

    # GeForce GT 1030 (driver 470: no _v3 process lists, listed through _v2): no power reading, but a power
    # limit, and a desktop's worth of graphics processes.
    sampler, _ = _sampler("gt_1030")
    with sampler:
        (gt,) = sampler.sample().gpus
    assert gt.power_w is None and gt.power_limit_w == pytest.approx(30.0)
    assert (gt.utilization_percent, gt.temperature_c, gt.sm_clock_mhz) == (0.0, 36.0, 1265)
    assert [p.kind for p in gt.processes] == ["graphics"] * 10
    assert {p.pid: p.used_memory_bytes for p in gt.processes}[607] == 547 * MIB  # Xorg


def test_a_driver_without_memory_info_v2_falls_back_to_v1():
    # The GT 1030's driver 470 predates nvmlDeviceGetMemoryInfo_v2 (R510): the library does not export it.
    sampler, driver = _sampler("gt_1030")
    with sampler:
        (gt,) = sampler.sample().gpus
    assert gt.memory_used_bytes == (1998 - 1123) * MIB
    assert "nvmlDeviceGetMemoryInfo_v2" not in driver.calls

    sampler, _ = _sampler("a100_sxm4_80gb_mig", memory_v2=False)
    with sampler:
        (a100,) = sampler.sample().gpus
    # nvmlMemory_t counts the reservation as used: total - free.
    assert a100.memory_used_bytes == (81920 - 80999) * MIB


def test_every_nvml_metric_call_failing_gives_none_not_an_exception():
    fake = FakePynvml(recording("dual_rtx_a5000"))
    lib = NvmlLibrary(fake, host_pid_namespace=True)

    def fail(*args):
        raise RuntimeError("a wrapper failing in a way pynvml does not declare")

    for name in dir(fake):
        if name.startswith("nvmlDeviceGet") and name not in ("nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex"):
            setattr(fake, name, fail)
    sampler = GpuSampler(lib, pcie_interval_s=0.1)
    sampler.start()
    try:
        readout = sampler.sample()
    finally:
        sampler.stop()
    gpu = readout.gpus[0]
    assert (gpu.name, gpu.utilization_percent, gpu.memory_used_bytes, gpu.power_w, gpu.temperature_c) == (None,) * 5
    # The process lists are read through the C function table, which still answers.
    assert [p.pid for p in gpu.processes] == [100477]


def test_the_slow_pcie_call_does_not_delay_the_other_metrics():
    # Each PCIe read blocks for 0.3 s here (20 ms on real hardware): 4 reads per round over two GPUs.
    sampler, fake = _sampler("dual_rtx_a5000", pcie_delay_s=0.3)
    with sampler:
        started = time.perf_counter()
        readout = sampler.sample()
        took = time.perf_counter() - started
        assert took < 0.25, f"sample() waited for PCIe: {took:.2f} s"
        assert readout.gpus[0].memory_used_bytes == 22437 * MIB
        assert sampler.wait_for_pcie(timeout=5)
        later = sampler.sample()
    assert later.gpus[0].pcie_h2d_bytes_per_s == 439 * KIB
    assert later.gpus[0].pcie_t < later.t
    assert threading.current_thread().name not in fake.pcie_threads
    assert fake.pcie_threads == {"gpu-pcie"}


def test_driver_not_loaded_is_an_empty_gpu_list_with_the_reason():
    fake = FakePynvml(recording("dual_rtx_a5000"), init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with GpuSampler(NvmlLibrary(fake, host_pid_namespace=True)) as sampler:
        readout = sampler.sample()
    assert readout.gpus == ()
    assert readout.error == "the NVIDIA driver is installed but not loaded"


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver")
def test_real_nvml_without_a_driver_reports_why_and_everything_else_still_works():
    # The real pynvml, the real nvmlInit: on a machine without the driver it raises NVMLError_LibraryNotFound.
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()
    with ResourceSampler(None) as sampler:
        sample = sampler.sample()
    assert sample.gpus == ()
    assert "libnvidia-ml" in sample.gpu_error
    assert sample.host.ram_total_bytes > 0 and len(sample.host.per_core_percent) >= 1


def test_real_nvml_either_reads_gpus_or_says_why():
    with GpuSampler() as sampler:
        readout = sampler.sample()
    assert (readout.error is None) == bool(readout.gpus)


def test_rank_processes_get_their_gpu_memory_by_pid():
    with run_tree(ranks=2, mib=1) as tree:
        rank0, rank1 = tree["ranks"]
        # The recorded llama-server PID stands in for rank 0; rank 1 holds nothing on a GPU.
        fake = FakePynvml(recording("dual_rtx_a5000"), pid_map={100477: rank0}, pcie_delay_s=0)
        with ResourceSampler(tree["launcher"], gpu_library=NvmlLibrary(fake, host_pid_namespace=True)) as sampler:
            sample = sampler.sample()
    by_pid = {p.pid: p for p in sample.run.processes}
    assert by_pid[rank0].gpu_memory_bytes == (22430 + 17246) * MIB
    assert by_pid[rank1].gpu_memory_bytes is None
    assert sample.run.ranks_gpu_memory_bytes == (22430 + 17246) * MIB


def test_every_live_runs_processes_get_their_gpu_memory_and_runs_come_and_go():
    from traindeck.backend.cli.monitor_cmd import format_runs

    with run_tree(ranks=2, mib=1) as first, run_tree(ranks=1, mib=1) as second:
        runs = {"20260101-120000-ab12": first["launcher"], "20260101-130000-cd34": second["launcher"]}
        fake = FakePynvml(recording("dual_rtx_a5000"), pid_map={100477: second["ranks"][0]}, pcie_delay_s=0)
        with ResourceSampler(None, runs=lambda: dict(runs),
                             gpu_library=NvmlLibrary(fake, host_pid_namespace=True)) as sampler:
            both = sampler.sample()
            del runs["20260101-120000-ab12"]  # it ended
            one = sampler.sample()
    assert both.run is None and [r.run_id for r in both.runs] == ["20260101-120000-ab12", "20260101-130000-cd34"]
    assert [r.root_pid for r in both.runs] == [first["launcher"], second["launcher"]]
    assert [p.rank for p in both.runs[0].ranks] == [0, 1]
    held = {p.pid: p.gpu_memory_bytes for r in both.runs for p in r.processes}
    assert held[second["ranks"][0]] == (22430 + 17246) * MIB
    assert held[first["ranks"][0]] is None and held[first["ranks"][1]] is None
    assert [r.run_id for r in one.runs] == ["20260101-130000-cd34"]

    class Names:
        names = {"20260101-130000-cd34": "train"}
        starting: list[str] = []

    table = format_runs(one, Names())  # type: ignore[arg-type]
    (rank_row,) = [line for line in table.splitlines() if f" {second['ranks'][0]} " in line]
    assert rank_row.split()[:3] == ["train", "·cd34", "0"] and "38.7 GiB" in rank_row


def test_each_process_gets_its_gpus_and_its_sm_use_as_nvitop_shows_them():
    with run_tree(ranks=2, mib=1) as tree:
        rank0, rank1 = tree["ranks"]
        # The recorded llama-server PID (on both GPUs) stands in for rank 0; rank 1 holds no GPU.
        fake = FakePynvml(recording("dual_rtx_a5000"), pid_map={100477: rank0}, pcie_delay_s=0)
        with ResourceSampler(tree["launcher"], gpu_library=NvmlLibrary(fake, host_pid_namespace=True)) as sampler:
            sampler.sample(machine=True)  # the first reading: SM use is over the time since it
            fake.driver.add_sm_sample(0, 100477, 90)
            fake.driver.add_sm_sample(0, 100477, 80)
            fake.driver.add_sm_sample(1, 100477, 40)
            sample = sampler.sample(machine=True)
            again = sampler.sample(machine=True)  # no new sample since: it ran no kernel
    gpu0, gpu1 = sample.gpus
    assert [(p.pid, p.sm_percent) for p in gpu0.processes] == [(rank0, 85.0)]
    assert [(p.pid, p.sm_percent) for p in gpu1.processes] == [(rank0, 40.0)]
    assert sample.machine is not None
    by_pid = {p.pid: p for p in sample.machine.processes}
    assert (by_pid[rank0].gpu_indices, by_pid[rank0].gpu_sm_percent) == ((0, 1), 125.0)
    assert (by_pid[rank1].gpu_indices, by_pid[rank1].gpu_sm_percent) == ((), None)
    assert again.machine is not None
    assert {p.pid: p.gpu_sm_percent for p in again.machine.processes}[rank0] == 0.0


def test_an_nvml_without_per_process_samples_leaves_sm_use_unknown():
    fake = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
    fake.driver.exported.discard("nvmlDeviceGetProcessUtilization")
    with GpuSampler(NvmlLibrary(fake, host_pid_namespace=True), pcie_interval_s=0.1) as sampler:
        readout = sampler.sample()
    assert [p.sm_percent for g in readout.gpus for p in g.processes] == [None, None]

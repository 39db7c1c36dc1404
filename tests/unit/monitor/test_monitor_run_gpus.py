"""The run's own GPUs, matched by UUID: CUDA_VISIBLE_DEVICES mapped onto NVML's devices (never its numbers taken
as NVML's indexes), and the run's aggregates, peaks and estimate comparison counting only those GPUs."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
from fixtures.monitor_samples import GIB, training_sample
from fixtures.nvml.fake_driver import FakePynvml, recording

from traindeck.backend.estimate.advisor import compare_with_measured
from traindeck.backend.monitor.gpu_sampler import GpuSampler
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.run_gpus import map_visible_devices, run_gpus
from traindeck.backend.monitor.sample_store import ResourceWriter
from traindeck.backend.monitor.snapshots import GpuSnapshot, RunSnapshot
from traindeck.backend.monitor.store_read import read_series, resource_summary


def _a5000s() -> tuple[GpuSnapshot, ...]:
    with GpuSampler(NvmlLibrary(FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0), host_pid_namespace=True)) as s:
        return s.sample().gpus


def _swapped_bus_order(gpus: tuple[GpuSnapshot, ...]) -> tuple[GpuSnapshot, ...]:
    """NVML's documentation: its index order may differ from CUDA's. Here NVML index 0 sits on the higher bus."""
    first, second = gpus
    return (dataclasses.replace(first, pci_bus_id=second.pci_bus_id), dataclasses.replace(second, pci_bus_id=first.pci_bus_id))


def test_cuda_numbers_count_in_pci_bus_order_not_nvml_index_order():
    gpus = _swapped_bus_order(_a5000s())
    low_bus = gpus[1].uuid
    assert map_visible_devices("0", gpus, "PCI_BUS_ID") == {low_bus}
    # FASTEST_FIRST over one model: ties go by PCI bus id, the same order.
    assert map_visible_devices("0", gpus, None) == {low_bus}
    assert map_visible_devices("1,0", gpus, None) == {gpus[0].uuid, low_bus}


def test_uuids_and_prefixes_match_and_what_cannot_be_placed_is_unknown():
    gpus = _a5000s()
    assert map_visible_devices("GPU-12345678-aaaa-bbbb-cccc-0123456789cd", gpus) == {gpus[1].uuid}
    assert map_visible_devices("GPU-12345678-aaaa-bbbb-cccc-0123456789c", gpus) == {gpus[1].uuid}  # unique prefix
    assert map_visible_devices("GPU-12345678", gpus) == frozenset()  # ambiguous: CUDA stops there
    assert map_visible_devices("1,bogus,0", gpus) == {gpus[1].uuid}  # CUDA ignores everything after a bad entry
    assert map_visible_devices("", gpus) == frozenset()  # CUDA_VISIBLE_DEVICES="" hides every GPU
    assert map_visible_devices("MIG-0d3f8a2e-8b0e-5f5c-9c4f-2a7b7c1d9e00", gpus) is None
    mixed = (gpus[0], dataclasses.replace(gpus[1], name="NVIDIA RTX A4000"))
    assert map_visible_devices("0", mixed, None) is None  # fastest first over two models: CUDA's call, not ours
    assert map_visible_devices("0", mixed, "PCI_BUS_ID") == {gpus[0].uuid}


def test_run_gpus_from_the_ranks_environment_and_from_the_process_lists():
    gpus = _a5000s()
    sample = training_sample(0, gpus=2, ranks=1)
    rank = next(p for p in sample.run.processes if p.role == "rank")
    with_env = dataclasses.replace(rank, pid=1, cuda_visible_devices="1")
    run = RunSnapshot(t=0, root_pid=0, processes=(with_env,))
    assert run_gpus(gpus, run) == (gpus[1].uuid,)
    listed = dataclasses.replace(rank, pid=100477)  # the PID both A5000s list
    assert run_gpus(gpus, RunSnapshot(t=0, root_pid=0, processes=(listed,))) == tuple(sorted(g.uuid for g in gpus))
    nowhere = dataclasses.replace(rank, pid=1)
    assert run_gpus(gpus, RunSnapshot(t=0, root_pid=0, processes=(nowhere,))) is None  # cannot tell: all count


def test_aggregates_peaks_and_the_estimate_count_only_the_runs_gpus(tmp_path):
    store = tmp_path / "runs.sqlite3"
    writer = ResourceWriter(store, "run-u", interval_s=1.0, started_at=0.0)
    for i in range(5):
        sample = training_sample(i, gpus=2, ranks=1)
        busy, idle = sample.gpus
        # GPU 1 belongs to another job: fuller and idle. The run uses GPU 0 only.
        idle = dataclasses.replace(idle, memory_used_bytes=23 * GIB, utilization_percent=0.0, processes=())
        sample = dataclasses.replace(sample, gpus=(busy, idle), run_gpus=(busy.uuid,),
                                     gpu_versions={"driver": "550.54.14", "cuda": "12.4", "nvml": "12.550.54.14"})
        writer.write(sample)
    writer.close()
    series = read_series(store, "run-u")
    assert np.all(series["gpu_mem_used"] < 21 * GIB)  # GPU 0 alone, not 0 + 1
    assert not np.any(series["gpu_util_pct"] == 0.0)
    summary = resource_summary(store, "run-u")
    assert summary["peak_gpu_mem_bytes"] < 21 * GIB and summary["run_gpus"] == [busy.uuid]
    assert summary["gpu_versions"]["driver"] == "550.54.14" and summary["gpu_count"] == 2
    # The estimate is compared with the run's own GPU, not with another job's fuller one.
    row = SimpleNamespace(gpus_per_node=1, gpu_total_bytes_per_device=20 * GIB, cpu_bytes_per_node=64 * GIB)
    gpu = compare_with_measured(row, summary)[0]  # type: ignore[arg-type]
    assert gpu.what.startswith("GPU memory") and gpu.ratio is not None and gpu.ratio < 21 / 20

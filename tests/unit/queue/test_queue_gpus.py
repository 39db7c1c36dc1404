"""GPU waiting and pinning: free/busy decided from GPU snapshots read through the real sampler from recordings of
real GPUs (the stand-in pynvml is the only double, at the NVML boundary), and the argv each launcher gets."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from fixtures.nvml.fake_driver import MIB, FakePynvml, recording

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.monitor.gpu_sampler import GpuSampler
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.snapshots import GpuSnapshot
from traindeck.backend.queue.entries import QueuedLaunch, QueueEntry, QueueSettings
from traindeck.backend.queue.gpus import GpuRequest, choose_gpus, free_gpus, gpu_is_free, parse_gpus
from traindeck.backend.queue.keeper import plan_starts


def snapshots(name: str, **options: object) -> tuple[GpuSnapshot, ...]:
    library = NvmlLibrary(FakePynvml(recording(name), **options), host_pid_namespace=True)
    with GpuSampler(library, pcie_interval_s=0.1) as sampler:
        return sampler.sample().gpus


def idle(gpus: tuple[GpuSnapshot, ...]) -> tuple[GpuSnapshot, ...]:
    """The same cards after their job ended: no processes, the memory the driver keeps."""
    return tuple(dataclasses.replace(g, processes=(), memory_used_bytes=3 * MIB) for g in gpus)


def test_busy_free_and_mig_recordings():
    a5000 = snapshots("dual_rtx_a5000")  # one training process on both cards, 22 and 17 GiB used
    assert free_gpus(a5000) == []
    choice = choose_gpus(GpuRequest(count=1), a5000)
    assert choice.gpus is None and choice.waiting_for == "1 free GPU (0 free of 2)"
    choice = choose_gpus(GpuRequest(ids=(1,)), a5000)
    assert choice.waiting_for == "GPU 1 busy (1 process(es): 100477)"
    assert free_gpus(idle(a5000)) == [0, 1]
    assert choose_gpus(GpuRequest(count=1), idle(a5000)).gpus == [0]

    # A100 80GB with MIG on, idle: no process listed, 50 MiB used -> free; on a driver without memory info v2
    # the 921 MiB reservation counts as used, which is still under 2 % of the card.
    (mig,) = snapshots("a100_sxm4_80gb_mig")
    assert mig.processes == () and mig.memory_used_bytes == 50 * MIB and gpu_is_free(mig)
    (mig_v1,) = snapshots("a100_sxm4_80gb_mig", memory_v2=False)
    assert mig_v1.memory_used_bytes == 921 * MIB and gpu_is_free(mig_v1)
    busy_mig = dataclasses.replace(mig, memory_used_bytes=20_000 * MIB)  # a job in a MIG instance, not listed
    assert choose_gpus(GpuRequest(ids=(0,)), (busy_mig,)).waiting_for == "GPU 0 busy (20000 MiB used)"

    # A desktop card: Xorg and friends are processes on it, so it is never taken as free.
    (desktop,) = snapshots("gt_1030")
    assert not gpu_is_free(desktop)


def test_reserved_gpus_and_runs_without_gpus():
    cards = idle(snapshots("dual_rtx_a5000"))
    # GPU 0 was given to a queued run that has not allocated yet: not free, whatever NVML says.
    assert choose_gpus(GpuRequest(count=1), cards, reserved=[0]).gpus == [1]
    assert choose_gpus(GpuRequest(ids=(0,)), cards, reserved=[0]).waiting_for == \
        "GPU 0 given to a queued run that started"
    # A run naming no GPU uses every visible one: it waits for all.
    half = (cards[0], snapshots("dual_rtx_a5000")[1])
    assert choose_gpus(None, half).waiting_for.startswith("all GPUs: GPU 1 busy")
    assert choose_gpus(None, cards).gpus == []
    assert choose_gpus(None, ()).gpus == []  # no GPU machine


def _entry(name: str, gpus: str = "", held: bool = False) -> QueueEntry:
    return QueueEntry(run_id=name, name=name, state="queued", position=0, held=held, gpus=gpus,
                      launch=QueuedLaunch(script="t.py"), queued_at=0, assigned_gpus=None, seen_end=False)


def test_the_queue_starts_in_order_on_free_gpus_and_the_rest_wait():
    cards = idle(snapshots("dual_rtx_a5000"))
    waiting = [_entry("a", "1"), _entry("b", "any:1"), _entry("c", "any:1"), _entry("d", "held", held=True)]
    waiting[3] = _entry("d", "", held=True)
    decisions = plan_starts(waiting, 0, [], QueueSettings(), cards)
    assert [(d.entry.name, d.gpus, d.waiting_for) for d in decisions] == [
        ("a", [1], ""), ("b", [0], ""), ("c", None, "1 free GPU (0 free of 2)"), ("d", None, "held")]
    # Without GPUs: one at a time by default.
    decisions = plan_starts([_entry("a"), _entry("b")], 0, [], QueueSettings(), ())
    assert [(d.gpus, d.waiting_for) for d in decisions] == [([], ""), (None, "a free slot (1 running, at most 1)")]
    decisions = plan_starts([_entry("a")], 0, [], QueueSettings(paused=True, pause_reason="run x failed"), ())
    assert decisions[0].waiting_for == "the queue is paused (run x failed)"


def test_parse_gpus():
    assert parse_gpus("0,2") == GpuRequest(ids=(0, 2))
    assert parse_gpus("any:2") == GpuRequest(count=2)
    for bad, text in (("any:0", "after 'any:'"), ("0,0", "named twice"), ("x", "give GPU indexes"),
                      ("", "give GPU indexes")):
        with pytest.raises(ValueError, match=text):
            parse_gpus(bad)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return path


def _plan(script: Path, launcher: str, **kwargs: object):  # type: ignore[no-untyped-def]
    request = LaunchRequest(script=script.name, cwd=script.parent, launcher=launcher, python=sys.executable,
                            **kwargs)  # type: ignore[arg-type]
    return build_plan(request, script.parent / "run", base_env={"CUDA_VISIBLE_DEVICES": "3,1", "PATH": "/usr/bin"},
                      free_port=lambda: 29555, is_port_busy=lambda _p: False)


def test_each_launcher_is_pinned_the_way_it_expects(script: Path):
    ds = _plan(script, "deepspeed", gpus=(0, 2))
    assert ds.argv[ds.argv.index("--include") + 1] == "localhost:0,2" and "--num_gpus" not in ds.argv
    assert ds.nproc == 2 and "CUDA_VISIBLE_DEVICES" not in ds.env and ds.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    acc = _plan(script, "accelerate", gpus=(0, 2))
    assert acc.argv[acc.argv.index("--gpu_ids") + 1] == "0,2"
    assert acc.argv[acc.argv.index("--num_processes") + 1] == "2"
    assert "CUDA_VISIBLE_DEVICES" not in acc.env and acc.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    py = _plan(script, "python", gpus=(2,))
    assert py.argv == [sys.executable, "train.py"] and py.env["CUDA_VISIBLE_DEVICES"] == "2"
    assert py.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and not py.errors
    # Unpinned: what was there before stays (the deepspeed runner gets the inherited choice as --include).
    plain = _plan(script, "deepspeed")
    assert plain.argv[plain.argv.index("--include") + 1] == "localhost:3"  # one process: the first
    both = _plan(script, "deepspeed", gpus=(0,), include="localhost:1")
    assert "give --gpus or an --include filter, not both" in both.errors

"""GPU memory lines read from real GPU runs' logs (tests/fixtures/logs/gpu_memory, sources in its README): DeepSpeed's
MA/CA reports, torch's CUDA OOM message, memory_summary tables and DeepSpeed's model-states estimate."""

from __future__ import annotations

import pytest
from support import FIXTURES

from traindeck.backend.logparse import (
    parse_ds_memory,
    parse_torch_oom,
    read_ds_memory,
    read_estimate_rows,
    read_memory_summaries,
    strip_rank_tag,
)

MEM = FIXTURES / "logs" / "gpu_memory"
GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


def lines(name: str) -> list[str]:
    return (MEM / name).read_text(encoding="utf-8").splitlines()


def gib(x: float) -> int:
    return int(round(x * GiB))


def test_deepspeed_reports_with_their_messages_and_host_lines():
    reports = read_ds_memory(lines("deepspeed_4700_cache_after_offload.log"))
    assert [(r.message, r.allocated, r.peak_allocated, r.reserved, r.peak_reserved, r.host_used) for r in reports] == [
        ("DeepSpeedZeRoOffload initialize [begin]", gib(26.38), gib(26.38), gib(26.71), gib(27), gib(322.57)),
        ("DeepSpeedZeRoOffload initialize [end]", gib(0.58), gib(26.38), gib(26.71), gib(27), gib(322.58)),
        ("Before creating fp16 partitions", gib(0.58), gib(0.58), gib(26.71), gib(27), gib(322.58)),
    ]
    assert {r.rank for r in reports} == {None}


def test_a_report_without_a_message_line_and_max_ca_rounded_below_ca():
    reports = read_ds_memory(lines("deepspeed_5222_normal.log"))
    assert len(reports) == 4
    assert reports[0].message is None and reports[1].message == "Before creating fp32 partitions"
    assert (reports[2].allocated, reports[2].peak_allocated) == (gib(7.21), gib(7.22))
    assert reports[0].peak_reserved == gib(7) < reports[0].reserved == gib(7.24)
    assert reports[-1].host_used is None  # the excerpt ends on the MA line


def test_the_per_step_memory_breakdown_lines():
    reports = read_ds_memory(lines("deepspeed_2302_memory_breakdown.log"))
    assert [r.message for r in reports] == ["Engine before forward", "Engine after forward", "Engine before backward",
                                            "Engine after backward"]
    assert reports[-1].peak_allocated == gib(0.08) and reports[-1].allocated == gib(0.02)
    assert reports[0].host_used == gib(4.05)


def test_rank_tags_give_the_rank_and_keep_messages_per_rank():
    real = lines("deepspeed_dolly28_reserved_peak.log")[1:4]  # message, MA, CPU lines of one report
    other = lines("deepspeed_5222_normal.log")[2:5]
    mixed = [f"[rank1]: {real[0]}", f"[default0]:{other[0]}", f"[rank1]: {real[1]}", f"[default0]:{other[1]}",
             f"[rank1]: {real[2]}", f"[default0]:[rank0]: {other[2]}"]
    reports = read_ds_memory(mixed)
    assert [(r.rank, r.message, r.allocated) for r in reports] == [
        (1, "After creating fp16 partitions: 2", gib(25.52)), (0, "Before creating fp32 partitions", gib(7.2))]
    assert reports[0].host_used == gib(23.99) and reports[0].peak_reserved == gib(46)
    assert strip_rank_tag("[default3]:[rank11]: x") == ("x", 11)


def test_torch_oom_messages_in_every_wording():
    msgs = [parse_torch_oom(line) for line in lines("torch_oom_messages.log")]
    assert all(m is not None for m in msgs)
    m = msgs[0]  # torch 2.1 ("capacty")
    assert m is not None and (m.requested, m.capacity, m.free, m.allocated, m.reserved_unallocated) == (
        int(round(1.70 * GiB)), 6 * GiB, 0, int(round(2.93 * GiB)), int(round(2.30 * GiB)))
    m = msgs[1]  # "[rank5]: " from an 8-GPU LLaMA-Factory run
    assert m is not None and (m.rank, m.device, m.requested, m.reserved_unallocated) == (
        5, 5, 270 * MiB, int(round(6.23 * MiB)))
    m = msgs[3]  # the private-pools clause
    assert m is not None and (m.allocated, m.reserved_unallocated) == (
        int(round(13.73 * GiB)), int(round(736.86 * MiB)))
    m = msgs[4]  # torch <= 2.0: reserved in total, so unallocated = reserved - allocated
    assert m is not None and (m.requested, m.allocated, m.reserved, m.free) == (
        int(round(10.84 * GiB)), int(round(1.06 * GiB)), int(round(12.53 * GiB)), int(round(10.26 * GiB)))


def test_memory_summary_tables():
    (big,) = read_memory_summaries(lines("torch_memory_summary_35901.txt"))
    assert (big.allocated, big.peak_allocated, big.reserved, big.peak_reserved) == (
        1062 * MiB, 4877 * MiB, 12420 * MiB, 12420 * MiB)
    assert (big.device, big.ooms, big.non_releasable) == (0, 1, None)
    (normal,) = read_memory_summaries(lines("torch_memory_summary_fairseq2442.txt"))
    assert (normal.allocated, normal.peak_allocated, normal.reserved, normal.peak_reserved) == (
        3595 * MiB, 4374 * MiB, 3614 * MiB, 4394 * MiB)
    assert (normal.non_releasable, normal.peak_non_releasable) == (18475 * KiB, 21051 * KiB)
    both = read_memory_summaries(lines("torch_memory_summary_35901.txt") + lines("torch_memory_summary_fairseq2442.txt"))
    assert [s.peak_reserved for s in both] == [12420 * MiB, 4394 * MiB]


def test_deepspeed_estimate_rows():
    rows = read_estimate_rows(lines("deepspeed_4527_estimate_vs_measured.txt"))
    assert [(r.cpu_bytes, r.gpu_bytes) for r in rows] == [(gib(171.13), gib(0.49))] * 2 + [
        (gib(152.11), gib(3.66))] * 2 + [(gib(2.93), gib(29.01)), (gib(152.11), gib(29.01))]
    assert rows[0].options.startswith("offload_param=OffloadDeviceEnum.cpu, offload_optimizer=OffloadDeviceEnum.cpu")


@pytest.mark.parametrize("junk", [
    "", "MA", "MA x GB Max_MA y GB CA z GB Max_CA w GB", "Max_MA " * 1000, "MA 1e999 GB" + " Max_MA" * 800,
    "\x00\udcff",
    "Tried to allocate 1.00 GiB. GPU 0 has a total capacity of", "Tried to allocate " + "9" * 5000,
    "| Allocated memory      |  junk MB |", "| GPU reserved memory   |   -1 MB |    2 MB |",
])
def test_junk_is_none_never_an_error(junk: str):
    assert parse_ds_memory(junk) is None
    assert parse_torch_oom(junk) is None
    assert read_memory_summaries([junk]) == []
    assert read_estimate_rows(["  per CPU  |  per GPU |   Options", junk]) == []
    read_ds_memory([junk, junk])


def test_an_overlong_rank_number_is_no_tag():
    line = parse_ds_memory("[rank99999999]: MA 1 GB         Max_MA 2 GB         CA 3 GB         Max_CA 4 GB")
    assert line is not None and (line.rank, line.allocated, line.peak_reserved) == (None, GiB, 4 * GiB)

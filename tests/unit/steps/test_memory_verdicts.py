"""The memory verdicts on real GPU runs' figures (tests/fixtures/logs/gpu_memory, sources in its README): the peak
reserved-minus-allocated gap flagged as fragmentation where it is, the cache after offload not called that, the OOM
message's verdict, the estimate against a measured peak, the per-rank line, and the run's log read into its anatomy
when its step records carry no CUDA figures."""

from __future__ import annotations

import re
from pathlib import Path

from support import FIXTURES

from traindeck.backend.logparse import (
    parse_torch_oom,
    read_ds_memory,
    read_estimate_rows,
    read_memory_summaries,
)
from traindeck.backend.runs.control.step_view import log_memory_samples
from traindeck.backend.steps import (
    EstimateCheck,
    MemorySample,
    RunFacts,
    StepRecord,
    analyse,
    estimate_check,
    fragmentation,
    memory_advice,
    memory_line,
    oom_verdict,
    rank_memory,
    samples_from_deepspeed,
    samples_from_records,
    with_log_memory,
)

MEM = FIXTURES / "logs" / "gpu_memory"
GiB, MiB = 1 << 30, 1 << 20


def lines(name: str) -> list[str]:
    return (MEM / name).read_text(encoding="utf-8").splitlines()


def ds_memory(name: str):  # type: ignore[no-untyped-def]
    (rank, samples), = samples_from_deepspeed(read_ds_memory(lines(name))).items()
    return rank_memory(rank, samples, source="DeepSpeed's MA/CA lines")


def test_reserved_peak_far_above_allocated_peak_is_fragmentation():
    memory = ds_memory("deepspeed_dolly28_reserved_peak.log")
    # Max_CA 46 GB is rounded: the peak reserved is at least 45.5 GB; tensors needed at most Max_MA 32.1 GB.
    assert memory.rank == 0 and memory.peak_reserved == int(45.5 * GiB)
    assert memory.peak_allocated == int(round(32.1 * GiB))
    frag = fragmentation(memory)
    assert frag is not None and frag.flagged and frag.gap == int(45.5 * GiB) - int(round(32.1 * GiB))
    assert round(frag.share, 2) == 0.29
    assert "expandable_segments:True" in frag.text()


def test_cache_after_offload_is_a_large_gap_now_but_no_fragmentation():
    memory = ds_memory("deepspeed_4700_cache_after_offload.log")
    assert memory.cached == int(round(26.71 * GiB)) - int(round(0.58 * GiB))  # 26 GB held, unused now
    frag = fragmentation(memory)
    assert frag is not None and not frag.flagged  # peak reserved 26.71 vs peak allocated 26.38: 1%
    assert frag.gap == int(round(26.71 * GiB)) - int(round(26.38 * GiB))
    assert "expandable_segments" not in memory_line(memory)
    assert "reserved-allocated gap 26.1 GiB" in memory_line(memory)


def test_a_normal_allocator_is_not_flagged():
    memory = ds_memory("deepspeed_5222_normal.log")
    frag = fragmentation(memory)
    assert frag is not None and not frag.flagged and frag.gap == int(round(7.24 * GiB)) - int(round(7.22 * GiB))
    per_step = ds_memory("deepspeed_2302_memory_breakdown.log")
    assert per_step.samples == 4 and fragmentation(per_step).flagged is False  # type: ignore[union-attr]


def test_memory_summary_tables_give_the_same_verdicts():
    (big,) = read_memory_summaries(lines("torch_memory_summary_35901.txt"))
    (normal,) = read_memory_summaries(lines("torch_memory_summary_fairseq2442.txt"))
    verdicts = {}
    for name, s in (("35901", big), ("fairseq", normal)):
        sample = MemorySample(rank=0, allocated=s.allocated, reserved=s.reserved, peak_allocated=s.peak_allocated,
                              peak_reserved=s.peak_reserved)
        verdicts[name] = fragmentation(rank_memory(0, [sample]))
    assert verdicts["35901"] is not None and verdicts["35901"].flagged
    assert verdicts["35901"].gap == (12420 - 4877) * MiB
    assert verdicts["fairseq"] is not None and not verdicts["fairseq"].flagged
    assert verdicts["fairseq"].gap == (4394 - 4374) * MiB


def test_oom_verdicts():
    said = [oom_verdict(m) for m in map(parse_torch_oom, lines("torch_oom_messages.log")) if m is not None]
    assert len(said) == 5
    # 2.30 GiB unallocated against a 1.70 GiB request, 44% of what was reserved: the memory was there, in pieces.
    assert "fragmentation" in said[0] and "(44% of the 5.2 GiB reserved)" in said[0]
    assert said[1].startswith("rank 5: ") and "the GPU was full" in said[1]  # 6.23 MiB unallocated
    assert "the GPU was full" in said[2]  # 336.73 MiB unallocated: enough for 226 MiB, but 2% of 15.1 GiB
    assert "the GPU was full" in said[3]
    assert "fragmentation" in said[4]  # torch <= 2.0: 11.47 GiB unallocated against 10.84 GiB asked


def test_the_reported_estimate_against_the_reported_usage():
    text = lines("deepspeed_4527_estimate_vs_measured.txt")
    estimate = read_estimate_rows(text)[0]  # offload_param and offload_optimizer to the CPU, as the run was
    assert "offload_param=OffloadDeviceEnum.cpu" in estimate.options
    measured = max(int(m) for m in re.findall(r"(\d+)MiB", text[-1])) * MiB
    assert measured == 21272 * MiB
    check = EstimateCheck(measured, estimate.gpu_bytes, "GPU's usage as reported", "model states")
    assert round(check.ratio, 1) == 42.4 and check.direction == "above"
    assert "activations" in check.text() and check.text().startswith(
        "the GPU's usage as reported (20.8 GiB) is 42.4x the pre-launch estimate (501.8 MiB), above it: ")
    assert EstimateCheck(2 * GiB, 8 * GiB, "peak reserved", "total").direction == "below"
    assert EstimateCheck(9 * GiB, 8 * GiB, "peak reserved", "total").direction == "within"


def test_estimate_check_uses_peak_reserved_else_allocated():
    memory = ds_memory("deepspeed_5222_normal.log")
    check = estimate_check(memory, 3 * GiB)
    assert check is not None and check.measured_what == "measured peak reserved" and check.measured == int(round(7.24 * GiB))
    assert estimate_check(memory, None) is None and estimate_check(memory, 0) is None
    no_reserved = rank_memory(2, [MemorySample(rank=2, peak_allocated=4 * GiB)])
    check = estimate_check(no_reserved, 2 * GiB)
    assert check is not None and check.measured_what == "measured peak allocated" and check.ratio == 2.0


def record(rank: int, step: int, **memory: int) -> StepRecord:
    return StepRecord(rank=rank, step=step, t=float(step), step_ms=100.0,
                      phases_ms={"forward": 30.0, "backward": 60.0, "optimizer": 10.0}, **memory)


def test_memory_advice_from_step_records_flags_only_the_peak_gap():
    # Rank 0: the dolly run's figures; rank 1: the 4700 run's (a big cache at the last step, no fragmentation).
    records = [record(0, s, gpu_allocated=int(25.52 * GiB), gpu_reserved=int(28.33 * GiB),
                      gpu_peak_allocated=int(32.1 * GiB), gpu_peak_reserved=int(45.5 * GiB)) for s in range(1, 5)]
    records += [record(1, s, gpu_allocated=int(0.58 * GiB), gpu_reserved=int(26.71 * GiB),
                       gpu_peak_allocated=int(26.38 * GiB), gpu_peak_reserved=int(26.71 * GiB)) for s in range(1, 5)]
    anatomy = analyse(records, facts=RunFacts(estimate_gpu_bytes=20 * GiB))
    frag = [a for a in anatomy.advice if "expandable_segments" in a]
    assert len(frag) == 1 and frag[0].startswith("rank 0: ")
    est = [a for a in anatomy.advice if "pre-launch estimate" in a]
    assert len(est) == 1 and est[0].startswith("rank 0: the measured peak reserved (45.5 GiB) is 2.3x")
    assert memory_advice(anatomy.ranks, None) == frag
    assert set(samples_from_records(records)) == {0, 1}


def test_memory_line_with_host_figures():
    sample = MemorySample(rank=3, allocated=2 * GiB, reserved=3 * GiB, peak_allocated=5 * GiB, peak_reserved=6 * GiB,
                          host_rss=10 * GiB, host_pinned=GiB)
    said = memory_line(rank_memory(3, [sample]), estimate_bytes=4 * GiB)
    assert said == ("rank 3: GPU 2.0 GiB allocated, 3.0 GiB reserved (peaks 5.0 GiB / 6.0 GiB), reserved-allocated "
                    "gap 1.0 GiB; host RSS 10.0 GiB, pinned 1.0 GiB; 1.5x the estimate")
    assert memory_line(rank_memory(4, [])) == "rank 4: no memory figures"


def test_the_run_log_fills_a_cpu_less_anatomy(tmp_path: Path):
    # The dolly excerpt as rank 0 wrote it through the run's rank tags, after other output.
    log = tmp_path / "output.log"
    log.write_text("noise\n" * 1000 + "".join(f"[rank0]: {line}\n" for line in lines(
        "deepspeed_dolly28_reserved_peak.log")), encoding="utf-8")
    samples = log_memory_samples(log)
    assert list(samples) == [0] and len(samples[0]) == 3
    assert samples[0][0].label == "After creating fp16 partitions: 2"
    records = [record(r, s) for r in (0, 1) for s in range(1, 4)]  # no CUDA figures (a CPU-less record)
    anatomy = with_log_memory(analyse(records, facts=None), samples, None)
    assert anatomy.ranks[0].peak_gpu_allocated == int(round(32.1 * GiB))
    assert anatomy.ranks[1].peak_gpu_allocated is None
    assert any("expandable_segments" in a for a in anatomy.advice)
    assert log_memory_samples(tmp_path / "missing.log") == {}
    (tmp_path / "plain.log").write_text("no memory lines\n" * 10, encoding="utf-8")
    assert log_memory_samples(tmp_path / "plain.log") == {}

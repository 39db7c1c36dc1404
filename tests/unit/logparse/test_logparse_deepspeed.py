"""DeepSpeed's own step / throughput / wall-clock / pipeline lines, hand-written and from real 2-rank CPU runs."""

from __future__ import annotations

import pytest
from support import FIXTURES

from traindeck.backend.logparse import Line, LineAssembler, Metric, OutputParser, Progress

LOGS = FIXTURES / "logs"
PREFIX = "[2026-11-21 17:26:06,122] [INFO] [logging.py:123:log_dist] "


def items_of(*texts: str, rank: int | None = None) -> list:
    p = OutputParser(clock=lambda: 0.0)
    return [i for t in texts for i in p.feed(Line(t, rank))] + p.flush()


def test_engine_step_line():
    items = items_of(PREFIX + "[Rank 0] step=10, skipped=2, lr=[0.0007924812503605781, 0.001], mom=[(0.9, 0.999)]")
    assert items[0] == Progress(10, None, None, None, "step", 0, "deepspeed", "")
    assert items[1:] == [Metric("lr", 0.0007924812503605781, 10, 0, "deepspeed"),
                         Metric("skipped_steps", 2.0, 10, 0, "deepspeed")]


def test_engine_step_line_without_distributed_and_tensor_lr():
    items = items_of("[Rank -1] step=3, skipped=0, lr=[tensor(0.0010)], mom=[[0.9, 0.95]]")
    assert items[0].rank is None and items[1] == Metric("lr", 0.001, 3, None, "deepspeed")


def test_throughput_timer_line():
    text = ("[2026-11-21 17:26:06,152] [INFO] [timer.py:264:stop] epoch=0/micro_step=12/global_step=3, "
            "RunningAvgSamplesPerSec=565.3748504608334, CurrSamplesPerSec=565.3348971942132, "
            "MemAllocated=0.37GB, MaxMemAllocated=1.5GB")
    items = items_of(text)
    assert items[0] == Progress(3, None, None, None, "step", None, "deepspeed", "")
    assert {(m.name, m.value, m.step) for m in items[1:]} == {
        ("samples_per_sec", 565.3748504608334, 3), ("curr_samples_per_sec", 565.3348971942132, 3),
        ("mem_allocated_gb", 0.37, 3), ("max_mem_allocated_gb", 1.5, 3)}


def test_throughput_before_timing_started_is_not_a_measurement():
    items = items_of("epoch=0/micro_step=1/global_step=1, RunningAvgSamplesPerSec=-inf, CurrSamplesPerSec=100.0, "
                     "MemAllocated=0.0GB, MaxMemAllocated=0.0GB")
    assert "samples_per_sec" not in {m.name for m in items if isinstance(m, Metric)}


def test_memory_monitor_line():
    items = items_of("epoch=1/micro_step=4/global_step=20, vm %: 45.2, swap %: 0.0")
    assert [(m.name, m.value, m.step) for m in items if isinstance(m, Metric)] == [
        ("host_vm_percent", 45.2, 20), ("host_swap_percent", 0.0, 20)]


def test_wall_clock_breakdown_uses_the_last_deepspeed_step():
    items = items_of(PREFIX + "[Rank 0] step=7, skipped=0, lr=[0.001], mom=[(0.9, 0.999)]",
                     "[Rank 0] time (ms) | fwd: 0.92 | bwd: 31.03 | bwd_inner: 14.20 | step: 15.28")
    wall = [(m.name, m.value, m.step, m.rank) for m in items if isinstance(m, Metric) and m.name.startswith("time_ms/")]
    assert wall == [("time_ms/fwd", 0.92, 7, 0), ("time_ms/bwd", 31.03, 7, 0), ("time_ms/bwd_inner", 14.2, 7, 0),
                    ("time_ms/step", 15.28, 7, 0)]


def test_pipeline_engine_line():
    items = items_of("steps: 40 loss: 0.6931 moe_loss: 0.0100 iter time (s): 0.123 samples/sec: 52.033")
    assert items[0] == Progress(40, None, None, None, "step", None, "deepspeed", "")
    assert {(m.name, m.value) for m in items[1:]} == {
        ("loss", 0.6931), ("moe_loss", 0.01), ("iter_time_s", 0.123), ("samples_per_sec", 52.033)}


@pytest.mark.parametrize(
    "text",
    [
        "[2026-11-21 17:26:04,031] [INFO] [config.py:678:print]   steps_per_print .............. 1",
        "[2026-11-21 17:26:04,030] [INFO] [config.py:678:print]   gradient_accumulation_steps .. 1",
        "[2026-11-21 17:26:04,030] [INFO] [config.py:678:print]   float16_config ............... enabled=False "
        "auto_cast=False loss_scale=0 initial_scale_power=16 loss_scale_window=1000 hysteresis=2 min_loss_scale=1",
        '    "steps_per_print": 1, ',
        '            "warmup_num_steps": 4',
        "[2026-11-21 17:26:03,992] [INFO] [logging.py:123:log_dist] [Rank 0] DeepSpeed LR Scheduler = <WarmupLR object>",
        "[2026-11-21 17:25:09,416] [WARNING] [lr_schedules.py:759:get_lr] Attempting to get learning rate from "
        "scheduler before it has started",
        "[2026-11-21 17:26:03,929] [INFO] [stage_1_and_2.py:236:__init__] Reduce bucket size 500000000",
        "Config: alpha=0.001000, betas=(0.900000, 0.999000), weight_decay=0.000000, adam_w=1",
    ],
)
def test_deepspeed_chatter_is_not_metrics(text):
    assert items_of(text) == []


def _run(name: str) -> tuple[OutputParser, list]:
    asm, p = LineAssembler(), OutputParser(clock=lambda: 0.0)
    data = (LOGS / name).read_bytes()
    items = [i for ln in asm.feed(data) + asm.flush() for i in p.feed(ln)] + p.flush()
    return p, items


def test_real_run_with_log_level_info():
    # ds_config with "log_level": "info" and steps_per_print=1: the engine and throughput lines appear
    p, items = _run("deepspeed_zero2_2rank_loginfo.raw")
    steps = [i.current for i in items if isinstance(i, Progress) and i.source == "deepspeed"]
    assert steps == [0, 1, 2, 3, 4, 5, 6]
    lr = [(m.step, m.value) for m in items if isinstance(m, Metric) and m.name == "lr" and m.source == "deepspeed"]
    assert lr == [(0, 0.0), (1, 0.0), (2, 0.0005), (3, 0.0007924812503605781), (4, 0.001), (5, 0.001), (6, 0.001)]
    sps = [(m.step, round(m.value, 2)) for m in items if isinstance(m, Metric) and m.name == "samples_per_sec"]
    assert sps == [(3, 565.37), (4, 675.72), (5, 670.92), (6, 675.24)]
    # the script's own "step N loss X" lines
    loss = [(m.step, m.value, m.source) for m in items if isinstance(m, Metric) and m.name == "loss"]
    assert loss == [(1, 16.2686, "generic"), (2, 16.5961, "generic"), (3, 7.6508, "generic"),
                    (4, 25.2417, "generic"), (5, 12.8656, "generic"), (6, 10.3937, "generic")]
    # nothing at all from the 100-line configuration dump
    names = {m.name for m in items if isinstance(m, Metric)}
    assert names == {"lr", "skipped_steps", "samples_per_sec", "curr_samples_per_sec", "mem_allocated_gb",
                     "max_mem_allocated_gb", "loss"}
    assert p.current_step() == 6


def test_real_run_with_default_log_level_and_wall_clock_breakdown():
    # DeepSpeed's default: ranks log at WARNING, so no step lines; wall_clock_breakdown prints its timings
    p, items = _run("deepspeed_zero2_2rank_default.raw")
    assert not [i for i in items if isinstance(i, Progress) and i.source == "deepspeed"]
    fwd = [m.value for m in items if isinstance(m, Metric) and m.name == "time_ms/fwd"]
    assert fwd == [5.68, 0.92, 0.57, 0.2, 0.18, 0.92]
    assert [i.current for i in items if isinstance(i, Progress)] == [1, 2, 3, 4, 5, 6]  # from "step N loss X"
    assert p.progress is not None and p.progress.source == "generic"

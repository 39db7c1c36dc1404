"""The metric charts' numbers without widgets: TensorBoard's smoothing, the grid's filter and pages, the step clock
and x modes, log-scale masking, last figures, the CSV export and the system series (a real run store)."""

from __future__ import annotations

import csv
import math
import time

import numpy as np
import pytest

from traindeck.backend.runs import (
    BoundedSeries,
    RunStore,
    StepClock,
    ema,
    filter_metrics,
    last_figures,
    masked_words,
    page_of,
    positive_only,
    read_metric_table,
    read_step_clock,
    write_metrics_csv,
    x_values,
)


def tensorboard_smooth(values, weight):
    """TensorBoard's own loop (vz_line_chart's resmoothDataset), as the reference."""
    last, count, out = 0.0, 0, []
    finite = [v for v in values if math.isfinite(v)]
    constant = bool(finite) and all(v == finite[0] for v in finite)
    for v in values:
        if not math.isfinite(v) or constant:
            out.append(v)
            continue
        last = last * weight + (1 - weight) * v
        count += 1
        out.append(last / (1 - weight**count))
    return out


@pytest.mark.parametrize("weight", [0.0, 0.1, 0.6, 0.9, 0.99])
def test_ema_matches_tensorboards_debiased_average(weight):
    rng = np.random.default_rng(4)
    values = list(2.0 + np.cumsum(rng.normal(0, 1, 30_000)) * 0.01 + rng.normal(0, 0.3, 30_000))
    values[100] = float("nan")
    values[5000:5010] = [float("inf")] * 10
    got = ema(values, weight)
    expected = tensorboard_smooth(values, weight)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    assert math.isnan(got[100]) and math.isinf(got[5005])


def test_ema_first_point_is_the_value_and_a_constant_stays_flat():
    assert ema([4.0, 0.0], 0.9)[0] == pytest.approx(4.0)  # debiased: not pulled towards 0
    assert list(ema([0.5] * 10, 0.9)) == [0.5] * 10
    assert list(ema([], 0.5)) == []
    assert list(ema([1.0, 2.0], 5.0)) == pytest.approx(tensorboard_smooth([1.0, 2.0], 0.99))  # clamped


def test_filter_puts_pins_first_and_matches_substrings():
    names = ["train/loss", "eval/loss", "lr", "grad_norm", "eval/accuracy"]
    assert filter_metrics(names, "", ["lr", "gone"]) == ["lr", "eval/accuracy", "eval/loss", "grad_norm",
                                                           "train/loss"]
    assert filter_metrics(names, "LOSS", ["train/loss"]) == ["train/loss", "eval/loss"]
    assert filter_metrics(names, "eval/") == ["eval/accuracy", "eval/loss"]
    assert filter_metrics(names, "nothing") == []


def test_pages_of_the_grid():
    names = [f"m{i:03d}" for i in range(200)]
    shown, page, pages = page_of(names, 0, 9)
    assert shown == names[:9] and page == 0 and pages == 23
    shown, page, pages = page_of(names, 99, 9)
    assert page == 22 and shown == names[198:]
    assert page_of([], 3, 9) == ([], 0, 1)


def test_a_chart_choice_is_the_grids_and_the_system_views_filter_pins_and_pages():
    from traindeck.backend.runs import ChartChoice, system_choice

    grid = ChartChoice([f"m{i:03d}" for i in range(20)], per_page=9)
    grid.page = 2
    assert grid.shown() == [f"m{i:03d}" for i in range(18, 20)] and grid.pages == 3
    grid.set_query("m01")  # another filter: the first page
    assert grid.page == 0 and grid.shown() == [f"m{i:03d}" for i in range(10, 19)]
    assert grid.set_pinned("m015", True) and not grid.set_pinned("m015", True)
    assert grid.shown()[0] == "m015"
    # The System view's: every chart on one page, in SYSTEM_CHARTS' order, found by what it shows too.
    system = system_choice(pins=["disk"])
    assert system.shown() == ["disk", "gpu_util", "gpu_memory", "cpu", "rank_rss", "network"]
    system.set_query("Memory")
    assert system.shown() == ["gpu_memory", "rank_rss"]
    system.set_query("utilization")  # W&B's spelling finds the utilisation charts
    assert system.shown() == ["gpu_util", "cpu"]


def test_step_clock_maps_steps_to_times_and_stays_bounded():
    clock = StepClock(max_knots=100)
    clock.add(range(0, 1000), [1000.0 + 2 * s for s in range(1000)])
    assert len(clock) <= 100
    clock.add([500, None], [0.0, 0.0])  # known or no step: ignored
    times = clock.times(np.array([0.0, 10.0, 999.0, 1009.0]))
    assert times[0] == pytest.approx(1000.0)
    assert times[1] == pytest.approx(1020.0, abs=25)  # thinned: close to, not exactly
    assert times[2] == pytest.approx(2998.0)
    assert times[3] == pytest.approx(3018.0)  # beyond the last known step: at the known pace
    assert np.isnan(StepClock().times(np.array([1.0]))).all()
    late = StepClock()
    late.add([100], [200.0])  # a poll's newest point first, the history read after it
    late.add([0, 50], [100.0, 150.0])
    assert list(late.times(np.array([0.0, 50.0, 100.0]))) == [100.0, 150.0, 200.0]


def test_x_values_by_mode():
    clock = StepClock()
    clock.add([0, 100], [5000.0, 5100.0])
    steps = np.array([0.0, 50.0, 100.0])
    assert list(x_values(steps, "step")) == [0, 50, 100]
    assert list(x_values(steps, "time", clock=clock)) == [5000, 5050, 5100]
    assert list(x_values(steps, "relative", clock=clock, start=4990.0)) == [10, 60, 110]
    times = np.array([7000.0, 7003.0])  # a series logged without steps: its x is already the time
    assert list(x_values(times, "relative", x_is_time=True, start=6999.0)) == [1, 4]


def test_positive_only_masks_with_a_word():
    y, count = positive_only(np.array([1.0, 0.0, -2.0, np.nan, 3.0]))
    assert count == 2 and np.isnan(y[1]) and np.isnan(y[2]) and y[4] == 3.0
    assert masked_words(2) == "2 values ≤ 0 not shown (log scale)"
    assert masked_words(0) == ""


def test_last_figures_carry_the_step_of_the_held_series():
    series = BoundedSeries()
    series.add_rows([(199, 1.0, 0.3), (200, 2.0, 0.1025)])
    figures = last_figures({"loss": 0.1025, "lr": 1e-4}, {"loss": series})
    assert figures["loss"].step == 200 and figures["loss"].value == 0.1025
    assert figures["lr"].step is None


def test_csv_export_of_a_real_store(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    run_id = "run-1"
    store.add_metrics(run_id, [("loss", s, 100.0 + s, 1.0 / (s + 1), None) for s in range(50)]
                      + [("lr", None, 100.0, 0.001, None)])
    table = read_metric_table(store, run_id, ["loss", "lr"])
    path = write_metrics_csv(tmp_path / "out" / "metrics.csv", table, 0.6)
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    loss = [r for r in rows if r["metric"] == "loss"]
    assert len(loss) == 50 and len(rows) == 51
    assert int(loss[10]["step"]) == 10 and float(loss[10]["wall_time"]) == 110.0
    assert float(loss[10]["value"]) == pytest.approx(1 / 11)
    expected = tensorboard_smooth([1.0 / (s + 1) for s in range(50)], 0.6)
    assert [float(r["smoothed"]) for r in loss] == pytest.approx(expected)
    lr = [r for r in rows if r["metric"] == "lr"][0]
    assert lr["step"] == "" and float(lr["value"]) == 0.001
    assert not list((tmp_path / "out").glob(".*tmp"))  # written in one step: no temporary left behind
    pairs = read_step_clock(store, run_id, max_knots=10)
    assert pairs[0] == (0.0, 100.0) and pairs[-1] == (49.0, 149.0) and len(pairs) <= 11
    store.close()


def test_a_watched_run_reads_and_keeps_only_the_series_shown(tmp_path):
    from traindeck.backend.runs import RunRecord, WatchedRun
    from traindeck.backend.runs.control import view as watch

    store = RunStore(tmp_path / "runs.db")
    store.add_run(RunRecord(id="r1", run_dir=str(tmp_path / "r1"), created_at=time.time(), name="r1"))
    store.add_metrics("r1", [(f"m{i:03d}", s, 10.0 + s, float(i), None) for s in range(5) for i in range(200)]
                      + [("loss", s, 10.0 + s, 1.0, None) for s in range(5)])
    model = WatchedRun()
    model.open("r1")

    def read():
        generation = model.begin_poll()
        return model.apply(generation, watch.read_view(store, "r1", **model.read_arguments()))

    read()
    read()
    assert set(model.series) == {"loss", "m000"}  # the losses and the overview's metric
    assert model.set_shown(["m150", "m151"])  # new: to be read whole
    assert model.read_arguments()["whole_series"] == ["m150", "m151"]
    change = read()
    assert change is not None and change.series == {"m150", "m151"} and len(model.series["m150"]) == 5
    assert not model.set_shown(["m151"])  # held already; m150 is forgotten with its chart
    assert set(model.series) == {"loss", "m000", "m151"}
    store.close()


def test_step_clock_maps_sample_times_back_to_steps():
    clock = StepClock()
    assert np.isnan(clock.steps(np.array([5.0]))).all()  # no pace yet
    clock.add([10, 20, 30], [100.0, 110.0, 130.0])
    steps = clock.steps(np.array([90.0, 100.0, 105.0, 120.0, 130.0, 140.0]))
    assert np.isnan(steps[0])  # before the first logged step
    assert steps[1:].tolist() == pytest.approx([10.0, 15.0, 25.0, 30.0, 30.0 + 10 * 20 / 30])
    ended = clock.steps(np.array([100.0, 130.0, 140.0]), ended=True)  # an ended run ran no later step
    assert ended[:2].tolist() == pytest.approx([10.0, 30.0]) and np.isnan(ended[2])


def test_system_series_read_whole_then_only_what_came_after(tmp_path):
    """A real recording: a first read buckets the run (peaks kept), the next gives exactly the samples recorded since,
    however the first read's buckets fell; a run without GPUs says so in NVML's words."""
    import dataclasses

    from traindeck.backend.monitor.demo import demo_samples
    from traindeck.backend.monitor.sample_store import ResourceWriter
    from traindeck.backend.runs import read_system_series

    path = tmp_path / "runs.sqlite3"
    samples = demo_samples(seconds=1500, end=time.time() - 10)
    with RunStore(path) as store:
        writer = ResourceWriter(path, "r1", interval_s=1.0, started_at=samples[0].t)
        for sample in samples[:-3]:
            writer.write(sample, commit=False)
        writer.commit()
        first = read_system_series(store, "r1", max_points=100)
        assert len(first.lines["gpu_util"]["GPU 0"][0]) == 100
        peak = max(s.gpus[0].memory_used_bytes for s in samples[:-3])  # levels keep their peak, rates their mean
        assert first.lines["gpu_memory"]["GPU 0"][1].max() == peak
        assert first.last_t == samples[-4].t and not first.missing
        for sample in samples[-3:]:
            writer.write(sample)
        writer.close()
        then = read_system_series(store, "r1", first.last_t, live=True)
        t, values = then.lines["cpu"]["host"]
        assert t.tolist() == [s.t for s in samples[-3:]]
        assert values.tolist() == pytest.approx([s.host.cpu_percent for s in samples[-3:]])
        assert list(then.lines["rank_rss"]) == ["rank 0", "rank 1", "all ranks"]
        assert read_system_series(store, "r1", then.last_t).lines == {}  # nothing new

        bare = [dataclasses.replace(s, gpus=(), gpu_error="NVML_ERROR_DRIVER_NOT_LOADED") for s in samples[:5]]
        writer = ResourceWriter(path, "r2", interval_s=1.0, started_at=bare[0].t)
        for sample in bare:
            writer.write(sample)
        writer.close()
        read = read_system_series(store, "r2", live=True)
        assert read.missing == {"gpu_util": "No NVIDIA GPU found: NVML_ERROR_DRIVER_NOT_LOADED.",
                                "gpu_memory": "No NVIDIA GPU found: NVML_ERROR_DRIVER_NOT_LOADED."}
        assert read_system_series(store, "r3", live=True).missing["cpu"].startswith(
            "No resource samples recorded for this run yet")

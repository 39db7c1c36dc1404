"""OutputParser state: rates and ETAs for sources that print none, the run's primary progress, bookkeeping."""

from __future__ import annotations

import pytest

from traindeck.backend.logparse import Line, Metric, OutputParser, Progress
from traindeck.backend.logparse.rate import RateEstimator


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_rate_and_eta_computed_from_arrival_times_when_the_line_has_none():
    clock = FakeClock()
    p = OutputParser(clock=clock)
    last = None
    for step in range(1, 31):
        clock.t += 0.5  # one step every half second
        items = p.feed(Line(f"Step {step}/100 | loss: {1 / step:.4f}"))
        last = items[0]
    assert isinstance(last, Progress) and last.source == "generic"
    assert last.rate == pytest.approx(2.0) and last.eta_s == pytest.approx(35.0)


def test_no_rate_from_a_burst_of_buffered_lines():
    clock = FakeClock()
    p = OutputParser(clock=clock)
    items = [p.feed(Line(f"step {s} loss 0.5"))[0] for s in range(1, 200)]  # all read at the same instant
    assert all(i.rate is None and i.eta_s is None for i in items)


def test_rate_is_smoothed_and_survives_a_restart():
    est = RateEstimator(window=1.0, alpha=0.5)
    assert est.update(0, 0.0) is None
    assert est.update(10, 1.0) == pytest.approx(10.0)
    assert est.update(40, 2.0) == pytest.approx(20.0)  # 0.5 * 30 + 0.5 * 10
    assert est.update(0, 2.5) == pytest.approx(20.0)  # the bar restarted: keep the estimate, new span
    assert est.update(20, 3.5) == pytest.approx(20.0)
    assert RateEstimator.eta(40, 100, 20.0) == pytest.approx(3.0)
    assert RateEstimator.eta(40, None, 20.0) is None


def test_tqdm_rate_and_eta_are_taken_as_printed():
    clock = FakeClock()
    p = OutputParser(clock=clock)
    (item,) = p.feed(Line(" 45%|████▌     | 45/100 [00:12<00:15,  3.61it/s]"))
    assert (item.rate, item.eta_s) == (3.61, 15.0)


def test_tqdm_unknown_rate_falls_back_to_arrival_times():
    clock = FakeClock()
    p = OutputParser(clock=clock)
    p.feed(Line("  0%|          | 0/30 [00:00<?, ?it/s]"))
    clock.t += 2.0
    (item,) = p.feed(Line("  7%|▋         | 2/30 [00:02<?, ?it/s]"))
    assert item.rate == pytest.approx(1.0) and item.eta_s == pytest.approx(28.0)


def test_primary_progress_is_the_longest_stream():
    p = OutputParser(clock=FakeClock())
    p.feed(Line("Map: 100%|██████████| 1000/1000 [00:01<00:00, 900.00examples/s]"))
    assert p.progress.label == "Map"
    p.feed(Line(" 10%|█         | 30/300 [00:10<01:30,  3.00it/s]"))  # 100 s of training
    assert (p.progress.current, p.progress.total) == (30, 300)
    p.feed(Line(" 50%|█████     | 4/8 [00:00<00:00, 60.00it/s]"))  # an eval bar in between
    assert (p.progress.current, p.progress.total) == (30, 300)
    assert p.current_step() == 30


def test_report_progress_wins():
    p = OutputParser(clock=FakeClock())
    p.feed(Line(" 10%|█         | 30/300 [00:10<01:30,  3.00it/s]"))
    p.feed(Line('@traindeck {"kind":"progress","current":7,"total":50,"v":1}'))
    assert p.progress.source == "report" and p.current_step() == 7


def test_streams_are_bounded():
    p = OutputParser(clock=FakeClock(), max_streams=8)
    for i in range(100):
        p.feed(Line(f"file{i}: 100%|██████████| 5/5 [00:00<00:00, 100.00it/s]"))
    assert len(p._streams) <= 8
    assert p.progress is not None


def test_latest_metrics_and_counters():
    p = OutputParser(clock=FakeClock())
    p.feed(Line("step 1 loss 0.9"))
    p.feed(Line("plain text"))
    p.feed(Line("step 2 loss 0.7"))
    assert p.latest_metrics["loss"] == Metric("loss", 0.7, 2, None, "generic")
    assert p.lines_seen == 3


def test_empty_and_whitespace_lines():
    p = OutputParser(clock=FakeClock())
    assert p.feed(Line("")) == [] and p.feed(Line("   ")) == [] and p.feed(Line("", 0, True)) == []


def test_explicit_now_overrides_the_clock():
    p = OutputParser(clock=lambda: 0.0)
    p.feed(Line("step 0 loss 1.0"), now=10.0)
    (item, _) = p.feed(Line("step 10 loss 0.5"), now=15.0)
    assert item.rate == pytest.approx(2.0)

"""The Runs page's header shows the open run's throughput beside its steps/s, from the same poll as the progress,
with where it comes from in the tooltip; nothing where the batch is unknown; "stalled" while the run is (a real
store, planted running runs with the run directory the launcher writes, the page offscreen)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import pytest

from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.gui.pages.runs import RunsPage


@pytest.fixture
def make_page(make_runs_page) -> Callable[[], RunsPage]:  # type: ignore[no-untyped-def]
    return make_runs_page  # type: ignore[no-any-return]


def progress(rate: float) -> dict[str, object]:
    return {"current": 40, "total": 100, "rate": rate, "eta_s": 60 / rate, "unit": "step"}


def running_run(name: str, *, ds_config: dict[str, object] | None) -> RunRecord:
    """A running DeepSpeed run of 2 processes (micro batch 4, accumulation 1: 8 samples a step), or one without a
    DeepSpeed config (its batch unknown)."""
    run_dir = create_run_dir()
    run_dir.output.write_bytes(b"step 1\n")
    if ds_config is not None:
        (run_dir.path / "ds_config.json").write_text(json.dumps(ds_config), encoding="utf-8")
    argv = ["deepspeed", "--num_gpus", "2", "train.py", "--seq_len", "256"]
    run_dir.command.write_text(json.dumps({"argv": argv, "nproc": 2}), encoding="utf-8")
    now = time.time()
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=now, started_at=now, name=name,
                       launcher="deepspeed", script="train.py", argv=argv, progress=progress(4.0))
    with RunStore() as store:
        store.add_run(record)
    return record


def steps_per_s(page: RunsPage) -> float:
    match = re.search(r" ([\d.]+) steps/s", page.header.progress_label.text())
    assert match, page.header.progress_label.text()
    return float(match.group(1))


def samples_per_s(page: RunsPage) -> float:
    match = re.fullmatch(r"· ([\d.,]+) samples/s · [\d,]+ tokens/s", page.header.rate_label.text())
    assert match, page.header.rate_label.text()
    return float(match.group(1).replace(",", ""))


def test_the_header_shows_samples_per_second_beside_steps_from_the_same_read(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    run = running_run("ds-rate", ds_config={"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1})
    page = make_page()
    page.open_run(run.id)
    qtbot.waitUntil(lambda: page.header.rate_label.text() != "", timeout=10000)
    assert page.header.progress_label.text().endswith("4 steps/s · 0:15 left")
    assert page.header.rate_label.text() == "· 32 samples/s · 8,192 tokens/s"
    assert page.header.rate_label.isVisible()
    tooltip = page.header.rate_label.toolTip()
    assert tooltip.startswith("From step rate (0.25 s/step) x batch 8 (micro batch 4 x grad accum 1 x 2 processes)")
    assert "x sequence length 256" in tooltip
    # From here the test says when reads happen: the figure moves with the steps/s, in the same poll.
    page.poller.stop()
    page.list_timer.stop()
    for rate in (2.5, 5.0):
        with RunStore() as store:
            store.update_run(run.id, progress=progress(rate))
        assert samples_per_s(page) == pytest.approx(8 * steps_per_s(page))  # not yet read: both as before
        page.poll()
        qtbot.waitUntil(lambda r=rate: steps_per_s(page) == r, timeout=10000)
        assert samples_per_s(page) == pytest.approx(8 * rate)
    # Stalled: no rate that no longer holds, as the ETA says.
    with RunStore() as store:
        store.update_run(run.id, state_detail="stalled: no output or progress for 12 min")
    page.poll()
    qtbot.waitUntil(lambda: page.header.stall_panel.isVisible(), timeout=10000)
    assert page.header.rate_label.text() == "· samples/s: stalled"
    assert page.header.rate_label.toolTip().startswith("The run looks stalled")
    assert "steps/s" not in page.header.progress_label.text()


def test_no_figure_where_the_batch_is_unknown(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    known = running_run("known", ds_config={"train_batch_size": 16})
    unknown = running_run("auto", ds_config={"train_micro_batch_size_per_gpu": "auto"})
    page = make_page()
    page.open_run(known.id)
    qtbot.waitUntil(lambda: page.header.rate_label.text() == "· 64 samples/s · 16,384 tokens/s", timeout=10000)
    assert "train_batch_size 16 in ds_config.json" in page.header.rate_label.toolTip()
    page.open_run(unknown.id)  # the previous run's figure is not carried over
    qtbot.waitUntil(lambda: "4 steps/s" in page.header.progress_label.text()
                    and page.record is not None and page.record.id == unknown.id, timeout=10000)
    assert page.header.rate_label.text() == "" and page.header.rate_label.toolTip() == ""
    assert not page.header.rate_label.isVisible()

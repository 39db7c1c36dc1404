"""A sweep over lr on the cpu-demo preset trains at two learning rates, and History answers which was best.

cpu-demo's DeepSpeed config defines the optimizer, so DeepSpeed builds it from `optimizer.params.lr` and never
sees the script's `--lr`: the sweep has to reach the config. Real CLI, real queue keeper, real DeepSpeed runs on
the CPU (2 ranks, 6 steps each).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.runhelp import DEMO, wait_until

from traindeck.backend.runs.control.history import RunHistory
from traindeck.backend.runs.control.history_table import history_table
from traindeck.backend.runs.record.run_store import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.train]
pytest.importorskip("deepspeed", reason="needs the train extra")


def test_an_lr_sweep_on_cpu_demo_trains_at_two_rates_and_history_groups_it_with_its_best():
    proc = subprocess.run([sys.executable, "-m", "traindeck", "run", "--preset", "cpu-demo", "--name", "tiny",
                           "--sweep", "lr=1e-3,3e-3", DEMO.name, "--steps", "6", "--step-time", "0",
                           "--log-every", "1", "--deepspeed_config", "{ds_config}"],
                          capture_output=True, text=True, timeout=120, cwd=DEMO.parent)
    assert proc.returncode == 0, proc.stderr
    ids = proc.stdout.split()
    assert len(ids) == 2
    # Said once, before anything runs: where lr goes.
    assert proc.stderr.count("optimizer.params.lr") == 1, proc.stderr

    def ended() -> list | None:  # type: ignore[type-arg]
        with RunStore() as store:
            records = [store.get_run(i) for i in ids]
        return records if all(r is not None and r.finished for r in records) else None

    records = wait_until(ended, 480, 1.0)
    for record in records:
        log = Path(record.run_dir, "output.log").read_text(errors="replace")
        assert record.state == "succeeded", (record.diagnosis, log[-3000:])
    lrs = [json.loads(Path(r.run_dir, "ds_config.json").read_text())["optimizer"]["params"]["lr"] for r in records]
    assert lrs == [1e-3, 3e-3]
    with RunStore() as store:
        logged = [store.last_metrics(r.id) for r in records]
    # DeepSpeed trained with those rates (the script logs the engine's lr), so the losses part.
    assert [m["learning_rate"] for m in logged] == pytest.approx([1e-3, 3e-3])
    assert logged[0]["loss"] != logged[1]["loss"]

    history = RunHistory()
    try:
        table = history_table(history.rows())
    finally:
        history.close()
    assert table.metric == "loss" and table.params == ("lr",)
    rows = {row.run.run_id: row for row in table.rows}
    assert {rows[i].params for i in ids} == {("1e-3",), ("3e-3",)}
    assert [rows[i].final for i in ids] == [logged[0]["loss"], logged[1]["loss"]]
    (group,) = {rows[i].group for i in ids}
    assert group and rows[ids[0]].group_label == "tiny: lr (2 runs)"
    (best,) = [i for i in ids if rows[i].is_best]
    assert rows[best].best == min(rows[i].best for i in ids)  # type: ignore[type-var]

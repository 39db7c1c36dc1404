"""tqdm bars -> Progress (+ postfix metrics), from hand-written shapes and from real tqdm output."""

from __future__ import annotations

import pytest
from support import FIXTURES

from traindeck.backend.logparse import Line, LineAssembler, Metric, OutputParser, Progress
from traindeck.backend.logparse.tqdm_bar import bar_label, looks_like_bar, parse_bar

LOGS = FIXTURES / "logs"

# text -> (current, total, rate items/s, eta_s, unit, label, postfix)
BARS = [
    (" 45%|████▌     | 45/100 [00:12<00:15,  3.61it/s]", (45, 100, 3.61, 15.0, "it", "", {})),
    ("Epoch 1:  45%|████▌     | 45/100 [00:12<00:15,  3.61it/s, loss=0.123, lr=0.0001]",
     (45, 100, 3.61, 15.0, "it", "Epoch 1", {"loss": 0.123, "lr": 0.0001})),
    ("slow:  33%|███▎      | 1/3 [00:01<00:02,  1.11s/it]", (1, 3, 1 / 1.11, 2.0, "it", "slow", {})),
    ("123it [00:05, 24.1it/s]", (123, None, 24.1, None, "it", "", {})),
    ("Epoch 1: 50batch [00:00, 789.15batch/s]", (50, None, 789.15, None, "batch", "Epoch 1", {})),
    ("download:  40%|████      | 4.00k/10.0k [00:00<00:00, 208kB/s]", (4000, 10000, 208000.0, 0.0, "B", "download", {})),
    ("  1.2k/10.0k [01:00<07:20, 20.0it/s]", (1200, 10000, 20.0, 440.0, "it", "", {})),
    ("12.3Mit [1:02:03, 3.30kit/s]", (12_300_000, None, 3300.0, None, "it", "", {})),
    ("  0%|          | 0/30 [00:00<?, ?it/s]", (0, 30, None, None, "it", "", {})),
    ("eval:  30%|###########1                         | 6/20 [00:00<00:00, 427.81it/s]", (6, 20, 427.81, 0.0, "it", "eval", {})),
    (" 45% 45/100 [00:12<00:15,  3.61it/s]", (45, 100, 3.61, 15.0, "it", "", {})),  # ncols=0
    ("train: 100%|██████████| 12/12 [1:02:03<00:00, 403.73it/s]", (12, 12, 403.73, 0.0, "it", "train", {})),
    ("x: 10%|█         | 10/100 [00:01<00:09, 10.00it/s, loss=nan, note=warm up]", (10, 100, 10.0, 9.0, "it", "x", {"loss": float("nan")})),
    ("Map (num_proc=4):  50%|█████     | 500/1000 [00:01<00:01, 480.12 examples/s]", None),  # unit with a space: not read
    ("Map:  50%|█████     | 500/1000 [00:01<00:01, 480.12examples/s]", (500, 1000, 480.12, 1.0, "examples", "Map", {})),
]

NOT_BARS = [
    "[2026-11-21 17:24:34,604] [INFO] [launch.py:245:main] process 10238 spawned with command: ['python3', '-u']",
    "see https://example.org/s/abc [1] for details",
    "10/100 [done]",
    "Processed 3/10 files [ok, 3 left]",
    "torch.Size([10, 20]) loaded from /data/s/x",
    "time 00:12 [00:12<00:15]",
]


def _same(a, b):
    return a == b or (a != a and b != b)  # nan


@pytest.mark.parametrize("text,expected", BARS, ids=[b[0][:40] for b in BARS])
def test_bar_shapes(text, expected):
    bar = parse_bar(text)
    if expected is None:
        assert bar is None or bar.unit != "examples"
        return
    assert bar is not None
    current, total, rate, eta, unit, label, postfix = expected
    assert (bar.current, bar.total, bar.eta_s, bar.unit, bar.label) == (current, total, eta, unit, label)
    assert (bar.rate is None) == (rate is None) and (rate is None or abs(bar.rate - rate) < 1e-9)
    assert bar.postfix.keys() == postfix.keys() and all(_same(bar.postfix[k], v) for k, v in postfix.items())
    assert looks_like_bar(text) and bar_label(text) == label


@pytest.mark.parametrize("text", NOT_BARS)
def test_not_bars(text):
    assert parse_bar(text) is None
    assert not looks_like_bar(text)
    assert OutputParser().feed(Line(text)) == []


def test_bar_to_progress_and_postfix_metrics():
    p = OutputParser(clock=lambda: 0.0)
    items = p.feed(Line("Epoch 1:  45%|████▌     | 45/100 [00:12<00:15,  3.61it/s, loss=0.123]", 0, True))
    assert items == [
        Progress(45, 100, 3.61, 15.0, "it", 0, "tqdm", "Epoch 1"),
        Metric("loss", 0.123, 45, 0, "tqdm"),
    ]
    # The same drawing again (tqdm refreshes after tqdm.write): nothing new.
    assert p.feed(Line("Epoch 1:  45%|████▌     | 45/100 [00:12<00:15,  3.61it/s, loss=0.123]", 0, True)) == []
    # The bar moved but the postfix did not change: progress only.
    assert [type(i) for i in p.feed(Line("Epoch 1:  46%|████▌     | 46/100 [00:12<00:15,  3.61it/s, loss=0.123]", 0))] == [Progress]


def test_text_glued_after_a_bar_is_parsed_too():
    # accelerate's logger wrote while tqdm's bar was on screen (real: accelerate_cpu_1proc.raw)
    p = OutputParser(clock=lambda: 0.0)
    items = p.feed(Line("  5%|▌         | 1/20 [00:00<00:02,  7.64it/s]11/21/2026 17:27:50 - INFO - __main__ - "
                        "[RANK 0] epoch 0: train_loss: 0.9654 perplexity: 2.63"))
    assert items[0] == Progress(1, 20, 7.64, 2.0, "it", None, "tqdm", "")
    assert {(m.name, m.value, m.rank) for m in items[1:]} == {
        ("epoch", 0.0, 0), ("train_loss", 0.9654, 0), ("perplexity", 2.63, 0)}


def _parse_fixture(name: str) -> tuple[OutputParser, list]:
    asm, parser = LineAssembler(), OutputParser(clock=lambda: 0.0)
    data = (LOGS / name).read_bytes()
    lines = asm.feed(data) + asm.flush()
    items = [item for ln in lines for item in parser.feed(ln)] + parser.flush()
    return parser, items


def test_real_tqdm_output_every_shape():
    _, items = _parse_fixture("tqdm_shapes.raw")
    last: dict[tuple, Progress] = {}
    for it in items:
        if isinstance(it, Progress):
            last[(it.label, it.total)] = it
    finals = {k: (v.current, v.unit) for k, v in last.items()}
    assert finals == {
        ("", 40): (40, "it"),
        ("Epoch 1", 30): (30, "it"),
        ("", None): (50, "batch"),
        ("download", 10000): (10000, "B"),
        ("eval", 20): (20, "it"),
        ("", 10): (10, "it"),
        ("tmp", 10): (10, "it"),
        ("train", 12): (12, "it"),
        ("slow", 3): (3, "it"),
        ("outer", 2): (2, "it"),
        ("inner", 5): (5, "it"),
    }
    slow = last[("slow", 3)]
    assert 0.8 < slow.rate < 1.0  # "1.11s/it"
    assert last[("download", 10000)].rate > 100_000  # "202kB/s"
    losses = [m for m in items if isinstance(m, Metric) and m.name == "loss"]
    assert [m.step for m in losses] == list(range(30))  # set_postfix after every update: one sample a step
    assert losses[1].value == 0.5 and all(m.source == "tqdm" for m in losses)


def test_real_tqdm_counts_only_go_forward_within_a_bar():
    _, items = _parse_fixture("tqdm_shapes.raw")
    seen: dict[tuple, int] = {}
    for it in items:
        if isinstance(it, Progress) and it.label in ("Epoch 1", "download", "train", "slow"):
            key = (it.label, it.total)
            assert it.current >= seen.get(key, 0)
            seen[key] = it.current


def test_metrics_in_the_bar_description_and_one_stream_per_bar():
    p = OutputParser(clock=lambda: 0.0)
    items = p.feed(Line("Epoch 1 loss 0.5320: 10%|█         | 10/100 [00:01<00:09, 10.00it/s]"))
    items += p.feed(Line("Epoch 1 loss 0.5100: 11%|█         | 11/100 [00:01<00:09, 10.00it/s]"))
    items += p.feed(Line("Epoch 2 loss 0.4000:  1%|          | 1/100 [00:00<00:09, 10.00it/s]"))
    metrics = [(m.name, m.value, m.step) for m in items if isinstance(m, Metric)]
    assert metrics == [("epoch", 1.0, 10), ("loss", 0.532, 10), ("loss", 0.51, 11), ("epoch", 2.0, 1), ("loss", 0.4, 1)]
    labels = [i.label for i in items if isinstance(i, Progress)]
    assert labels == ["Epoch 1 loss 0.5320", "Epoch 1 loss 0.5100", "Epoch 2 loss 0.4000"]
    assert len(p._streams) == 1

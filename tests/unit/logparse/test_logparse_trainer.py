"""HF Trainer dict lines (and other dict/JSON lines) -> metrics, with the step the Trainer was at."""

from __future__ import annotations

import pytest
from support import FIXTURES

from traindeck.backend.logparse import Line, LineAssembler, Metric, OutputParser, Progress
from traindeck.backend.logparse.dicts import numeric_items, parse_dict_text

LOGS = FIXTURES / "logs"


def metrics_of(*texts: str) -> list[tuple[str, float, int | None, str]]:
    p = OutputParser(clock=lambda: 0.0)
    items = [i for t in texts for i in p.feed(Line(t))] + p.flush()
    return [(m.name, m.value, m.step, m.source) for m in items if isinstance(m, Metric)]


@pytest.mark.parametrize(
    "text,expected",
    [
        # transformers < 5: floats
        ("{'loss': 0.6931, 'grad_norm': 1.23, 'learning_rate': 5e-05, 'epoch': 0.5}",
         [("loss", 0.6931), ("grad_norm", 1.23), ("learning_rate", 5e-05), ("epoch", 0.5)]),
        # transformers 5: every float formatted as a string first
        ("{'loss': '0.6931', 'grad_norm': '1.23', 'learning_rate': '5e-05', 'epoch': '0.5'}",
         [("loss", 0.6931), ("grad_norm", 1.23), ("learning_rate", 5e-05), ("epoch", 0.5)]),
        ("{'train_runtime': 4.378, 'train_samples_per_second': 54.82, 'train_steps_per_second': 6.853, "
         "'total_flos': 0.0, 'train_loss': 6.366, 'epoch': 0.9375}",
         [("train_runtime", 4.378), ("train_samples_per_second", 54.82), ("train_steps_per_second", 6.853),
          ("total_flos", 0.0), ("train_loss", 6.366), ("epoch", 0.9375)]),
        ("{'eval_loss': 'nan', 'eval_runtime': '0.1953', 'epoch': '1.0'}",
         [("eval_loss", float("nan")), ("eval_runtime", 0.1953), ("epoch", 1.0)]),
        # strings that are not numbers, booleans, None and lists are left out
        ("{'loss': 0.5, 'note': '[String too long to display, length: 300 > 100.]', 'flag': True, 'x': None, "
         "'lst': [1, 2]}", [("loss", 0.5)]),
    ],
)
def test_trainer_dicts(text, expected):
    got = metrics_of(text)
    assert [(n, v) for n, v, _, _ in got if v == v] == [(n, v) for n, v in expected if v == v]
    assert len(got) == len(expected)
    assert {s for *_, s in got} == {"trainer"}


def test_step_key_is_the_step_and_json_works():
    assert metrics_of('{"acc": 0.9, "reward": -1.5e-3, "step": 40}') == [
        ("acc", 0.9, 40, "dict"), ("reward", -0.0015, 40, "dict")]
    assert metrics_of("{'loss': 0.5, 'learning_rate': 0.001, 'epoch': 0.3, 'step': 30}")[0] == ("loss", 0.5, 30, "trainer")


def test_nested_dict_is_flattened_one_level():
    assert metrics_of("{'eval': {'loss': 0.5, 'acc': 0.75}, 'epoch': 1}") == [
        ("eval/loss", 0.5, None, "trainer"), ("eval/acc", 0.75, None, "trainer"), ("epoch", 1.0, None, "trainer")]


def test_dict_after_a_label():
    # accelerate examples: accelerator.print(f"epoch {epoch}:", eval_metric)
    assert metrics_of("epoch 0: {'accuracy': 0.68, 'f1': 0.81}") == [
        ("accuracy", 0.68, None, "dict"), ("f1", 0.81, None, "dict")]
    assert metrics_of("step 120 eval: {'bleu': 27.5}") == [("bleu", 27.5, 120, "dict")]


@pytest.mark.parametrize(
    "text",
    [
        "{'a': __import__('os').system('echo no')}",  # never evaluated
        "{'loss': 1+1j}",
        "{" * 500 + "}" * 500,
        "{'x': '" + "y" * 20000 + "', 'loss': 1.0}",  # longer than MAX_CHARS
        "{'loss': 1" + "0" * 5000 + "}",  # int too long to convert
        "{1: 2, 3: 4}",
        "{'name': 'run', 'tags': ['a']}",
        "{}",
        "{not a dict}",
        "[2026-11-21 17:24:38,736] [INFO] [launch.py:152:main] WORLD INFO DICT: {'localhost': [0, 1]}",
        "[2026-11-21 17:26:04,001] [INFO] [config.py:678:print]   aio_config ................... "
        "{'block_size': 1048576, 'queue_depth': 8, 'intra_op_parallelism': 1}",
        "  optimizer_params ............. {'lr': 0.001}",
        "kwargs = dict(lr=0.1) {'lr': 0.1} and more text after it {'momentum': 0.9}",
    ],
)
def test_not_metrics(text):
    assert metrics_of(text) == []


def test_parse_dict_text_is_safe():
    assert parse_dict_text("{'a': 1}") == {"a": 1}
    assert parse_dict_text("{'a': (lambda: 1)()}") is None
    assert numeric_items({"loss": "0.5", "step": 7, "flag": False}) == ({"loss": 0.5}, 7)


def test_trainer_step_comes_from_the_redraw_after_the_dict():
    # tqdm.write: bar (possibly stale: 19) -> erase -> dict -> redraw with the exact step (20)
    p = OutputParser(clock=lambda: 0.0)
    assert p.feed(Line(" 63%|██████▎   | 19/30 [00:02<00:01,  7.17it/s]", None, True))
    assert p.feed(Line("{'loss': '5.617', 'learning_rate': '0.003667', 'epoch': '0.625'}")) == []  # held
    items = p.feed(Line(" 67%|██████▋   | 20/30 [00:02<00:01,  7.17it/s]", None, True))
    assert [(m.name, m.step) for m in items if isinstance(m, Metric)] == [
        ("loss", 20), ("learning_rate", 20), ("epoch", 20)]
    assert isinstance(items[-1], Progress) and items[-1].current == 20


def test_held_dict_comes_out_on_flush():
    p = OutputParser(clock=lambda: 0.0)
    p.feed(Line(" 10%|█         | 3/30 [00:00<00:03,  7.13it/s]", None, True))
    assert p.feed(Line("{'train_runtime': '4.378', 'train_loss': '6.366'}")) == []
    assert [(m.name, m.step) for m in p.flush()] == [("train_runtime", 3), ("train_loss", 3)]
    assert p.flush() == []


def test_dict_without_a_bar_before_it_is_not_held():
    # PrinterCallback (disable_tqdm=True) prints the dicts with print(): nothing to wait for
    p = OutputParser(clock=lambda: 0.0)
    assert [m.name for m in p.feed(Line("{'loss': 0.5, 'epoch': 0.1}"))] == ["loss", "epoch"]


def test_real_hf_trainer_run():
    asm, p = LineAssembler(), OutputParser(clock=lambda: 0.0)
    data = (LOGS / "hf_trainer_cpu.raw").read_bytes()
    items = []
    for i in range(0, len(data), 100):
        for ln in asm.feed(data[i:i + 100]):
            items += p.feed(ln)
    for ln in asm.flush():
        items += p.feed(ln)
    items += p.flush()
    loss = [(m.step, m.value) for m in items if isinstance(m, Metric) and m.name == "loss"]
    assert loss == [(5, 9.128), (10, 6.852), (15, 5.472), (20, 5.617), (25, 6.782), (30, 4.348)]
    eval_loss = [(m.step, m.value) for m in items if isinstance(m, Metric) and m.name == "eval_loss"]
    assert eval_loss == [(15, 6.868), (30, 6.167)]
    summary = {m.name: m.value for m in items if isinstance(m, Metric) and m.name.startswith("train_")}
    assert summary == {"train_runtime": 4.378, "train_samples_per_second": 54.82, "train_steps_per_second": 6.853,
                       "train_loss": 6.366}
    assert {m.source for m in items if isinstance(m, Metric)} == {"trainer"}
    # The run's progress is the training bar (30 steps), not the eval bar (8 batches) drawn in between.
    assert p.progress is not None and (p.progress.current, p.progress.total) == (30, 30)
    assert p.latest_metrics["loss"].value == 4.348

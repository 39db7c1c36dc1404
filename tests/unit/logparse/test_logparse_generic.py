"""Loss lines that scripts print themselves (the generic heuristic), accelerate's log lines, and what must NOT
become a metric."""

from __future__ import annotations

import pytest
from support import FIXTURES

from traindeck.backend.logparse import Line, LineAssembler, Metric, OutputParser, Progress

LOGS = FIXTURES / "logs"


def parse(text: str) -> tuple[dict[str, float], list[tuple[int, int | None]], set[int | None]]:
    p = OutputParser(clock=lambda: 0.0)
    items = p.feed(Line(text)) + p.flush()
    metrics = {m.name: m.value for m in items if isinstance(m, Metric)}
    steps = {m.step for m in items if isinstance(m, Metric)}
    progress = [(i.current, i.total) for i in items if isinstance(i, Progress)]
    return metrics, progress, steps


POSITIVE = [
    ("step 10 loss 0.532", {"loss": 0.532}, [(10, None)]),
    ("Step 10/100 | loss: 0.532 | lr: 1e-4", {"loss": 0.532, "lr": 1e-4}, [(10, 100)]),
    ("step 10/100 loss=0.532 lr=3e-4 grad_norm=1.25", {"loss": 0.532, "lr": 3e-4, "grad_norm": 1.25}, [(10, 100)]),
    ("iter 100: loss 4.2345, time 123.45ms, mfu 12.34%", {"loss": 4.2345, "time_ms": 123.45, "mfu": 12.34}, [(100, None)]),
    ("step 100: train loss 4.2345, val loss 4.3456", {"train_loss": 4.2345, "val_loss": 4.3456}, [(100, None)]),
    ("Epoch [1/10], Step [100/600], Loss: 0.2134", {"epoch": 1.0, "loss": 0.2134}, [(100, 600)]),
    ("global_step=100 loss=0.5 lr=0.0003", {"loss": 0.5, "lr": 0.0003}, [(100, None)]),
    ("Epoch 3: val_loss=0.41, val_acc=0.88", {"epoch": 3.0, "val_loss": 0.41, "val_acc": 0.88}, []),
    ("Final loss: 0.23", {"loss": 0.23}, []),
    ("eval accuracy: 0.912", {"eval_accuracy": 0.912}, []),
    ("step 5 | loss nan | lr 0.001", {"loss": float("nan"), "lr": 0.001}, [(5, None)]),
    ("| epoch 001 | loss 2.345 | ppl 10.43 | lr 0.0005 | gnorm 1.2", {"epoch": 1.0, "loss": 2.345, "ppl": 10.43, "lr": 0.0005, "gnorm": 1.2}, []),
    ("11/21/2026 17:27:50 - INFO - __main__ - [RANK 0] epoch 0: train_loss: 0.9654 perplexity: 2.63",
     {"epoch": 0.0, "train_loss": 0.9654, "perplexity": 2.63}, []),
    ("INFO:__main__:step 20 loss 0.75", {"loss": 0.75}, [(20, None)]),
    ("2024-05-01 12:00:00,123 - trainer - INFO - step=30 loss=0.61", {"loss": 0.61}, [(30, None)]),
    ("[default0]:Step 4/8 | loss: 0.2500 | lr: 1e-4", {"loss": 0.25, "lr": 1e-4}, [(4, 8)]),  # tag removed by assembler
]


@pytest.mark.parametrize("text,metrics,progress", POSITIVE, ids=[p[0][:50] for p in POSITIVE])
def test_loss_lines(text, metrics, progress):
    if text.startswith("[default0]:"):
        asm = LineAssembler()
        (line,) = asm.feed(text.encode() + b"\n")
        text = line.text
    got, prog, _ = parse(text)
    assert got.keys() == metrics.keys()
    assert all(got[k] == v or (got[k] != got[k] and v != v) for k, v in metrics.items())
    assert prog == progress


NEGATIVE = [
    "Loading checkpoint from step_1000/",
    "Saving model checkpoint to /tmp/out/checkpoint-500",
    "Namespace(lr=0.001, batch_size=32, epochs=10, loss='ce')",
    "learning_rate: 0.0001",
    "  lr: 0.0003",
    "loss_scale: 1024",
    "Epoch 1 of training started",
    "Epoch 2 took 35.2 s",
    "rank 0: world size 2",
    "Using 4 dataloader workers, lr scheduler cosine",
    "warmup_steps = 100",
    "  Total optimization steps = 30",
    "  Num examples = 256",
    "***** Running training *****",
    "max_steps is given, it will override any value given in num_train_epochs",
    "loss went up 3 times in a row, lowering the lr",
    "Computing loss: 3 batches remaining",
    "The loss: function is cross entropy",
    "Accuracy of the network on the 10000 test images: 54 %",
    "Python 3.11.7, torch 2.1.0, step-by-step guide",
    "Found 1,234 steps in 3 files",
    "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.",
    "tokens: 1,234,567 seen so far",
    "W1121 17:30:13.193000 13507 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment variable",
    "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:83: FutureWarning: deprecated",
    "  File \"/work/main/train.py\", line 26, in <module>",
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: step 3 failed",
    "steps_per_print .............. 1",
    "iteration speed depends on 4 workers and 2 GPUs with 8 accumulation steps",
    "lr=1e-4 is quite high for epoch-based schedules with 3 restarts of the optimizer and more words here",
    "x" * 600 + " loss 0.5",
]


@pytest.mark.parametrize("text", NEGATIVE)
def test_ordinary_text_gives_no_metrics(text):
    assert parse(text) == ({}, [], set())


def test_no_metric_from_any_ordinary_fixture_line():
    """Every line of the real captures that is not one of the known metric-bearing kinds yields nothing."""
    metric_bearing = ("{", "step ", "Step ", "@traindeck")
    for path in sorted(LOGS.glob("*.raw")):
        asm = LineAssembler()
        for ln in asm.feed(path.read_bytes()) + asm.flush():
            text = ln.text
            if text.lstrip().startswith(metric_bearing) or "%|" in text or "/s]" in text or "[RANK" in text \
                    or "epoch" in text or "[Rank 0]" in text or "global_step=" in text:
                continue
            p = OutputParser(clock=lambda: 0.0)
            assert p.feed(ln) + p.flush() == [], f"{path.name}: {text!r}"


def test_real_accelerate_run():
    asm, p = LineAssembler(), OutputParser(clock=lambda: 0.0)
    data = (LOGS / "accelerate_cpu_1proc.raw").read_bytes()
    items = [i for ln in asm.feed(data) + asm.flush() for i in p.feed(ln)] + p.flush()
    got = [(m.name, m.value, m.rank, m.source) for m in items if isinstance(m, Metric)]
    assert got == [
        ("epoch", 0.0, 0, "generic"), ("train_loss", 0.9654, 0, "generic"), ("perplexity", 2.63, 0, "generic"),
        ("accuracy", 0.5, None, "dict"), ("f1", 0.25, None, "dict"),
        ("epoch", 1.0, 0, "generic"), ("train_loss", 0.1972, 0, "generic"), ("perplexity", 1.22, 0, "generic"),
        ("accuracy", 0.6, None, "dict"), ("f1", 0.35, None, "dict"),
    ]
    assert p.progress is not None and (p.progress.current, p.progress.total) == (20, 20)


def test_real_torchrun_tee_run_keeps_ranks_apart():
    asm, p = LineAssembler(), OutputParser(clock=lambda: 0.0)
    data = (LOGS / "torchrun_tee_2rank_fail.raw").read_bytes()
    items = [i for ln in asm.feed(data) + asm.flush() for i in p.feed(ln)] + p.flush()
    loss = sorted((m.rank, m.step, m.value) for m in items if isinstance(m, Metric) and m.name == "loss")
    assert loss == [(0, 4, 0.25), (0, 8, 0.125), (1, 4, 0.25), (1, 8, 0.125)]
    bars = {i.rank: i.current for i in items if isinstance(i, Progress) and i.source == "tqdm"}
    assert bars == {0: 8, 1: 8}

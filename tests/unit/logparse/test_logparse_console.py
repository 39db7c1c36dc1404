"""What a console shows: transient lines replaced in place (ConsoleBuffer / collapse_transient)."""

from __future__ import annotations

from support import FIXTURES

from traindeck.backend.logparse import ConsoleBuffer, Line, LineAssembler, collapse_transient

LOGS = FIXTURES / "logs"


def texts(lines: list[Line]) -> list[str]:
    return [ln.text for ln in lines]


def test_transient_lines_are_replaced_by_the_next_line():
    lines = [Line("start"), Line("bar 1", None, True), Line("bar 2", None, True), Line("bar 3"), Line("end")]
    assert texts(collapse_transient(lines)) == ["start", "bar 3", "end"]


def bar(n: int, label: str = "train") -> str:
    return f"{label}: {10 * n:3d}%|{'#' * n:<10}| {n}/10 [00:0{n}<00:01, 1.00it/s]"


def test_a_message_printed_over_a_bar_replaces_it_and_the_bar_comes_back_below():
    lines = [Line(bar(4), None, True), Line("note"), Line(bar(5), None, True)]  # tqdm.write
    assert texts(collapse_transient(lines)) == ["note", bar(5)]


def test_each_rank_keeps_its_own_bar():
    lines = [Line(bar(1), 0, True), Line(bar(1, "eval"), 1, True), Line(bar(2), 0, True),
             Line("r1 says hi", 1), Line(bar(3), 0, True)]
    assert texts(collapse_transient(lines)) == [bar(3), "r1 says hi"]


def test_another_ranks_line_cut_by_a_bar_redraw_is_kept():
    # DeepSpeed's launcher runs ranks with `python -u`: a print's text and its newline are two writes, and rank 0's
    # "\rtrain: ..." redraw lands between them. The error is not a redraw of anything: it stays.
    asm = LineAssembler()
    error = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."
    data = f"\r{bar(2)}\r{bar(3)}Traceback (most recent call last):\n{error}\r{bar(4)}\r{bar(5)}\n".encode()
    lines = asm.feed(data) + asm.flush()
    assert [ln.transient for ln in lines] == [True, False, True, True, False]  # the stream itself cannot tell
    assert texts(collapse_transient(lines)) == [f"{bar(3)}Traceback (most recent call last):", error, bar(5)]
    # ...while a display redrawn with new numbers, a spinner and a partial line completed are still replaced.
    assert texts(collapse_transient([Line("Step 5: loss 0.25", None, True), Line("Step 6: loss 0.24")])) == [
        "Step 6: loss 0.24"]
    assert texts(collapse_transient([Line("|", None, True), Line("/", None, True), Line("done")])) == ["done"]
    assert texts(collapse_transient([Line("Epo", None, True), Line("Epoch 1 done")])) == ["Epoch 1 done"]


def test_add_reports_what_changed_and_maxlen_is_kept():
    buf = ConsoleBuffer(maxlen=3)
    assert buf.add(Line("a")) is None
    assert buf.add(Line("bar", None, True)) is None
    assert buf.add(Line("bar 2", None, True)) == 1  # replaced index 1
    for t in ("b", "c", "d"):
        buf.add(Line(t))
    assert buf.texts() == ["b", "c", "d"] and len(buf) == 3
    v = buf.version
    buf.add(Line("e"))
    assert buf.version == v + 1


def test_texts_filter_and_tag_ranks():
    buf = ConsoleBuffer()
    buf.extend([Line("launcher"), Line("zero", 0), Line("one", 1)])
    assert buf.texts(rank=1) == ["launcher", "one"]
    assert buf.texts(tag_ranks=True) == ["launcher", "[0] zero", "[1] one"]


def test_report_lines_are_hidden_unless_asked():
    lines = [Line('@traindeck {"kind":"progress","current":1}'), Line("text")]
    assert texts(collapse_transient(lines)) == ["text"]
    assert len(collapse_transient(lines, hide_reports=False)) == 2


def test_bars_printed_as_separate_lines_are_folded():
    # torchrun --tee turns every redraw into a line of its own
    lines = [Line(" 12%|█▎        | 1/8 [00:00<00:00, 19.77it/s]", 1),
             Line(" 25%|██▌       | 2/8 [00:00<00:00, 18.46it/s]", 1),
             Line("Step 4/8 | loss: 0.2500", 1),
             Line(" 50%|█████     | 4/8 [00:00<00:00, 18.33it/s]", 1),
             Line("eval: 10%|█         | 1/10 [00:00<00:00, 19.77it/s]", 1)]
    assert texts(collapse_transient(lines)) == [
        " 25%|██▌       | 2/8 [00:00<00:00, 18.46it/s]", "Step 4/8 | loss: 0.2500",
        " 50%|█████     | 4/8 [00:00<00:00, 18.33it/s]", "eval: 10%|█         | 1/10 [00:00<00:00, 19.77it/s]"]
    assert len(collapse_transient(lines, fold_bars=False)) == 5


def _console(name: str) -> list[Line]:
    asm = LineAssembler()
    data = (LOGS / name).read_bytes()
    lines = []
    for i in range(0, len(data), 333):
        lines += asm.feed(data[i:i + 333])
    return collapse_transient(lines + asm.flush())


def test_real_hf_trainer_console():
    shown = texts(_console("hf_trainer_cpu.raw"))
    assert shown[0].startswith("[2026-11-21 17:26:51,265] [WARNING]")
    assert sum(t.startswith("{'loss'") for t in shown) == 6
    assert sum(t.startswith("{'eval_loss'") for t in shown) == 2
    assert shown[-1] == "100%|██████████| 30/30 [00:04<00:00,  6.88it/s]"
    assert "" not in shown and not any("%|" in t for t in shown[:-1])


def test_real_tqdm_console_is_what_a_terminal_leaves():
    shown = texts(_console("tqdm_shapes.raw"))
    assert shown[:6] == [
        "100%|██████████| 40/40 [00:00<00:00, 408.57it/s]",
        "Epoch 1: 100%|██████████| 30/30 [00:00<00:00, 379.75it/s, loss=0.0333, lr=0.0001]",
        "50batch [00:00, 703.06batch/s]",
        "download: 100%|██████████| 10.0k/10.0k [00:00<00:00, 202kB/s]",
        "eval: 100%|####################################| 20/20 [00:00<00:00, 402.30it/s]",
        "100% 10/10 [00:00<00:00, 409.80it/s]",
    ]
    assert "note at 4" in shown and "note at 9" in shown
    assert not any(t.startswith("tmp:") for t in shown)  # leave=False: erased


def test_real_torchrun_tee_console():
    lines = _console("torchrun_tee_2rank_fail.raw")
    rank1 = [ln.text for ln in lines if ln.rank == 1]
    assert rank1[:2] == ["  0%|          | 0/8 [00:00<?, ?it/s]", "hello from rank 1 of 2"]
    assert sum("%|" in t for t in rank1) <= 5  # 10 drawings folded to one per stretch between messages
    assert rank1[-1] == "RuntimeError: rank 1 fails on purpose"

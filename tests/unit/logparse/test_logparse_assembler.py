"""LineAssembler: bytes in any chunking -> lines (UTF-8, "\\r" redraws, ANSI, rank tags). No Qt, no torch."""

from __future__ import annotations

import pytest
from support import FIXTURES

from traindeck.backend.logparse import Line, LineAssembler, strip_ansi

LOGS = FIXTURES / "logs"
RAW_FIXTURES = sorted(p.name for p in LOGS.glob("*.raw"))


def assemble(data: bytes, cut: int | list[int] | None = None, **kw) -> list[Line]:
    """All lines of `data`, fed in pieces of `cut` bytes (or at the given offsets), then flushed."""
    asm = LineAssembler(**kw)
    if cut is None:
        pieces = [data]
    elif isinstance(cut, int):
        pieces = [data[i:i + cut] for i in range(0, len(data), cut)]
    else:
        bounds = [0, *cut, len(data)]
        pieces = [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    out: list[Line] = []
    for piece in pieces:
        out += asm.feed(piece)
    return out + asm.flush()


def triples(lines: list[Line]) -> list[tuple[str, int | None, bool]]:
    return [(ln.text, ln.rank, ln.transient) for ln in lines]


# (name, raw bytes, expected [(text, rank, transient)])
CASES = [
    ("plain", b"a\nb\n", [("a", None, False), ("b", None, False)]),
    ("crlf", b"a\r\nb\r\n", [("a", None, False), ("b", None, False)]),
    ("blank lines kept", b"a\n\n\r\nb\n", [("a", None, False), ("", None, False), ("", None, False), ("b", None, False)]),
    ("unterminated tail", b"a\nlast", [("a", None, False), ("last", None, False)]),
    ("tail ending in cr is transient", b"a\nbar 1\r", [("a", None, False), ("bar 1", None, True)]),
    ("tqdm redraws", b"\r 10%|#| 1/10\r 20%|##| 2/10\r 30%|###| 3/10\n",
     [(" 10%|#| 1/10", None, True), (" 20%|##| 2/10", None, True), (" 30%|###| 3/10", None, False)]),
    ("cr then newline keeps the last state", b"progress 5\r\n", [("progress 5", None, False)]),
    ("cr cr newline", b"progress 5\r\r\n", [("progress 5", None, False)]),
    ("print end=cr then next print", b"Loading...\rLoaded\n", [("Loading...", None, True), ("Loaded", None, False)]),
    ("padding spaces of a redraw dropped", b"\rlong bar text\rshort   \n", [("long bar text", None, True), ("short", None, False)]),
    ("tqdm.write: erase, message, redraw", b"\rbar 4/12\r          \rnote at 4\n\rbar 4/12\rbar 5/12\n",
     [("bar 4/12", None, True), ("note at 4", None, False), ("bar 4/12", None, True), ("bar 5/12", None, False)]),
    ("erased line is not shown", b"\rtmp 10/10\r            \r\rtrain 0/12\n", [("tmp 10/10", None, True), ("train 0/12", None, False)]),
    ("ansi colours", b"\x1b[31mred\x1b[0m and \x1b[1;32mgreen\x1b[m\n", [("red and green", None, False)]),
    ("osc title and hyperlink", b"\x1b]0;title\x07text \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n", [("text link", None, False)]),
    ("erase-line and charset escapes", b"\x1b[2K\x1b(Bplain\x1b[K\n", [("plain", None, False)]),
    ("other controls removed, tab kept", b"a\x07b\x08c\x00d\te\n", [("abcd\te", None, False)]),
    ("nested tqdm bar moves the cursor up: transient", b"outer 0/2\n\rinner 1/5\x1b[A\n\rinner 2/5\x1b[A\n",
     [("outer 0/2", None, False), ("inner 1/5", None, True), ("inner 2/5", None, True)]),
    ("cursor up before the text is not a redraw", b"\r   \r\x1b[A{'eval_loss': 1.0}\n", [("{'eval_loss': 1.0}", None, False)]),
    ("utf-8", "é😀 ünïcode ✓\n".encode(), [("é😀 ünïcode ✓", None, False)]),
    ("invalid utf-8 replaced", b"bad \xff\xfe bytes \xe2\x82\n", [("bad \ufffd\ufffd bytes \ufffd", None, False)]),
    ("torchrun tee tags", b"[default0]:hello\n[default1]:  indented\n", [("hello", 0, False), ("  indented", 1, False)]),
    ("torch excepthook tag", b"[rank1]: Traceback (most recent call last):\n", [("Traceback (most recent call last):", 1, False)]),
    ("nested tags", b"[default1]:[rank1]: RuntimeError: boom\n", [("RuntimeError: boom", 1, False)]),
    ("open mpi tag", b"[1,3]<stdout>:step 1\n[1,2]<stderr>:warn\n", [("step 1", 3, False), ("warn", 2, False)]),
    ("log brackets are not tags", b"[2026-11-21 17:24:34,604] [INFO] x\n[INFO] y\n[Rank 0] step=1\n[1]:\n",
     [("[2026-11-21 17:24:34,604] [INFO] x", None, False), ("[INFO] y", None, False), ("[Rank 0] step=1", None, False),
      ("[1]:", None, False)]),
    ("numeric prefix is off by default", b"0: hello\n", [("0: hello", None, False)]),
    ("tee: empty tagged lines are the \\r of redraws", b"[default1]:\n[default1]: 12%| 1/8\n", [(" 12%| 1/8", 1, False)]),
    ("tee: a redraw glued to the next tagged line is split",
     b"[default1]:  0%| 0/8 [00:00<?, ?it/s][default1]:hello from rank 1\n",
     [("  0%| 0/8 [00:00<?, ?it/s]", 1, False), ("hello from rank 1", 1, False)]),
    ("ranks sharing a pipe: another rank's line glued to a bar is split",  # traindeck's own [rankN]: tags
     b"[rank1]: starting\n\r[rank0]: train:  95%| 19/20 [00:01<00:01, 20.00it/s][rank1]: rank 1 done\n",
     [("starting", 1, False), ("train:  95%| 19/20 [00:01<00:01, 20.00it/s]", 0, False), ("rank 1 done", 1, False)]),
]


@pytest.mark.parametrize("name,data,expected", CASES, ids=[c[0] for c in CASES])
def test_cases_whole_and_in_every_chunking(name, data, expected):
    assert triples(assemble(data)) == expected
    assert triples(assemble(data, 1)) == expected, "byte by byte"
    for cut in range(1, len(data)):  # every single split point, including inside \r\n, escapes and characters
        assert triples(assemble(data, [cut])) == expected, f"split at {cut}"


def test_numeric_prefix_when_asked():
    assert triples(assemble(b"0: hello\n12: world\nno tag\n", numeric_prefix=True)) == [
        ("hello", 0, False), ("world", 12, False), ("no tag", None, False)]


def test_extra_role_names():
    assert triples(assemble(b"[trainer3]:x\n[myrole2]:y\n", roles=("default", "rank", "myrole"))) == [
        ("[trainer3]:x", None, False), ("y", 2, False)]


def test_character_split_across_chunks_stays_whole():
    data = "a😀b\n".encode()  # the emoji is 4 bytes
    for cut in range(1, len(data)):
        lines = assemble(data, [cut])
        assert [ln.text for ln in lines] == ["a😀b"]


def test_flush_decodes_a_truncated_character_as_replacement():
    assert [ln.text for ln in assemble("x😀".encode()[:-1])] == ["x\ufffd"]


def test_partial_shows_the_current_bar_without_consuming_it():
    asm = LineAssembler()
    assert asm.feed(b"start\n\r\x1b[32m 10%|#| 1/10\x1b[0m") == [Line("start")]
    p = asm.partial()
    assert p == Line(" 10%|#| 1/10", None, True)
    assert asm.partial() == p
    assert asm.feed(b"\r 20%|##| 2/10") == [Line(" 10%|#| 1/10", None, True)]
    assert asm.partial() == Line(" 20%|##| 2/10", None, True)
    assert asm.flush() == [Line(" 20%|##| 2/10", None, False)]
    assert asm.partial() is None


def test_partial_hides_an_escape_sequence_cut_in_half():
    asm = LineAssembler()
    asm.feed(b"[default0]:loading \x1b[3")
    assert asm.partial() == Line("loading", 0, True)


def test_cr_at_chunk_end_waits_for_the_next_byte():
    asm = LineAssembler()
    assert asm.feed(b"abc\r") == []
    assert asm.feed(b"\n") == [Line("abc")]
    assert asm.feed(b"def\r") == []
    assert asm.feed(b"xyz\n") == [Line("def", None, True), Line("xyz")]


@pytest.mark.parametrize("chunk", [4096, 65536, 1 << 20])
def test_a_one_megabyte_line_stays_whole(chunk):
    line = ("x" * 1023 + "é") * 1024  # 1 MiB of characters, multi-byte ones included
    data = b"before\n" + line.encode() + b"\nafter\n"
    lines = assemble(data, chunk)
    assert [len(ln.text) for ln in lines] == [6, len(line), 5]
    assert lines[1].text == line


def test_unterminated_flood_is_cut_at_max_line_chars():
    asm = LineAssembler(max_line_chars=10_000)
    out = []
    for _ in range(100):
        out += asm.feed(b"y" * 1000)
    out += asm.flush()
    assert sum(len(ln.text) for ln in out) == 100_000
    assert all(len(ln.text) <= 11_000 for ln in out)


def test_counters():
    asm = LineAssembler()
    asm.feed(b"a\nb\nc")
    asm.flush()
    assert (asm.bytes_in, asm.lines_out) == (5, 3)


def test_strip_ansi():
    assert strip_ansi("\x1b[1m\x1b[38;5;196mbold red\x1b[0m\x07") == "bold red"


def test_8_bit_escapes_and_c1_controls_are_removed_whole():
    """Some terminals read U+009B as ESC [: a log line must not reach `runs show` or the notify command with one."""
    assert strip_ansi("a\u009b2Jb\u009b31mred\u009b0m") == "abred"
    assert strip_ansi("title\u009d0;pwned\u0007 after\u0085") == "title after"
    assert strip_ansi("caf\u00e9 \u00b0C \u00a9") == "caf\u00e9 \u00b0C \u00a9"  # printable Latin-1 stays
    for cut in (1, 2, 3, 64):
        lines = assemble("loss \u009b1;31m0.5\u009b0m\u0085\nfine \u00b0C\n".encode(), cut)
        assert [line.text for line in lines] == ["loss 0.5", "fine \u00b0C"], cut


@pytest.mark.parametrize("name", RAW_FIXTURES)
def test_real_output_is_independent_of_chunking(name):
    data = (LOGS / name).read_bytes()
    whole = assemble(data)
    assert whole, name
    for cut in (1, 7, 97, 4096):
        assert assemble(data, cut) == whole, f"{name} in {cut}-byte chunks"


def test_real_hf_trainer_output():
    lines = assemble((LOGS / "hf_trainer_cpu.raw").read_bytes())
    dicts = [ln.text for ln in lines if ln.text.startswith("{")]
    assert len(dicts) == 9 and all(not ln.transient for ln in lines if ln.text.startswith("{"))
    assert "\x1b" not in "".join(ln.text for ln in lines)
    bars = [ln for ln in lines if "/30 [" in ln.text]
    # Redraws are transient; a drawing followed by "\n" (to draw the eval bar below it, and the last one) stays.
    assert not bars[-1].transient and bars[-1].text.startswith("100%")
    assert sum(not ln.transient for ln in bars) == 5  # 15/30 and 30/30 twice each (eval bars below), the end


def test_real_torchrun_tee_output_is_tagged_by_rank():
    lines = assemble((LOGS / "torchrun_tee_2rank_fail.raw").read_bytes())
    hello = {ln.rank: ln.text for ln in lines if ln.text.startswith("hello from")}
    assert hello == {0: "hello from rank 0 of 2", 1: "hello from rank 1 of 2"}
    traceback = [ln for ln in lines if ln.rank == 1 and "RuntimeError: rank 1 fails on purpose" in ln.text]
    assert traceback and traceback[0].text == "RuntimeError: rank 1 fails on purpose"
    assert not [ln for ln in lines if ln.rank is not None and not ln.text.strip()]
    assert not [ln for ln in lines if "[default" in ln.text]

"""Printed metric values made exact from the TensorBoard values they are the rounding of.

A script often prints what it also writes to TensorBoard: the HF Trainer prints `{'loss': '4.025', ...}` (4
significant digits) and writes `train/loss` = 4.0246710777 to its event file. traindeck keeps one series, the printed
one (its steps and timing come from the output), and `ExactValues` finds, for each printed value, the TensorBoard
value it was printed from, so that the run store holds TensorBoard's value wherever TensorBoard has one (the printed
value stays where it has none: until the event is read, or for steps TensorBoard was not given).

A tag and the printed series that stands for it (`twin_names`, the closest first): the tag itself; HF's name for
it (`x` for `train/x`, `eval_x` for `eval/x`, `test_x` for `test/x`); the tag with `_` for `/`; its last part. A
printed name pairs with the tag it is the closest name of (`loss` goes to `train/loss`, not to `eval/loss`).

A printed value and a value of its tag are the same number when
- their steps are equal (a line printed with a step: the Trainer's bar shows its global_step when it logs), or,
  for a value printed without a step (the Trainer with `disable_tqdm`), the tag's values are taken in order: the
  first not yet taken that was written before the line was read (the Trainer writes the event, then prints);
- and the printed value is the TensorBoard value rounded to the printed digits, give or take half a float32 step
  where TensorBoard stored a float32. A parsed number has lost its trailing zeros ("1.8000" is 1.8), so the digits
  are read off its series: printed with as many significant digits as the most any of its values showed (`.4g`: 4),
  or with as many decimals (`.4f`: 4), whichever reads the value more loosely, never more than its own.
A printed value is only replaced where TensorBoard's is more exact: a printed `5e-05` stays, as float32 stores 5e-05
as 4.99999987e-05 (its own rounding), and so does a printed full-precision value of a float32 tag.

A tag is decided by its first DECIDE comparable values (or those there are when the run ends): the same quantity
as its printed namesake where most of them are the same numbers (its printed values are revised from then on, those
matched while it waited included), another quantity with the same name otherwise (a script printing each batch's
loss and writing a running mean as `train/loss`): then it becomes a series of its own, with every value read so
far. Until a tag is decided its values are kept (at most KEPT; past that, the printed series stands for it, as it
did before any comparison was possible).

No I/O: the TensorBoard reader feeds the tags' values, the run store the printed rows; `resolve` says what to revise.
"""

from __future__ import annotations

import math
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Literal

DECIDE = 3  # comparable values that all differ before a tag counts as another quantity
SLACK_S = 1.0  # a TensorBoard value written up to this long after the printed line was read may still be its twin
KEPT = 20_000  # values kept a tag (undecided, or waiting for their printed twins)
PRINTED_KEPT = 4_096  # printed values kept a name while no tag has them

ScalarRow = tuple[int, float, float, bool]  # step, wall time, value, stored as float32
PrintedRow = tuple[int, int | None, float, float]  # row id, step, t, value
Revision = tuple[int, float, float]  # row id, the value it holds, the exact value
State = Literal["waiting", "twin", "own"]


def twin_names(tag: str) -> tuple[str, ...]:
    """The printed names that may stand for `tag`, the closest first."""
    names = [tag]
    head, _, rest = tag.partition("/")
    if rest and "/" not in rest:  # transformers' rewrite_logs: x -> train/x, eval_x -> eval/x, test_x -> test/x
        if head == "train":
            names.append(rest)
        elif head in ("eval", "test"):
            names.append(f"{head}_{rest}")
    names += [tag.replace("/", "_"), tag.rsplit("/", 1)[-1]]
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Shown:
    """How many digits a printed value shows (its shortest repr), or the most a series' values showed."""

    significant: int = 0
    decimals: int = 0

    def most(self, other: Shown) -> Shown:
        return Shown(max(self.significant, other.significant), max(self.decimals, other.decimals))


def shown(printed: float) -> tuple[Shown, int]:
    """The digits `printed` shows and the exponent of its first; (Shown(), 0) for zero and non-finite values."""
    if printed == 0 or not math.isfinite(printed):
        return Shown(), 0
    try:
        parts = Decimal(repr(printed)).normalize().as_tuple()
    except InvalidOperation:
        return Shown(), 0
    exponent = int(parts.exponent)  # (an int for a finite number)
    return Shown(len(parts.digits), max(0, -exponent)), exponent + len(parts.digits) - 1


def half_unit(printed: float, series: Shown = Shown()) -> float:
    """Half a unit of the last digit of `printed`, read as printed with its series' significant digits or with its
    decimals, whichever unit is larger (and never more digits than `printed` shows): how far the value it was
    rounded from may lie from it. 0 for zero (a printed 0 is a 0)."""
    own, first = shown(printed)
    if not own.significant:
        return 0.0
    digits = own.most(series)
    return 0.5 * max(10.0 ** (first - digits.significant + 1), 10.0 ** -digits.decimals)


def same_number(printed: float, value: float, single: bool, series: Shown = Shown()) -> bool:
    """Whether `printed` is `value` (a float32 where `single`) rounded to the printed digits (see half_unit)."""
    if printed == value:
        return True
    if not (math.isfinite(printed) and math.isfinite(value)):
        return False
    room = half_unit(printed, series) * (1 + 1e-9) + abs(printed) * 1e-15
    if single:
        room += abs(value) * 2.0 ** -24  # float32's own rounding of the value it was given
    return abs(value - printed) <= room


def more_exact(printed: float, value: float, single: bool) -> bool:
    """Whether `value` says more than `printed`: not the same number as the tag stores it (a float32 of the
    printed value is that value)."""
    if not single:
        return value != printed
    try:
        return bool(struct.unpack("f", struct.pack("f", printed))[0] != value)
    except OverflowError:
        return False


@dataclass
class _Tag:
    names: tuple[str, ...]
    order: int  # of two tags a name is equally close to, the first seen has it
    pending: list[ScalarRow] = field(default_factory=list)  # values no printed one has taken yet, in file order
    kept: list[ScalarRow] = field(default_factory=list)  # every value while waiting (its own series if "own")
    state: State = "waiting"
    name: str | None = None  # the printed name it pairs with (fixed once a value matched)
    agreed: int = 0  # printed values compared with it while waiting: the same numbers ...
    differed: int = 0  # ... or not
    early: list[Revision] = field(default_factory=list)  # revisions found while waiting (made if it is a twin)
    newest_step: int | None = None
    newest_wall: float | None = None


@dataclass
class ExactValues:
    """TensorBoard tags a printed series may stand for, and the printed rows, matched value by value."""

    decide: int = DECIDE
    slack_s: float = SLACK_S
    kept: int = KEPT
    tags: dict[str, _Tag] = field(default_factory=dict)
    printed: dict[str, deque[PrintedRow]] = field(default_factory=dict)
    shown: dict[str, Shown] = field(default_factory=dict)  # the most digits a printed series' values showed
    matched: int = 0  # printed values found in TensorBoard once their tag was decided (revised or already exact)

    def add_tensorboard(self, tag: str, rows: Iterable[ScalarRow]) -> None:
        """Values of a tag a printed series may stand for, in the order written."""
        entry = self.tags.get(tag)
        if entry is None:
            entry = self.tags[tag] = _Tag(twin_names(tag), len(self.tags))
        for row in rows:
            entry.pending.append(row)
            if entry.state == "waiting":
                entry.kept.append(row)
            entry.newest_step = row[0] if entry.newest_step is None else max(entry.newest_step, row[0])
            entry.newest_wall = row[1] if entry.newest_wall is None else max(entry.newest_wall, row[1])
        if len(entry.pending) > self.kept:
            del entry.pending[:len(entry.pending) - self.kept]
        if entry.state == "waiting" and len(entry.kept) > self.kept:
            entry.state, entry.kept = "twin", []  # never comparable: the printed series stands for it

    def add_printed(self, rows: Iterable[tuple[int, str, int | None, float, float]]) -> None:
        """Printed rows as the run store has them (row id, name, step, t, value), oldest first."""
        for row_id, name, step, t, value in rows:
            queue = self.printed.get(name)
            if queue is None:
                queue = self.printed[name] = deque(maxlen=PRINTED_KEPT)
            queue.append((row_id, step, t, value))
            self.shown[name] = self.shown.get(name, Shown()).most(shown(value)[0])

    def resolve(self, final: bool = False) -> tuple[list[Revision], dict[str, list[ScalarRow]]]:
        """Match what can be matched: the printed values to revise, and the tags found to be other quantities
        (with every value of theirs read so far: from now on they are series of their own). `final`: nothing more
        will be written; every printed value still waiting is decided with the values there are."""
        revisions: list[Revision] = []
        own: dict[str, list[ScalarRow]] = {}
        for tag, entry in self.tags.items():
            if entry.state == "own":
                continue
            name = entry.name or self._name_of(tag, entry)
            if name is None:
                continue
            self._match(entry, name, final, revisions)
            compared = entry.agreed + entry.differed
            if entry.state == "waiting" and compared and (compared >= self.decide or final):
                if entry.agreed > entry.differed:
                    entry.state, entry.name, entry.kept = "twin", name, []
                    revisions.extend(entry.early)
                else:
                    entry.state = "own"
                    own[tag], entry.kept, entry.pending = entry.kept, [], []
                entry.early = []
        return revisions, own

    def _name_of(self, tag: str, entry: _Tag) -> str | None:
        """The closest of the tag's names that is printed and that no other tag is closer to."""
        for closeness, name in enumerate(entry.names):
            if name not in self.printed:
                continue
            if all(other is entry or other.state == "own" or name not in other.names
                   or (other.names.index(name), other.order) > (closeness, entry.order)
                   for other in self.tags.values()):
                return name
        return None

    def _match(self, entry: _Tag, name: str, final: bool, revisions: list[Revision]) -> None:
        queue = self.printed[name]
        series = self.shown.get(name, Shown())
        while queue:
            row_id, step, t, value = queue[0]
            found, compared = self._find(entry.pending, step, t, value, series)
            if found is None:
                passed = (entry.newest_step is not None and entry.newest_step > step) if step is not None else \
                    (entry.newest_wall is not None and entry.newest_wall > t + self.slack_s)
                if not (passed or final):
                    return  # its value may not be read yet
                queue.popleft()  # TensorBoard has no value for it
                if compared and entry.state == "waiting":
                    entry.differed += 1
                continue
            queue.popleft()
            _step, _wall, exact, single = entry.pending[found]
            if more_exact(value, exact, single):
                (revisions if entry.state == "twin" else entry.early).append((row_id, value, exact))
            if entry.state == "waiting":
                entry.agreed += 1
            else:
                self.matched += 1
            # Values before it have no printed twin; by step, it stays for a second line of that step (another
            # node's copy of the same print).
            del entry.pending[:found + (1 if step is None else 0)]

    def _find(self, pending: list[ScalarRow], step: int | None, t: float, value: float,
              series: Shown) -> tuple[int | None, bool]:
        """The index of the printed value's twin among `pending` (None: not there), and whether any value there
        was comparable with it."""
        compared = False
        for index, (row_step, wall, exact, single) in enumerate(pending):
            if step is not None:
                if row_step != step:
                    continue
            elif wall > t + self.slack_s:
                break  # written after the line was read (in file order: every later one too)
            compared = True
            if same_number(value, exact, single, series):
                return index, True
        return None, compared

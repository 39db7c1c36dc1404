"""What the Configure page knows about the draft beyond ctx.draft itself: how many edits it has seen, the preset's
content as loaded or last saved, whether the demo's deliberate error is the only edit, and whether the page is
changing the draft itself at the moment. The page and its preset files share one DraftEdits."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Iterator

from traindeck.backend.presets import Preset
from traindeck.gui.context import Draft


def preset_content(preset: Preset | None) -> dict[str, object] | None:
    """What a preset says, without where it lives or what it is called (a copy: the draft goes on changing)."""
    if preset is None:
        return None
    return copy.deepcopy({f.name: getattr(preset, f.name) for f in dataclasses.fields(preset)
                          if f.name not in ("name", "builtin", "path")})


class DraftEdits:
    """The edit ledger of `draft`: counted edits, its clean content, the demo's edit, and the page's own changes."""

    def __init__(self, draft: Draft):
        self.draft = draft
        self.count = 0  # edits so far: a save tells whether the user went on typing while it was written
        self.demo_count: int | None = None  # the demo's deliberate error is not "unsaved work"
        # The preset's content as loaded or last saved: an edit that puts every value back is no change (quitting
        # would otherwise ask to save a built-in preset whose one edited value has been put back).
        self.clean = preset_content(draft.preset)
        self._own = 0  # > 0 while the page changes the draft itself (its signals then need no refresh)

    @contextlib.contextmanager
    def owning(self) -> Iterator[None]:
        """The page changes the draft inside this block: its own draft listeners let those changes pass."""
        self._own += 1
        try:
            yield
        finally:
            self._own -= 1

    @property
    def owned(self) -> bool:
        """True inside `owning`."""
        return self._own > 0

    def unsaved(self) -> bool:
        """The draft has changes worth asking about before they are lost."""
        draft = self.draft
        return draft.preset is not None and draft.dirty and self.demo_count != self.count

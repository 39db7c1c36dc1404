"""The `traindeck` command and `python -m traindeck`.

The entry point lives at the package root because it is the one place allowed to know both halves: the backend
CLI (which never imports Qt) and the GUI it opens for `traindeck` / `traindeck gui`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def _open_gui(demo: bool, screenshot_dir: str | None) -> int:
    from traindeck.gui.app import run_app

    return run_app(demo=demo, screenshot_dir=screenshot_dir)


def main(argv: Sequence[str] | None = None) -> int:
    from traindeck.backend.cli import main as cli_main

    return cli_main(argv, open_gui=_open_gui)


if __name__ == "__main__":
    sys.exit(main())

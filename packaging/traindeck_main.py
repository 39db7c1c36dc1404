"""The frozen app's entry script (PyInstaller needs a file, not `-m traindeck`): the same `main` as the
`traindeck` console script, so every command (and the hidden `_supervise` / `_sentinel`) works in the bundle."""

import sys

from traindeck.__main__ import main

if __name__ == "__main__":
    sys.exit(main())

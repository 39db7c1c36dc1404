"""What the machine itself must have, checked before anything slow starts: the standard library only, so that
`make setup` / `make demo` can run it with the system's python3 before the .venv exists:

    python3 backend/system_check.py setup    # python3 >= 3.10 with venv, a C++ compiler (DeepSpeed builds its ops)
                                             # (and a note when libaio's headers, for NVMe offload, are missing)
    python3 backend/system_check.py demo     # the same, plus a display and the X11 libraries Qt's xcb plugin needs

Each missing piece is one line with the exact command that installs it (Debian/Ubuntu names); exit 1 if any.
The dashboard calls `missing_qt_libraries` on the installed Qt plugin before opening a window on X11.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

# The shared libraries Qt 6's xcb platform plugin loads beyond libxcb itself, and their Debian packages. Qt ships
# the plugin but not these; without them Qt aborts with "Could not load the Qt platform plugin xcb".
QT_XCB_LIBRARIES = {
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libfontconfig.so.1": "libfontconfig1",
    "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
}

NO_DISPLAY = ("no display: DISPLAY and WAYLAND_DISPLAY are not set, so a window would open where nobody sees it.\n"
              "  - on a desktop session, run this from a terminal there (or `ssh -X` from one);\n"
              "  - for pictures of every page without a display: traindeck gui --screenshot DIR;\n"
              "  - or use the command line (`traindeck --help`), e.g. the demo: traindeck run --preset cpu-demo "
              "resources/demo/train_tiny.py --deepspeed_config '{ds_config}'")


def install_line(packages: list[str]) -> str:
    return "sudo apt-get install -y " + " ".join(sorted(set(packages)))


def has_display(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def known_libraries() -> set[str]:
    """Sonames the dynamic loader's cache knows (`ldconfig -p`), or an empty set if it cannot be asked."""
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        return {line.split()[0] for line in out.splitlines()[1:] if line.strip()}
    return set()


def missing_qt_libraries(plugin: str | None = None) -> list[str]:
    """Debian packages missing for Qt's xcb plugin: from `ldd` on the plugin when given (what it really needs),
    else from the loader's cache against QT_XCB_LIBRARIES."""
    if plugin and os.path.exists(plugin):
        try:
            out = subprocess.run(["ldd", plugin], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out:
            missing = [line.split()[0] for line in out.splitlines() if "not found" in line]
            return [QT_XCB_LIBRARIES.get(name, name) for name in missing]
    known = known_libraries()
    if not known:
        return []  # no loader cache to ask (not glibc): Qt will say what it misses
    return [package for soname, package in QT_XCB_LIBRARIES.items() if soname not in known]


def venv_qt_plugin(venv: str = ".venv") -> str | None:
    found = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "PySide6", "Qt", "plugins",
                                   "platforms", "libqxcb.so"))
    return found[0] if found else None


def setup_problems() -> list[str]:
    problems = []
    if sys.version_info < (3, 10):  # noqa: UP036  run by the system python3, before any venv
        problems.append(f"Python 3.10 or newer is needed (this is {sys.version.split()[0]}): "
                        "sudo apt-get install -y python3 (or make PYTHON=python3.11 ...)")
    try:
        import ensurepip  # noqa: F401  Debian splits `python3 -m venv` into its own package
    except ImportError:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        problems.append(f"python3 cannot create a virtual environment: sudo apt-get install -y python{version}-venv")
    if not (shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")):
        problems.append("no C++ compiler: DeepSpeed compiles its CPU ops (the demo's optimizer offload) on first "
                        "use: sudo apt-get install -y g++")
    return problems


LIBAIO_HEADER = "/usr/include/libaio.h"


def libaio_note(header: str = LIBAIO_HEADER) -> str | None:
    """The line naming libaio's headers when they are missing: DeepSpeed's NVMe offload (ZeRO-Infinity) swaps
    through its async_io op, which builds against them. A note, not a problem: runs without NVMe offload never
    need it."""
    if os.path.exists(header):
        return None
    return ("no libaio headers: DeepSpeed's NVMe offload (ZeRO-Infinity) builds its async_io op against them: "
            + install_line(["libaio-dev"]))


def demo_problems(environ: Mapping[str, str] | None = None, venv: str = ".venv") -> list[str]:
    env = os.environ if environ is None else environ
    if not has_display(env):
        return [NO_DISPLAY]  # nothing else matters until there is a screen to show the window on
    problems = setup_problems()
    platform = env.get("QT_QPA_PLATFORM", "")
    if not env.get("WAYLAND_DISPLAY") and platform in ("", "xcb"):
        missing = missing_qt_libraries(venv_qt_plugin(venv))
        if missing:
            problems.append(f"Qt's X11 (xcb) plugin needs libraries this machine lacks: {install_line(missing)}")
    return problems


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "setup"
    if what not in ("setup", "demo"):
        print("usage: system_check.py setup|demo", file=sys.stderr)
        return 2
    problems = demo_problems() if what == "demo" else setup_problems()
    for problem in problems:
        print(f"traindeck: {problem}", file=sys.stderr)
    note = libaio_note() if what == "setup" else None
    if note:
        print(f"traindeck: note: {note}", file=sys.stderr)
    if problems and what == "demo" and not has_display():
        print("  (after `make setup`, traindeck is .venv/bin/traindeck)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

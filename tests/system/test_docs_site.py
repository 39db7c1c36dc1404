"""The README stays a short page for users, and the docs site's command-line reference, generated from the real
argparse parsers by docs/hooks/cli_reference.py, names every command: a new command can never be missing from
the docs. (`make docs` builds the whole site with `mkdocs build --strict`.)"""

from __future__ import annotations

import argparse
import importlib.util
import re
from types import ModuleType

import pytest
from support import REPO

from traindeck.backend.cli import build_parser

HOOK = REPO / "docs" / "hooks" / "cli_reference.py"


def test_readme_is_short_and_gives_the_two_commands() -> None:
    readme = REPO / "README.md"
    assert readme.stat().st_size < 15_000, f"README.md is {readme.stat().st_size} bytes: move detail into docs/"
    text = readme.read_text(encoding="utf-8")
    assert "make demo" in text
    assert "make test" in text


def _hook() -> ModuleType:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the `docs` extra): the docs hook needs it")
    spec = importlib.util.spec_from_file_location("traindeck_docs_cli_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands(parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """(names listed by --help, every name the parser accepts) of a parser's sub-commands."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [c.dest for c in action._choices_actions], list(action.choices)


def test_cli_reference_names_every_command_of_the_real_parser() -> None:
    hook = _hook()
    page = hook.render_cli_reference()
    headings = set(re.findall(r"^#+ `(traindeck(?: [\w-]+)*)`$", page, flags=re.MULTILINE))

    parser = build_parser()
    listed, accepted = _commands(parser)
    assert len(listed) >= 10
    # What --help does not list is internal, and named so: a public command registered without help text would
    # otherwise slip past the table of commands.
    assert [name for name in accepted if name not in listed] == [n for n in accepted if n.startswith("_")]
    for name in listed:
        assert f"traindeck {name}" in headings, f"`traindeck {name}` is missing from the CLI reference"
        assert f"[`traindeck {name}`](#traindeck-{name})" in page
    for name in accepted:
        if name.startswith("_"):
            assert f"traindeck {name}" not in headings

    # Sub-commands too (runs show, queue add, config check, ...), with the help each one prints.
    nested = 0
    for name, sub in _choices(parser):
        if name.startswith("_") or not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            continue
        for child in _commands(sub)[1]:
            assert f"traindeck {name} {child}" in headings, f"`traindeck {name} {child}` is missing"
            nested += 1
    assert nested >= 10
    assert "usage: traindeck run " in page
    assert "--stop-on-nan" in page  # an option's help comes from the parser, not from a hand-written page


def _choices(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(action.choices.items())


def test_cli_reference_page_keeps_its_marker() -> None:
    hook = _hook()
    assert hook.MARKER in (REPO / "docs" / hook.PAGE).read_text(encoding="utf-8")

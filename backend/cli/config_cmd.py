"""`traindeck config ...`: check (and repair) accelerate YAML and DeepSpeed JSON configs.

Adding a subcommand: write `register_<name>(config_subparsers)` that adds its parser and sets `handler=` (see
`_register_check` below, or `register_fix` in config_fix.py), and add it to `_SUBCOMMANDS`. Keep the module top
level light (argparse only): each handler imports the config machinery when it runs.

`traindeck config check FILE... [--world-size N] [--json]` (exact; scripts rely on it):
  exit 0 when no message is an error (warnings and notes allowed), 1 when one is (a file that cannot be read is an
  error located at that file), 2 for usage errors (no FILE, a bad option). Text: one `FILE:LINE:COL:
  error|warning|note: PATH: message` line per message on stdout, then a one-line summary on stderr (errors and
  warnings counted; a note is information, e.g. who fills a DeepSpeed config's "auto" values). --json: the list of message
  dicts on stdout (file, line, column, severity, path, message), the summary still on stderr.

An accelerate config whose distributed type only some machines run (FSDP, Megatron-LM) is also judged against the
training interpreter (--python, default this one; probed in a subprocess, cached): where it cannot run it, one
warning at distributed_type says why in the words a launch refuses with (the file is valid: exit status unchanged).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traindeck.backend.config import Message, SourceDocument

ORDER = 20


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _register_check(config_sub: argparse._SubParsersAction) -> None:
    p = config_sub.add_parser(
        "check", help="validate accelerate YAML / DeepSpeed JSON files (exit 1 on errors)",
        description="Check accelerate launch configs and DeepSpeed configs: syntax (exact line and column), every "
                    "value against what the tool accepts, and the cross-field mistakes accelerate and DeepSpeed only "
                    "report minutes into a run. An accelerate config is checked together with the DeepSpeed JSON it "
                    "references (or the one given beside it), whose batch sizes use its num_processes.")
    p.add_argument("files", metavar="FILE", nargs="+", help="accelerate YAML and/or DeepSpeed JSON files")
    p.add_argument("--world-size", type=_positive, metavar="N",
                   help="processes in the job, for DeepSpeed's batch-size arithmetic (default: the accelerate "
                        "config's num_processes)")
    p.add_argument("--json", action="store_true", help="print the messages as a JSON list")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--hf-trainer", dest="consumer", action="store_const", const="hf_trainer",
                     help='the script uses the Hugging Face Trainer (or one built on it, like TRL\'s), which fills in "auto" '
                          'values')
    who.add_argument("--accelerate-script", dest="consumer", action="store_const", const="accelerate",
                     help='a script of your own on accelerate (Accelerator.prepare): fills fewer "auto" values than '
                          'the Trainer (not optimizer betas/eps)')
    who.add_argument("--plain-script", dest="consumer", action="store_const", const="plain",
                     help='a plain DeepSpeed script (deepspeed.initialize): "auto" values are not filled in')
    who.add_argument("--script", metavar="PY",
                     help='the training script: who fills "auto" is read from it (Trainer, Accelerator or '
                          'deepspeed.initialize)')
    p.add_argument("--native", action="store_true",
                   help="also ask accelerate and DeepSpeed themselves (needs the `train` extra; a few seconds)")
    p.add_argument("--python", metavar="PATH",
                   help="the interpreter of the training environment (default: this one): where --native asks the "
                        "tools, and whose torch says whether an FSDP or Megatron-LM config can run on this machine")
    p.set_defaults(handler=run_check, consumer=None)


def run_check(args: argparse.Namespace) -> int:
    """`config check`: print each file's messages and a summary; the exit code (1 when one is an error)."""
    from traindeck.backend.config import check_documents, has_errors, load_for_check, sort_messages

    consumer, why = _consumer(args)
    # Each file is read and parsed once, for the check and for the machine and native verdicts after it.
    docs: list[SourceDocument] | None = None
    try:
        docs = load_for_check(args.files)
        messages = check_documents(docs, world_size=args.world_size, consumer=consumer, consumer_why=why)
    except Exception:  # a bug one file triggers must not cost the others their check: each file alone
        messages = sort_messages(_one_by_one(args, consumer, why))
    machine = _machine(args, docs)
    if machine:
        messages = sort_messages(messages + machine)
    if args.native:
        messages = sort_messages(list(dict.fromkeys(messages + _native(args, docs))))
    if args.json:
        print(json.dumps([m.to_dict() for m in messages], indent=2, ensure_ascii=False))
    else:
        for message in messages:
            print(message.format())
    errors = sum(m.severity == "error" for m in messages)
    warnings = sum(m.severity == "warning" for m in messages)
    files = f"{len(args.files)} file{'s' if len(args.files) != 1 else ''}"
    if errors or warnings:
        print(f"traindeck: {errors} error{'s' if errors != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''}"
              f" in {files}", file=sys.stderr)
    else:
        print(f"traindeck: no problems found in {files}", file=sys.stderr)
    return 1 if has_errors(messages) else 0


def _consumer(args: argparse.Namespace) -> tuple[str | None, str]:
    """Who fills "auto" (see traindeck.backend.config.auto_fill), and what told us."""
    if args.consumer is not None:
        flag = {"hf_trainer": "--hf-trainer", "accelerate": "--accelerate-script", "plain": "--plain-script"}
        return args.consumer, flag[args.consumer]
    if args.script:
        from traindeck.backend.config import script_consumer

        return script_consumer(args.script)
    return None, ""


def _one_by_one(args: argparse.Namespace, consumer: str | None, why: str) -> list[Message]:
    """Each file checked on its own; a file whose check fails unexpectedly gets one error and a crash report."""
    from traindeck.backend.config import Message, check_files
    from traindeck.backend.crash import one_line, write_crash_report

    out: list[Message] = []
    for path in args.files:
        try:
            out += check_files([path], world_size=args.world_size, consumer=consumer, consumer_why=why)
        except Exception as exc:
            report = write_crash_report(exc, ["config", "check", str(path)], context=f"checking {path}")
            out.append(Message("error", "", f"traindeck could not check this file: {one_line(exc, report)}",
                               str(path), None, None))
    return out


def _machine(args: argparse.Namespace, loaded: list[SourceDocument] | None) -> list[Message]:
    """What the training interpreter cannot run of the accelerate FSDP / Megatron-LM configs given (`loaded`: the
    files as the check read them, else read here): one warning at each one's distributed_type, in the words a
    launch of it refuses with. The interpreter is probed (a subprocess, cached) only when such a config is given.
    A file only DeepSpeed's lenient reader takes (its slips in `lenient`) is no accelerate config to judge."""
    from traindeck.backend.config import load_file
    from traindeck.backend.launch import (
        accelerate_system_problems,
        machine_bound,
        probe_environment,
        resolve_python,
    )

    every = loaded if loaded is not None else [load_file(path) for path in args.files]
    docs = [doc for doc in every if doc.kind == "accelerate" and not doc.lenient and machine_bound(doc.data)]
    if not docs:
        return []
    environment = probe_environment(resolve_python(args.python))
    return [doc.message("warning", ("distributed_type",), problem)
            for doc in docs for problem in accelerate_system_problems(doc.data, environment)]


def _native(args: argparse.Namespace, loaded: list[SourceDocument] | None) -> list[Message]:
    """The real tools' verdicts on each file, read as the tool reads it: a JSON that only DeepSpeed's own reader
    (hjson) takes is judged on what DeepSpeed reads; a file traindeck cannot read at all is handed to the tool as
    text, which says why it refuses it; a file that cannot be opened gets one line saying the check did not run.
    `loaded`: the files as the check read them (the same reading), else each is read here."""
    from traindeck.backend.config import Message, load_file, native_verdicts

    out: list[Message] = []
    for i, path in enumerate(args.files):
        doc = loaded[i] if loaded is not None else load_file(path, as_deepspeed_reads=True)
        if isinstance(doc.data, dict) and doc.kind is not None:
            out += native_verdicts(doc.kind, doc.data, python=args.python, world_size=args.world_size, doc=doc)
        elif doc.text:
            kind = doc.kind or ("deepspeed" if doc.format == "json" else "accelerate")
            out += native_verdicts(kind, None, python=args.python, world_size=args.world_size, doc=doc,
                                   text=doc.text)
        else:
            tool = "DeepSpeed's and accelerate's" if doc.kind is None else \
                {"deepspeed": "DeepSpeed's", "accelerate": "accelerate's"}[doc.kind]
            out.append(Message("note", "", f"{tool} own checks did not run: the file is empty or cannot be read (see above)",
                               str(path), None, None))
    return out


def _register_fix(config_sub: argparse._SubParsersAction) -> None:
    try:
        from traindeck.backend.cli.config_fix import register_fix
    except ImportError:  # pragma: no cover - without config_fix.py, `config` offers `check` alone
        return
    register_fix(config_sub)


_SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_register_check, _register_fix]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="check or repair accelerate / DeepSpeed config files",
                       description="Check or repair accelerate launch YAML and DeepSpeed JSON configs.")
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])
    config_sub = p.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    for add in _SUBCOMMANDS:
        add(config_sub)

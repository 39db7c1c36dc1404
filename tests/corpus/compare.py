"""traindeck's checker against the real tools' verdicts (verdicts.tsv) on the corpus of real configs.

    .venv/bin/python tests/corpus/compare.py [CORPUS_DIR] [--report DISAGREEMENTS.md]

Each file is checked as `traindeck config check FILE` checks it (validate.check_files, no --world-size, no
--hf-trainer), from the working directory the judge launched it from (the root of a copy of its repository,
judge.repo_trees, or the config's folder where the judge says so), so a deepspeed_config_file resolves as it did
for accelerate. Only the messages located in the file itself count for it (a YAML's
check also checks the JSON it references; those messages belong to the JSON's row).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
# verdicts under which traindeck must not report an error / must report one
FINE = ("accepted", "environment")
REFUSED = ("rejected",)


def _judge():
    spec = importlib.util.spec_from_file_location("traindeck_corpus_judge", HERE / "judge.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


judge = _judge()


def corpus_dir() -> Path | None:
    """TRAINDECK_CORPUS, else ../shared/corpus beside the repository; None when neither holds a manifest."""
    for candidate in (os.environ.get("TRAINDECK_CORPUS"), REPO.parent / "shared" / "corpus"):
        if candidate and (Path(candidate) / "manifest.tsv").is_file():
            return Path(candidate)
    return None


@dataclass
class Outcome:
    row: dict[str, str]
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    kind: str | None = None  # what traindeck took the file for (None: it could not tell)
    # warnings when told the HF Trainer launches it (`--hf-trainer`), for configs the tool judged that way
    hf_trainer_warnings: int | None = None

    @property
    def status(self) -> str:
        verdict = self.row["verdict"]
        if verdict in FINE and self.errors:
            return "wrong-error"
        if verdict in REFUSED and not self.errors:
            return "missed-rejection"
        return "agree"


def check_corpus(corpus: Path, verdicts: list[dict[str, str]] | None = None) -> list[Outcome]:
    from traindeck.backend.config.source import load_file
    from traindeck.backend.config.validate import check_files

    rows = judge.read_manifest(corpus)
    table = {v["relpath"]: v for v in (verdicts or judge.read_table(HERE / "verdicts.tsv"))}
    out = []
    start = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        placed = judge.repo_trees(corpus, rows, Path(tmp))
        try:
            for r in rows:
                file = placed[r["relpath"]]
                outcome = Outcome({**r, **table.get(r["relpath"], {"verdict": "unjudged", "message": ""})})
                # the working directory the judge launched from: the repository root, or the config's folder
                # when its deepspeed_config_file is found only from there
                os.chdir(file.parent if judge.FROM_CONFIG_FOLDER in outcome.row["message"]
                         else judge.repo_root(file, r["path"]))
                messages = [m for m in check_files([str(file)]) if m.file and Path(m.file) == file]
                outcome.kind = load_file(file, as_deepspeed_reads=True).kind  # as config check reads it
                if outcome.row.get("route") == "hf-trainer":
                    outcome.hf_trainer_warnings = sum(
                        m.severity == "warning" and m.file is not None and Path(m.file) == file
                        for m in check_files([str(file)], hf_trainer=True))
                for m in messages:
                    text = f"{m.path or '(document)'}: {m.message}".replace(tmp, "<tmp>")
                    if m.severity != "note":  # a note (who fills "auto") is said once a file, never a warning
                        (outcome.errors if m.severity == "error" else outcome.warnings).append(text)
                out.append(outcome)
        finally:
            os.chdir(start)
    return out


# Why traindeck says what it says, by the message's words: the groups of the disagreement report.
CAUSES = [
    ("syntax (DeepSpeed reads with hjson; HF/accelerate with json)", r"syntax|JSONDecodeError|hjson"),
    ("compile section (DeepSpeed's CompileConfig refuses unknown keys)", r"CompileConfig"),
    ("\"auto\" values", r"\bauto\b"),
    ("SageMaker keys", r"sagemaker|ec2_instance|iam_role|profile|region"),
    ("paths (referenced files)", r"does not exist|not found|no such file|deepspeed_config_file"),
    ("removed / deprecated DeepSpeed features", r"removed|deprecated|no longer"),
    ("unknown key / alias", r"unknown key|not a known|unknown|did you mean"),
    ("batch-size arithmetic", r"batch|gradient_accumulation"),
    ("precision", r"fp16|bf16|bfloat16|mixed_precision|fp8"),
    ("ZeRO / offload", r"zero|offload|stage"),
    ("FSDP", r"fsdp"),
    ("processes / machines", r"num_processes|num_machines|machine|gpu_ids|main_process"),
]


def cause(text: str) -> str:
    for name, pattern in CAUSES:
        if re.search(pattern, text, re.I):
            return name
    return "other"


def report(outcomes: list[Outcome]) -> str:
    n = len(outcomes)
    warnings = sum(len(o.warnings) for o in outcomes)
    by_status = Counter(o.status for o in outcomes)
    verdicts = Counter(o.row["verdict"] for o in outcomes)
    hf = [o for o in outcomes if o.hf_trainer_warnings is not None]
    lines = [
        "# traindeck config check vs the real tools on the corpus",
        "",
        f"{n} real configs ({sum(o.row['kind'] == 'deepspeed' for o in outcomes)} DeepSpeed JSON, "
        f"{sum(o.row['kind'] == 'accelerate' for o in outcomes)} accelerate YAML). Tool verdicts: "
        + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())) + ".",
        f"traindeck: {by_status['wrong-error']} wrong errors (tool accepts), {by_status['missed-rejection']} missed "
        f"rejections, {warnings} warnings = {warnings / n:.2f} per file (goal: < 1).",
        f"With `--hf-trainer` on the {len(hf)} configs judged through the HF Trainer route: "
        f"{sum(o.hf_trainer_warnings or 0 for o in hf)} warnings on them instead of "
        f"{sum(len(o.warnings) for o in hf)} (whole corpus: "
        f"{(warnings - sum(len(o.warnings) for o in hf) + sum(o.hf_trainer_warnings or 0 for o in hf)) / n:.2f}"
        " per file).",
        "",
        "Produced by `.venv/bin/python tests/corpus/compare.py CORPUS --report FILE` (branch corpus); the verdicts "
        "by tests/corpus/judge.py (see its docstring for what each route asks the tools).",
        "",
    ]
    for status, title in (("wrong-error", "Wrong errors: traindeck errors, the tool accepts"),
                          ("missed-rejection", "Missed rejections: the tool refuses, traindeck reports no error")):
        bad = [o for o in outcomes if o.status == status]
        lines += [f"## {title} ({len(bad)})", ""]
        groups: dict[str, list[Outcome]] = defaultdict(list)
        for o in bad:
            groups[cause(" ".join(o.errors)) if status == "wrong-error" else cause(o.row["message"])].append(o)
        for name, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lines += [f"### {name} ({len(items)})", ""]
            for o in items:
                lines.append(f"- `{o.row['relpath']}` ({o.row['repo']} {o.row['path']} @ {o.row['commit'][:10]}), "
                             f"route {o.row.get('route', '?')}")
                lines.append(f"  - tool: {o.row['verdict']}: {o.row['message'] or '-'}")
                for e in (o.errors or ["(no error)"]):
                    lines.append(f"  - traindeck: {e}")
            lines.append("")
    warned: dict[str, list[tuple[Outcome, str]]] = defaultdict(list)
    for o in outcomes:
        for w in o.warnings:
            warned[cause(w)].append((o, w))
    lines += [f"## Warnings by cause ({warnings} on {n} files)", ""]
    for name, pairs in sorted(warned.items(), key=lambda kv: -len(kv[1])):
        texts = Counter(re.sub(r"\d+(\.\d+)?(e[+-]?\d+)?", "N", w) for _, w in pairs)
        lines += [f"### {name}: {len(pairs)} warnings on {len({id(o) for o, _ in pairs})} files", ""]
        for text, count in texts.most_common(12):
            lines.append(f"- {count} x {text}")
        if len(texts) > 12:
            lines.append(f"- ... {len(texts) - 12} more distinct texts")
        lines.append("")
    lines += ["## Warnings per file", "", "| warnings | file | verdict |", "|---:|---|---|"]
    for o in sorted(outcomes, key=lambda o: -len(o.warnings)):
        if o.warnings:
            lines.append(f"| {len(o.warnings)} | `{o.row['relpath']}` | {o.row['verdict']} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("corpus", nargs="?")
    p.add_argument("--report", help="write the disagreement report (Markdown) here")
    p.add_argument("--notes", help="a Markdown file put after the report's summary (a reader's analysis)")
    args = p.parse_args(argv)
    corpus = Path(args.corpus) if args.corpus else corpus_dir()
    if corpus is None:
        print("compare: no corpus (give CORPUS_DIR or set TRAINDECK_CORPUS)", file=sys.stderr)
        return 2
    outcomes = check_corpus(corpus)
    text = report(outcomes)
    if args.notes:
        head, sep, rest = text.partition("\n## ")
        text = head + Path(args.notes).read_text(encoding="utf-8").rstrip() + "\n\n" + sep.lstrip("\n") + rest
    if args.report:
        Path(args.report).write_text(text, encoding="utf-8")
    else:
        print(text)
    bad = sum(o.status != "agree" for o in outcomes)
    print(f"compare: {len(outcomes)} files, {bad} disagreements", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

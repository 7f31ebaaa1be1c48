"""What a subcommand prints, in one place.

Text (the default): lines on stdout as the command goes, an error as one line on stderr.

`--format json`: stdout carries exactly one JSON document, the plan or the result (`document`);
everything a command says on the way (progress, notes) goes to stderr meanwhile, so
`telemetry ... --format json | jq` always reads one document. An error is `{"error": "..."}` on
stderr, with the same exit code as in text.

A dry run's plan (`dry_run_plan`) has one shape in every command that has no older one of its
own: {"environment", "region", "dry_run": true, <the command's fields>, "would_read": [...],
"would_change": [...]}, where `would_read` names what a run reads from the account (or the
cluster) that the dry run, offline, could not, and `would_change` what a run changes.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

TEXT_WIDTH = 120  # the widest line a command's text prints (help prose is narrower: registry.HELP_WIDTH)
_documents: list[TextIO] = []  # the real stdout while a JSON run's other output goes to stderr


@contextlib.contextmanager
def json_run(enabled: bool) -> Iterator[None]:
    """While a --format json run lasts, what the command prints goes to stderr; `document` writes
    to the stdout it had."""
    if not enabled:
        yield
        return
    _documents.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _documents.pop()


def _finite(value: Any) -> Any:
    """JSON has no infinity or NaN (json.dumps would write bare Infinity): they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def document(body: Any) -> None:
    """The command's one JSON document, on stdout."""
    stream = _documents[-1] if _documents else sys.stdout
    print(json.dumps(_finite(body), indent=2, default=str), file=stream, flush=True)


def error(message: str, *, prog: str = "telemetry", kind: str = "error", json_output: bool = False) -> None:
    """The one line an error gets on stderr: `prog: kind: message`, or {"error": "kind: message"}
    with --format json ("error: " itself left out)."""
    text = message if kind == "error" else f"{kind}: {message}" if message else kind
    if json_output:
        print(json.dumps({"error": text}), file=sys.stderr, flush=True)
    else:
        print(f"{prog}: {kind}: {message}" if message else f"{prog}: {kind}", file=sys.stderr, flush=True)


def wants_json(argv: Sequence[str]) -> bool:
    """--format json on a command line argparse could not read to the end (a misspelt command)."""
    return "--format=json" in argv or any(a == "--format" and b == "json" for a, b in zip(argv, argv[1:]))


def dry_run_plan(args: Any, config: Any, *, summary: Sequence[str], would_read: Sequence[str],
                 would_change: Sequence[str], **fields: Any) -> int:
    """A dry run's plan, offline: the summary, what a run would read from the account that this
    could not, what it would change. Exit 0."""
    if getattr(args, "format", "text") == "json":
        document({"environment": config.name, "region": config.region, "dry_run": True, **fields,
                  "would_read": list(would_read), "would_change": list(would_change)})
        return 0
    lines = [*summary, "a run would first read (this offline dry run could not):"]
    lines += [f"  - {line}" for line in would_read]
    lines.append("and would change:")
    lines += [f"  - {line}" for line in would_change]
    lines.append("dry run: nothing was read from AWS, nothing was changed")
    print("\n".join(lines), flush=True)
    return 0

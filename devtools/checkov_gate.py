"""checkov as a gate over one environment's synthesized templates: `make lint` runs it for every
environment after cfn-lint.

    .venv/checkov/bin/python -m devtools.checkov_gate cdk.out/prod [--max-skips 50]

Exit 0 when no check fails; otherwise one line per failed check (its id, the template and the
resource) and exit 1. Skips are only those written on a resource by its construct
(stacks/compliance.skip_check: `Metadata.checkov.skip`, each with its reason); this runs checkov
with no --skip-check of its own, and refuses a skip without a reason. --max-skips bounds how many
an environment may carry (issue 46: prod's stay at 50 or fewer).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def scan(folder: Path) -> list[dict]:
    """checkov's JSON report over the CloudFormation templates of `folder`, one entry per framework."""
    # Offline: no policy download, no guideline mappings from the vendor's API (BC_SKIP_MAPPING).
    ran = subprocess.run(
        [str(Path(sys.executable).with_name("checkov")), "--directory", str(folder), "--framework", "cloudformation",
         "--output", "json", "--compact", "--skip-download"],
        capture_output=True, text=True, check=False, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )  # fmt: skip
    if ran.returncode not in (0, 1) or not ran.stdout.strip():  # 1: checks failed
        raise SystemExit(f"checkov could not scan {folder}: {(ran.stderr or ran.stdout).strip()[-500:]}")
    report = json.loads(ran.stdout)
    return report if isinstance(report, list) else [report]


def require_templates(folder: Path, gate: str) -> bool:
    """The synthesis the gates read exists; else one line says how to make it."""
    if sorted(folder.glob("*.template.json")):
        return True
    print(f"{gate}: no templates in {folder}; run make synth first", file=sys.stderr)
    return False


def report(gate: str, problems: list[str], summary: str) -> int:
    """One line per problem on stderr, the summary on stdout; exit status 1 when any."""
    for line in problems:
        print(f"{gate}: {line}", file=sys.stderr)
    print(summary)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="checkov over one environment's templates, as a gate")
    parser.add_argument("folder", type=Path, help="the synthesis, e.g. cdk.out/prod")
    parser.add_argument("--max-skips", type=int, default=None, help="fail when more checks than this are skipped")
    args = parser.parse_args(argv)
    if not require_templates(args.folder, "checkov gate"):
        return 2
    failed, skipped, passed = [], [], 0
    for scanned in scan(args.folder):
        results = scanned.get("results", {})
        passed += scanned.get("summary", {}).get("passed", 0)
        failed += results.get("failed_checks", [])
        skipped += results.get("skipped_checks", [])
    problems = [f"{f['check_id']} {Path(f['file_path']).name} {f['resource']}: {f['check_name']}" for f in failed]
    problems += [f"{s['check_id']} {Path(s['file_path']).name} {s['resource']}: skipped without a reason"
                 for s in skipped if len(str(s.get("check_result", {}).get("suppress_comment", "")).split()) < 6]  # fmt: skip
    if args.max_skips is not None and len(skipped) > args.max_skips:
        problems.append(f"{len(skipped)} checks skipped, more than the {args.max_skips} allowed")
    return report("checkov gate", problems,
                  f"checkov {args.folder}: {passed} passed, {len(failed)} failed, {len(skipped)} skipped (each on its resource)")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())

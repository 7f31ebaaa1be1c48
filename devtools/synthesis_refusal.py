"""What synthesis says of an environment of cdk.json with some of its keys changed, without
changing cdk.json or synthesizing: the one line app.py stops with when the configuration is
refused (a key, a value, the node lifecycle's timing against AWS's limits) or the environment
cannot hold its declared workload (stacks/sizing.py), or that it is accepted. The manual's
example refusals are written by this (make docs).

Not checked here: the placeholders and unpinned downloads that `make deploy` and a production
synthesis refuse before this (stacks/placeholders.py).

  python -m devtools.synthesis_refusal --env dev --set service_fabric.lifecycle_heartbeat_seconds=600
  python -m devtools.synthesis_refusal --env prod --set msk.tiered_storage=null --set msk.ebs_volume_gib=1000

Exit 0 accepted, 1 refused (the line on stdout, as synthesis words it on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as `python devtools/synthesis_refusal.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stacks.config import ConfigError, load_environment, read_environments  # noqa: E402
from stacks.sizing import assess_environment  # noqa: E402


def changed(environment: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """`environment` with each KEY.PATH=JSON of `settings` set (null removes the key)."""
    result = copy.deepcopy(environment)
    for setting in settings:
        key, separator, text = setting.partition("=")
        if not separator:
            raise ValueError(f"--set {setting}: expected KEY.PATH=VALUE")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text  # a bare word is a string
        *parents, last = key.split(".")
        node = result
        for name in parents:
            node = node.setdefault(name, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return result


def refusal(environments: dict[str, Any], name: str, settings: list[str]) -> str | None:
    """The line synthesis would stop with (app.py prints it after "error: "), or None."""
    if name in environments:
        environments = {**environments, name: changed(environments[name], settings)}
    try:
        config = load_environment(environments, name)
    except ConfigError as error:
        return str(error)
    refused = assess_environment(config).refusal()
    if refused:  # worded as stacks/platform.py's build_platform words it
        return (f"environment '{name}' cannot hold its declared workload: {refused} "
                f"(telemetry capacity --env {name} shows every constraint)")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.synthesis_refusal", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="examples:\n  python -m devtools.synthesis_refusal --env dev --set "
                                            "msk.broker_count=4\n  python -m devtools.synthesis_refusal --env qa")
    parser.add_argument("--env", required=True, help="an environment of cdk.json (or any name, to see it refused)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=JSON",
                        help="a key of the environment changed for this check (null removes it); repeatable")
    args = parser.parse_args(argv)
    try:
        line = refusal(read_environments(), args.env, args.set)
    except (ValueError, ConfigError) as error:
        print(f"synthesis_refusal: error: {error}", file=sys.stderr)
        return 2
    if line is None:
        print(f"environment '{args.env}': accepted, and it holds its declared workload")
        return 0
    print(f"error: {line}")
    return 1


if __name__ == "__main__":
    sys.exit(main())

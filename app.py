#!/usr/bin/env python3
"""Entry point: `cdk synth|deploy -c env=NAME` builds one environment of the telemetry platform."""

import os
import sys

from stacks.config import ConfigError, load_environment
from stacks.placeholders import synthesis_refusals
from stacks.platform import build_platform, create_app

DEFAULT_ENVIRONMENT = "dev"
# How the CDK reports an asset whose local bundling raised; our bundlers word the cause last
# (stacks/constructs/flink_jar.py, lifecycle_functions.py).
BUNDLING_FAILED = "Failed to bundle asset"


def main() -> None:
    app = create_app()
    name = app.node.try_get_context("env") or DEFAULT_ENVIRONMENT
    try:
        config = load_environment(app.node.try_get_context("environments"), name)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    unpinned = synthesis_refusals(config)  # also what preflight and the dry run list
    if unpinned:
        print(f"error: {unpinned[0]}", file=sys.stderr)
        sys.exit(2)
    try:
        build_platform(app, config)  # asset bundling (pip, Maven) runs here
        app.synth()
    except ConfigError as error:  # the environment cannot hold its declared workload
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as error:
        if BUNDLING_FAILED in str(error):
            asset = str(error).split(BUNDLING_FAILED, 1)[1].split(",", 1)[0].strip()
            cause = str(error).rsplit("RuntimeError: ", 1)[-1].strip()
            print(f"error: building asset {asset}: {cause}", file=sys.stderr)
            sys.exit(1)
        if "ValidationFailed" not in str(error):
            raise
        # cdk-nag has printed every open finding above; the traceback would only bury them.
        print(f"error: compliance gate: open cdk-nag findings in environment '{name}' "
              f"(listed above and in {os.path.relpath(app.outdir)}/validation-report.json)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

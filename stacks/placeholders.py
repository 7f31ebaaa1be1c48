"""The values cdk.json ships with that nobody chose for their own account: the example account ids,
example.com alarm addresses and prod's placeholder management range. A dry run plans with them
and says so; preflight and deploy refuse them, naming the key to edit, before any AWS call.

A production environment's download digest, shipped unpinned, is refused later, by the synthesis
(app.py): refused_settings() is every setting a real run refuses, from the lists both refusals
use, for the dry run to list and preflight to block on.
"""

from __future__ import annotations

import sys

from stacks.config import EnvironmentConfig

SHIPPED_ACCOUNTS = frozenset({"111111111111", "222222222222", "333333333333"})
# RFC 2606's example domains: no address there reaches anyone.
EXAMPLE_DOMAINS = ("example.com", "example.org", "example.net")
SHIPPED_MANAGEMENT_CIDRS = frozenset({"10.250.0.0/24"})


def placeholders(config: EnvironmentConfig) -> list[str]:
    """One phrase per shipped placeholder the environment still holds: the key and its value."""
    found = []
    prefix = f"environments.{config.name}"
    if config.account in SHIPPED_ACCOUNTS:
        found.append(f"{prefix}.account is the example {config.account}: your account id")
    for address in config.monitoring.alarm_emails:
        if address.rsplit("@", 1)[-1].lower() in EXAMPLE_DOMAINS:
            found.append(f"{prefix}.monitoring.alarm_emails has the example {address}: who is paged")
    for cidr in config.service_fabric.management_cidrs:
        if cidr in SHIPPED_MANAGEMENT_CIDRS:
            found.append(f"{prefix}.service_fabric.management_cidrs has the placeholder {cidr}: your agents' and "
                         "offices' ranges")
    return found


def synthesis_refusals(config: EnvironmentConfig) -> list[str]:
    """What app.py refuses to synthesize, one line each: production nodes install nothing whose hash
    is not pinned (issue 33); other environments may go without, and their nodes log the hash they
    got. So the CDK CLI (make diff|deploy, the deploy step) refuses it too."""
    return config.unpinned_downloads() if config.production else []


def refused_settings(config: EnvironmentConfig) -> list[str]:
    """Every setting of the environment a real deployment refuses: the shipped placeholders, then
    what the synthesis refuses."""
    return placeholders(config) + synthesis_refusals(config)


def refusal(config: EnvironmentConfig) -> str | None:
    """One line naming every placeholder to edit, or None."""
    found = placeholders(config)
    if not found:
        return None
    return f"cdk.json still holds shipped placeholders: {'; '.join(found)} (edit them, then run again)"


def main(argv: list[str]) -> int:
    """`make diff|deploy|destroy ENV=...` first: one line and exit 2 while the environment still holds
    a shipped placeholder, before the CDK CLI makes any AWS call."""
    from stacks.config import ConfigError, load_environment, read_environments

    if len(argv) != 1:
        print("usage: python -m stacks.placeholders ENV", file=sys.stderr)
        return 2
    try:
        line = refusal(load_environment(read_environments(), argv[0]))
    except ConfigError as error:
        line = str(error)
    if line:
        print(f"error: {line}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

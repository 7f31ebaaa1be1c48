"""Pure edits of a standalone ClusterConfig document (as from GetClusterConfiguration).

Membership changes of a standalone cluster are configuration upgrades, checked by the Upgrade
Orchestration Service (UOS) against what it knows (microsoft/service-fabric,
StandaloneSettingsValidator.GetRemovedNodes / ValidateTopologyAsync):
- removing a node: drop it from `nodes` and name it, alone, in the `NodesToBeRemoved`
  parameter of the `Setup` section. Every name there must be a node the UOS still knows, so a
  value left from an earlier removal is never carried on (service-fabric-issues #1469);
- registering a node AddNode.ps1 joined: GetClusterConfiguration already lists it (its `nodes`
  come from the Failover Manager), and the UOS wants exactly that list; the upgrade is the same
  document with a new version and no stale NodesToBeRemoved.
Every upgrade needs a new `clusterConfigurationVersion`, so each edit bumps the last component.

The functions never mutate their input.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

SETUP_SECTION = "Setup"
NODES_TO_BE_REMOVED = "NodesToBeRemoved"


def bump_version(version: str) -> str:
    """'1.0.0' -> '1.0.1'; '2.1' -> '2.1.1'; '7' -> '7.0.1'."""
    parts = version.strip().split(".") if version.strip() else ["1", "0", "0"]
    if not all(part.isdigit() for part in parts):
        raise ValueError(f"clusterConfigurationVersion {version!r} is not dotted numbers")
    while len(parts) < 3:
        parts.append("0")
    parts[-1] = str(int(parts[-1]) + 1)
    return ".".join(parts)


def node_names(config: Mapping[str, Any]) -> list[str]:
    return [str(node.get("nodeName")) for node in config.get("nodes") or []]


def nodes_to_be_removed(config: Mapping[str, Any]) -> list[str]:
    parameter = _find_parameter(config, SETUP_SECTION, NODES_TO_BE_REMOVED)
    return _split_names(parameter.get("value", "")) if parameter else []


def for_removal(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The target of the upgrade that removes `name`: out of `nodes`, alone in
    NodesToBeRemoved, version bumped. Raises ValueError when `nodes` does not list it."""
    if not name:
        raise ValueError("node name must not be empty")
    result = copy.deepcopy(dict(config))
    nodes = result.get("nodes") or []
    kept = [node for node in nodes if node.get("nodeName") != name]
    if len(kept) == len(nodes):
        raise ValueError(f"{name} is not in the configuration's nodes")
    result["nodes"] = kept
    _set_nodes_to_be_removed(result, [name])
    return _bumped(result)


def for_registration(config: Mapping[str, Any]) -> dict[str, Any]:
    """The target of the upgrade that registers joined nodes with the UOS: `nodes` as the
    cluster lists them, no NodesToBeRemoved, version bumped."""
    result = copy.deepcopy(dict(config))
    _set_nodes_to_be_removed(result, [])
    return _bumped(result)


def _bumped(config: dict[str, Any]) -> dict[str, Any]:
    config["clusterConfigurationVersion"] = bump_version(
        str(config.get("clusterConfigurationVersion", ""))
    )
    return config


def _split_names(value: str) -> list[str]:
    names: list[str] = []
    for part in str(value).split(","):
        part = part.strip()
        if part and part not in names:
            names.append(part)
    return names


def _same(name: Any, wanted: str) -> bool:
    """Section and parameter names compare case-insensitively, as the UOS compares them."""
    return str(name or "").lower() == wanted.lower()


def _find_parameter(config: Mapping[str, Any], section: str, name: str) -> dict | None:
    for entry in (config.get("properties") or {}).get("fabricSettings") or []:
        if _same(entry.get("name"), section):
            for parameter in entry.get("parameters") or []:
                if _same(parameter.get("name"), name):
                    return parameter
    return None


def _set_nodes_to_be_removed(config: dict[str, Any], names: list[str]) -> None:
    """Set the Setup section's NodesToBeRemoved to `names`; with none, take the parameter out
    (an empty value would be one empty name to the UOS, which it refuses)."""
    properties = config.get("properties") or {}
    settings = properties.get("fabricSettings") or []
    section = next((s for s in settings if _same(s.get("name"), SETUP_SECTION)), None)
    if section is None:
        if not names:
            return
        section = {"name": SETUP_SECTION, "parameters": []}
        config["properties"] = {**properties, "fabricSettings": [*settings, section]}
    parameters = section.setdefault("parameters", [])
    parameter = next((p for p in parameters if _same(p.get("name"), NODES_TO_BE_REMOVED)), None)
    if not names:
        if parameter is not None:
            parameters.remove(parameter)
        return
    if parameter is None:
        parameter = {"name": NODES_TO_BE_REMOVED}
        parameters.append(parameter)
    parameter["value"] = ",".join(names)

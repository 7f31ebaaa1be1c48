"""Pure edits of a standalone ClusterConfig document (as from GetClusterConfiguration).

Membership changes of a standalone cluster are configuration upgrades:
- removing a node: drop it from `nodes` and list it in the `NodesToBeRemoved` parameter
  of the `Setup` section of `properties.fabricSettings` (a comma-separated list);
- adding a node (after AddNode.ps1): put it into `nodes`.
Every upgrade needs a new `clusterConfigurationVersion` ("increase it every time you
upgrade"), so an edit that changes anything bumps the last version component.

The functions never mutate their input and are idempotent: an edit that is already in
place returns a document equal to the input, with the version unchanged, which tells
the caller that no upgrade is needed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SETUP_SECTION = "Setup"
NODES_TO_BE_REMOVED = "NodesToBeRemoved"


@dataclass(frozen=True)
class ConfigNode:
    """One entry of the `nodes` list, as AddNode.ps1 was told about it."""

    node_name: str
    ip_address: str
    node_type: str
    fault_domain: str
    upgrade_domain: str

    def to_json(self) -> dict[str, str]:
        return {
            "nodeName": self.node_name,
            "iPAddress": self.ip_address,
            "nodeTypeRef": self.node_type,
            "faultDomain": self.fault_domain,
            "upgradeDomain": self.upgrade_domain,
        }


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


def remove_node(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Return a copy without `name` in `nodes` and with it in NodesToBeRemoved."""
    if not name:
        raise ValueError("node name must not be empty")
    result = copy.deepcopy(dict(config))
    nodes = result.get("nodes") or []
    kept = [node for node in nodes if node.get("nodeName") != name]
    listed = nodes_to_be_removed(result)
    if len(kept) == len(nodes) and name in listed:
        return result
    result["nodes"] = kept
    _set_nodes_to_be_removed(result, [*listed, name] if name not in listed else listed)
    return _bumped(result)


def add_node(config: Mapping[str, Any], node: ConfigNode | Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy with `node` in `nodes` (replacing a different entry of the same name).

    A name listed in NodesToBeRemoved is taken off that list: the node is wanted again.
    """
    entry = node.to_json() if isinstance(node, ConfigNode) else dict(node)
    name = entry.get("nodeName")
    if not name:
        raise ValueError("node entry needs a nodeName")
    result = copy.deepcopy(dict(config))
    nodes = list(result.get("nodes") or [])
    listed = nodes_to_be_removed(result)
    index = next((i for i, n in enumerate(nodes) if n.get("nodeName") == name), None)
    if index is not None and nodes[index] == entry and name not in listed:
        return result
    if index is None:
        nodes.append(entry)
    else:
        nodes[index] = entry
    result["nodes"] = nodes
    if name in listed:
        _set_nodes_to_be_removed(result, [n for n in listed if n != name])
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


def _find_parameter(config: Mapping[str, Any], section: str, name: str) -> dict | None:
    for entry in (config.get("properties") or {}).get("fabricSettings") or []:
        if entry.get("name") == section:
            for parameter in entry.get("parameters") or []:
                if parameter.get("name") == name:
                    return parameter
    return None


def _set_nodes_to_be_removed(config: dict[str, Any], names: list[str]) -> None:
    settings = config.setdefault("properties", {}).setdefault("fabricSettings", [])
    section = next((s for s in settings if s.get("name") == SETUP_SECTION), None)
    if section is None:
        section = {"name": SETUP_SECTION, "parameters": []}
        settings.append(section)
    parameters = section.setdefault("parameters", [])
    parameter = next((p for p in parameters if p.get("name") == NODES_TO_BE_REMOVED), None)
    if not names:
        if parameter is not None:
            parameters.remove(parameter)
        return
    if parameter is None:
        parameter = {"name": NODES_TO_BE_REMOVED}
        parameters.append(parameter)
    parameter["value"] = ",".join(names)

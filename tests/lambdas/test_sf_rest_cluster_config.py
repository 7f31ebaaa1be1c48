"""Pure edits of the standalone cluster configuration: the targets of membership upgrades."""

from __future__ import annotations

import copy

import pytest
from sf_rest.cluster_config import (
    bump_version,
    for_registration,
    for_removal,
    node_names,
    nodes_to_be_removed,
)


def _node(name, ip, node_type="Scaling", fd="fd:/aws/az0", ud="UD0"):
    return {
        "nodeName": name,
        "iPAddress": ip,
        "nodeTypeRef": node_type,
        "faultDomain": fd,
        "upgradeDomain": ud,
    }


def _config(*setup_parameters, **extra):
    """A configuration as GetClusterConfiguration answers it; `setup_parameters` are added to
    the Setup section after FabricDataRoot."""
    config = {
        "name": "c",
        "clusterConfigurationVersion": "1.0.0",
        "apiVersion": "10-2017",
        "nodes": [
            _node("seed-0", "10.0.1.10", "Primary"),
            _node("scale-0", "10.0.2.10", fd="fd:/aws/az1", ud="UD1"),
            _node("scale-1", "10.0.2.11", fd="fd:/aws/az2", ud="UD2"),
        ],
        "properties": {
            "fabricSettings": [
                {"name": "Security", "parameters": []},
                {
                    "name": "Setup",
                    "parameters": [
                        {"name": "FabricDataRoot", "value": "D:\\SF"},
                        *setup_parameters,
                    ],
                },
            ]
        },
    }
    config.update(extra)
    return config


def _sections(config, name):
    return [
        s for s in config["properties"]["fabricSettings"] if s["name"].lower() == name.lower()
    ]


def _setup_parameters(config):
    [setup] = _sections(config, "Setup")
    return setup["parameters"]


def _removal_parameters(config):
    return [p for p in _setup_parameters(config) if p["name"].lower() == "nodestoberemoved"]


# -- for_removal ----------------------------------------------------------------------------


def test_for_removal_drops_the_node_and_names_it_alone_for_removal():
    original = _config()
    before = copy.deepcopy(original)

    target = for_removal(original, "scale-0")

    assert node_names(target) == ["seed-0", "scale-1"]
    assert target["nodes"] == [original["nodes"][0], original["nodes"][2]]  # others untouched
    assert _setup_parameters(target) == [
        {"name": "FabricDataRoot", "value": "D:\\SF"},
        {"name": "NodesToBeRemoved", "value": "scale-0"},
    ]
    assert target["clusterConfigurationVersion"] == "1.0.1"
    assert _sections(target, "Security") == _sections(original, "Security")
    unchanged = ("name", "apiVersion")
    assert {k: target[k] for k in unchanged} == {k: original[k] for k in unchanged}
    assert original == before  # the input is not mutated


@pytest.mark.parametrize(
    "stale",
    [
        "old-1",  # echoed by GetClusterConfiguration from the last removal
        "old-1, old-2,",
        "scale-0,old-1",
        "",  # an empty value, which the UOS would read as one empty name
    ],
)
def test_for_removal_replaces_a_stale_nodes_to_be_removed(stale):
    original = _config({"name": "NodesToBeRemoved", "value": stale})
    before = copy.deepcopy(original)

    target = for_removal(original, "scale-0")

    assert _removal_parameters(target) == [{"name": "NodesToBeRemoved", "value": "scale-0"}]
    assert nodes_to_be_removed(target) == ["scale-0"]
    assert original == before


def test_for_removal_matches_setup_and_parameter_names_case_insensitively():
    original = _config()
    setup = _sections(original, "Setup")[0]
    setup["name"] = "SETUP"
    setup["parameters"].append({"name": "nodestoberemoved", "value": "old-1"})

    target = for_removal(original, "scale-1")

    [section] = _sections(target, "setup")  # no second Setup section
    assert section["name"] == "SETUP"
    assert section["parameters"] == [
        {"name": "FabricDataRoot", "value": "D:\\SF"},
        {"name": "nodestoberemoved", "value": "scale-1"},  # the same parameter, rewritten
    ]
    assert nodes_to_be_removed(target) == ["scale-1"]


@pytest.mark.parametrize(
    "properties",
    [None, {}, {"fabricSettings": []}, {"fabricSettings": [{"name": "Other", "parameters": []}]}],
    ids=["no-properties", "empty-properties", "no-sections", "no-setup"],
)
def test_for_removal_creates_the_setup_section_when_missing(properties):
    config = _config()
    if properties is None:
        del config["properties"]
    else:
        config["properties"] = properties

    target = for_removal(config, "scale-0")

    assert _setup_parameters(target) == [{"name": "NodesToBeRemoved", "value": "scale-0"}]
    assert len(_sections(target, "Setup")) == 1


def test_for_removal_refuses_a_node_the_configuration_does_not_list():
    config = _config({"name": "NodesToBeRemoved", "value": "ghost"})
    before = copy.deepcopy(config)

    with pytest.raises(ValueError, match="ghost"):
        for_removal(config, "ghost")  # named in NodesToBeRemoved, but not in nodes
    with pytest.raises(ValueError):
        for_removal(for_removal(config, "scale-0"), "scale-0")  # already out
    with pytest.raises(ValueError):
        for_removal(config, "")
    assert config == before


def test_for_removal_of_a_removal_target_names_only_the_new_node():
    first = for_removal(_config(), "scale-0")

    second = for_removal(first, "scale-1")

    assert node_names(second) == ["seed-0"]
    assert nodes_to_be_removed(second) == ["scale-1"]
    assert second["clusterConfigurationVersion"] == "1.0.2"


# -- for_registration -----------------------------------------------------------------------


def test_for_registration_keeps_the_nodes_and_bumps_the_version():
    joined = _node("scale-7", "10.0.2.17", fd="fd:/aws/az2", ud="UD2")
    original = _config()
    original["nodes"].append(joined)  # listed by the FM after AddNode.ps1
    before = copy.deepcopy(original)

    target = for_registration(original)

    assert target["nodes"] == original["nodes"]
    assert target["clusterConfigurationVersion"] == "1.0.1"
    assert target["properties"] == original["properties"]  # nothing to take out here
    assert {k: v for k, v in target.items() if k != "clusterConfigurationVersion"} == {
        k: v for k, v in original.items() if k != "clusterConfigurationVersion"
    }
    assert original == before


@pytest.mark.parametrize("value", ["scale-9", "scale-9,scale-8", ""])
@pytest.mark.parametrize(
    ("section", "parameter"), [("Setup", "NodesToBeRemoved"), ("setup", "NODESTOBEREMOVED")]
)
def test_for_registration_removes_the_nodes_to_be_removed_parameter_entirely(
    value, section, parameter
):
    # Not left as "": the UOS splits an empty value into one empty name, which no node it
    # knows has, and refuses the upgrade.
    original = _config({"name": parameter, "value": value})
    _sections(original, "Setup")[0]["name"] = section
    before = copy.deepcopy(original)

    target = for_registration(original)

    assert _removal_parameters(target) == []
    assert _setup_parameters(target) == [{"name": "FabricDataRoot", "value": "D:\\SF"}]
    assert nodes_to_be_removed(target) == []
    assert target["nodes"] == original["nodes"]
    assert original == before


@pytest.mark.parametrize(
    "properties",
    [{"fabricSettings": []}, {"fabricSettings": [{"name": "Other", "parameters": []}]}],
    ids=["no-sections", "no-setup"],
)
def test_for_registration_creates_no_setup_section(properties):
    config = _config()
    config["properties"] = copy.deepcopy(properties)

    target = for_registration(config)

    assert target["properties"] == properties
    assert target["clusterConfigurationVersion"] == "1.0.1"


def test_for_registration_without_properties_adds_no_setup_section():
    config = _config()
    del config["properties"]

    target = for_registration(config)

    sections = (target.get("properties") or {}).get("fabricSettings") or []
    assert [s for s in sections if s.get("name", "").lower() == "setup"] == []
    assert target["clusterConfigurationVersion"] == "1.0.1"


def test_for_registration_after_a_removal_drops_the_echoed_name():
    echoed = for_removal(_config(), "scale-0")  # what the config echoes after that upgrade

    target = for_registration(echoed)

    assert node_names(target) == ["seed-0", "scale-1"]
    assert _removal_parameters(target) == []
    assert target["clusterConfigurationVersion"] == "1.0.2"


# -- bump_version, nodes_to_be_removed --------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "bumped"),
    [
        ("1.0.0", "1.0.1"),
        ("1.0.9", "1.0.10"),
        ("2.1", "2.1.1"),
        ("7", "7.0.1"),
        ("1.2.3.4", "1.2.3.5"),
        (" 1.0.0 ", "1.0.1"),
        ("", "1.0.1"),
    ],
)
def test_bump_version(version, bumped):
    assert bump_version(version) == bumped


@pytest.mark.parametrize("version", ["1.0.0-beta", "1..0", "v1", "1.0.x"])
def test_bump_version_refuses_what_it_cannot_order(version):
    with pytest.raises(ValueError):
        bump_version(version)


@pytest.mark.parametrize(
    ("parameters", "names"),
    [
        ([], []),
        ([{"name": "NodesToBeRemoved", "value": "scale-0"}], ["scale-0"]),
        ([{"name": "NodesToBeRemoved", "value": " a, b ,,a,"}], ["a", "b"]),
        ([{"name": "nodesToBeRemoved", "value": "a"}], ["a"]),
        ([{"name": "NodesToBeRemoved", "value": ""}], []),
        ([{"name": "NodesToBeRemoved"}], []),
    ],
)
def test_nodes_to_be_removed_reads_the_setup_parameter(parameters, names):
    assert nodes_to_be_removed(_config(*parameters)) == names


def test_nodes_to_be_removed_looks_only_in_the_setup_section():
    config = _config()
    config["properties"]["fabricSettings"][0]["parameters"].append(
        {"name": "NodesToBeRemoved", "value": "elsewhere"}
    )  # in the Security section

    assert nodes_to_be_removed(config) == []
    assert nodes_to_be_removed({"nodes": []}) == []
    assert nodes_to_be_removed({"properties": None}) == []

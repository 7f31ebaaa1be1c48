"""Pure edits of the standalone cluster configuration."""

from __future__ import annotations

import copy

import pytest
from sf_rest.cluster_config import (
    ConfigNode,
    add_node,
    bump_version,
    node_names,
    nodes_to_be_removed,
    remove_node,
)


def _config(**extra):
    config = {
        "name": "c",
        "clusterConfigurationVersion": "1.0.0",
        "apiVersion": "10-2017",
        "nodes": [
            {
                "nodeName": "seed-0",
                "iPAddress": "10.0.1.10",
                "nodeTypeRef": "Primary",
                "faultDomain": "fd:/aws/az0",
                "upgradeDomain": "UD0",
            },
            {
                "nodeName": "scale-0",
                "iPAddress": "10.0.2.10",
                "nodeTypeRef": "Scaling",
                "faultDomain": "fd:/aws/az1",
                "upgradeDomain": "UD1",
            },
        ],
        "properties": {
            "fabricSettings": [
                {"name": "Security", "parameters": []},
                {"name": "Setup", "parameters": [{"name": "FabricDataRoot", "value": "D:\\SF"}]},
            ]
        },
    }
    config.update(extra)
    return config


NEW = ConfigNode("scale-7", "10.0.2.17", "Scaling", "fd:/aws/az2", "UD2")


def _setup_parameters(config):
    [setup] = [s for s in config["properties"]["fabricSettings"] if s["name"] == "Setup"]
    return setup["parameters"]


def test_remove_node_drops_it_from_nodes_and_lists_it_for_removal():
    original = _config()
    before = copy.deepcopy(original)

    edited = remove_node(original, "scale-0")

    assert node_names(edited) == ["seed-0"]
    assert nodes_to_be_removed(edited) == ["scale-0"]
    assert _setup_parameters(edited) == [
        {"name": "FabricDataRoot", "value": "D:\\SF"},
        {"name": "NodesToBeRemoved", "value": "scale-0"},
    ]
    assert edited["clusterConfigurationVersion"] == "1.0.1"
    assert original == before  # input untouched


def test_remove_node_is_idempotent():
    once = remove_node(_config(), "scale-0")
    twice = remove_node(once, "scale-0")

    assert twice == once  # same version too: no upgrade needed


def test_remove_node_merges_with_an_existing_list():
    config = _config()
    _setup_parameters(config).append({"name": "NodesToBeRemoved", "value": "old-1, old-2,"})

    edited = remove_node(config, "scale-0")

    assert nodes_to_be_removed(edited) == ["old-1", "old-2", "scale-0"]
    assert [p["name"] for p in _setup_parameters(edited)].count("NodesToBeRemoved") == 1


def test_remove_node_still_in_nodes_but_already_listed_is_finished_off():
    config = _config()
    _setup_parameters(config).append({"name": "NodesToBeRemoved", "value": "scale-0"})

    edited = remove_node(config, "scale-0")

    assert node_names(edited) == ["seed-0"] and nodes_to_be_removed(edited) == ["scale-0"]
    assert edited["clusterConfigurationVersion"] == "1.0.1"


@pytest.mark.parametrize("properties", [None, {}, {"fabricSettings": [{"name": "Other"}]}])
def test_remove_node_creates_the_setup_section_when_missing(properties):
    config = _config()
    if properties is None:
        del config["properties"]
    else:
        config["properties"] = properties

    edited = remove_node(config, "scale-0")

    assert nodes_to_be_removed(edited) == ["scale-0"]


def test_removing_an_unknown_node_still_lists_it():
    edited = remove_node(_config(), "ghost")

    assert node_names(edited) == ["seed-0", "scale-0"]
    assert nodes_to_be_removed(edited) == ["ghost"]
    assert edited["clusterConfigurationVersion"] == "1.0.1"


def test_add_node_appends_it_and_bumps_the_version():
    edited = add_node(_config(), NEW)

    assert node_names(edited) == ["seed-0", "scale-0", "scale-7"]
    assert edited["nodes"][-1] == {
        "nodeName": "scale-7",
        "iPAddress": "10.0.2.17",
        "nodeTypeRef": "Scaling",
        "faultDomain": "fd:/aws/az2",
        "upgradeDomain": "UD2",
    }
    assert edited["clusterConfigurationVersion"] == "1.0.1"


def test_add_node_is_idempotent():
    once = add_node(_config(), NEW)

    assert add_node(once, NEW) == once
    assert add_node(once, NEW.to_json()) == once


def test_add_node_replaces_a_different_entry_of_the_same_name():
    moved = ConfigNode("scale-0", "10.0.2.99", "Scaling", "fd:/aws/az1", "UD1")

    edited = add_node(_config(), moved)

    assert node_names(edited) == ["seed-0", "scale-0"]
    assert edited["nodes"][1]["iPAddress"] == "10.0.2.99"


def test_add_node_takes_a_name_off_the_removal_list():
    removed = remove_node(_config(), "scale-0")
    _setup_parameters(removed)[-1]["value"] = "old-1,scale-0"

    readded = add_node(removed, {**_config()["nodes"][1]})
    alone = add_node(remove_node(_config(), "scale-0"), _config()["nodes"][1])

    assert nodes_to_be_removed(readded) == ["old-1"]
    assert "NodesToBeRemoved" not in [p["name"] for p in _setup_parameters(alone)]
    assert alone["clusterConfigurationVersion"] == "1.0.2"


@pytest.mark.parametrize(
    ("version", "bumped"),
    [
        ("1.0.0", "1.0.1"),
        ("1.0.9", "1.0.10"),
        ("2.1", "2.1.1"),
        ("7", "7.0.1"),
        ("1.2.3.4", "1.2.3.5"),
        ("", "1.0.1"),
    ],
)
def test_bump_version(version, bumped):
    assert bump_version(version) == bumped


def test_bump_version_refuses_what_it_cannot_order():
    with pytest.raises(ValueError):
        bump_version("1.0.0-beta")


def test_edits_need_a_node_name():
    with pytest.raises(ValueError):
        remove_node(_config(), "")
    with pytest.raises(ValueError):
        add_node(_config(), {"iPAddress": "10.0.0.1"})

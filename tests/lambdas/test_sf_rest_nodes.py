"""Node endpoints of the Service Fabric REST client against the HTTPS emulator."""

from __future__ import annotations

import pytest
from sf_rest import (
    DeactivationIntent,
    DeactivationStatus,
    InvalidArgumentError,
    NodeInfo,
    NodeIsUpError,
    NodeNotFoundError,
    NodeStatus,
)

from tests.sf_emulator import DOCUMENTED_INTENTS

pytestmark = pytest.mark.integration  # starts the HTTP(S) emulator


def test_node_info_is_typed(sf_client):
    node = sf_client.get_node_info("seed-1")

    assert node == NodeInfo(
        name="seed-1",
        ip_address_or_fqdn="10.0.1.11",
        node_type="PrimaryNodeType",
        status=NodeStatus.UP,
        is_seed_node=True,
        deactivation_status=DeactivationStatus.NONE,
        deactivation_intent="Invalid",
        fault_domain="fd:/aws/az1",
        upgrade_domain="UD1",
        health_state="Ok",
        node_down_time_in_seconds=0,
    )


def test_unknown_node_is_none_from_a_204(sf_client, sf_emulator):
    assert sf_client.get_node_info("never-joined") is None

    [request] = sf_emulator.requests_to("GET", "/Nodes/never-joined")
    assert request.status == 204
    assert request.query["api-version"] == "6.0"


def test_every_call_sends_api_version_and_server_timeout(sf_client, sf_emulator):
    sf_client.get_node_info("seed-0")
    sf_client.get_node_info_list()

    [one, listing] = sf_emulator.requests
    assert (one.query["api-version"], one.query["timeout"]) == ("6.0", "1")
    assert (listing.query["api-version"], listing.query["timeout"]) == ("6.3", "1")


def test_node_list_follows_continuation_tokens_across_pages(sf_cluster, sf_client, sf_emulator):
    sf_cluster.page_size = 2
    for i in range(2, 4):
        sf_cluster.add_node(f"scale-{i}")

    nodes = sf_client.get_node_info_list()

    assert [n.name for n in nodes] == [
        "scale-0",
        "scale-1",
        "scale-2",
        "scale-3",
        "seed-0",
        "seed-1",
        "seed-2",
    ]
    pages = sf_emulator.requests_to("GET", "/Nodes")
    assert [p.query.get("ContinuationToken") for p in pages] == [
        None,
        "scale-1",
        "scale-3",
        "seed-1",
    ]


def test_node_list_passes_page_size_and_status_filter(sf_cluster, sf_client, sf_emulator):
    sf_cluster.add_node("scale-2")  # joined by AddNode.ps1 only, so no manifest row stands in
    sf_cluster.stop_host("scale-2")
    sf_client.remove_node_state("scale-2")  # now Removed

    default = sf_client.get_node_info_list(max_results=1)
    everything = sf_client.get_node_info_list(status_filter="all")

    assert [n.name for n in default] == ["scale-0", "scale-1", "seed-0", "seed-1", "seed-2"]
    assert {n.name: n.status for n in everything}["scale-2"] == NodeStatus.REMOVED
    pages = sf_emulator.requests_to("GET", "/Nodes")
    assert [p.query.get("MaxResults") for p in pages] == ["1"] * 5 + [None]
    assert [p.query.get("NodeStatusFilter") for p in pages] == [None] * 5 + ["all"]


def test_deactivate_moves_through_disabling_to_disabled(sf_client, sf_emulator):
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)

    first = sf_client.get_node_info("scale-0")
    second = sf_client.get_node_info("scale-0")

    assert (first.status, first.deactivation_status) == ("Disabling", "SafetyCheckInProgress")
    assert not first.is_deactivated
    assert (second.status, second.deactivation_status) == ("Disabled", "Completed")
    assert second.deactivation_intent == "RemoveNode" and second.is_deactivated
    [post] = sf_emulator.requests_to("POST", r"/Nodes/scale-0/\$/Deactivate")
    assert post.body == {"DeactivationIntent": "RemoveNode"}


def test_repeated_deactivate_is_harmless(sf_client):
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)
    sf_client.get_node_info("scale-0")
    sf_client.get_node_info("scale-0")
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)

    assert sf_client.get_node_info("scale-0").is_deactivated


def test_runtime_refusing_remove_node_intent_names_the_code(sf_cluster, sf_client):
    sf_cluster.accepted_intents = DOCUMENTED_INTENTS

    with pytest.raises(InvalidArgumentError) as refused:
        sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_DATA)

    assert refused.value.code == "E_INVALIDARG" and refused.value.status == 400
    assert sf_client.get_node_info("scale-0").deactivation_intent == "RemoveData"


def test_activate_cancels_a_deactivation(sf_client):
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)
    sf_client.activate_node("scale-0")

    node = sf_client.get_node_info("scale-0")
    assert (node.status, node.deactivation_status) == ("Up", "None")


def test_remove_node_state_of_an_unknown_node_raises_node_not_found_once(sf_client, sf_emulator):
    with pytest.raises(NodeNotFoundError) as missing:
        sf_client.remove_node_state("ghost")

    assert (missing.value.code, missing.value.status) == ("FABRIC_E_NODE_NOT_FOUND", 404)
    assert len(sf_emulator.requests) == 1  # a definite 404 is not retried


def test_deactivate_and_activate_of_an_unknown_node_succeed(sf_client, sf_emulator):
    # The FM makes an entry for a name it does not know (Unknown, hidden from the default
    # list) rather than refusing; Activate of an unknown name is a no-op.
    sf_client.deactivate_node("ghost", DeactivationIntent.REMOVE_NODE)
    sf_client.activate_node("never-joined")

    assert sf_client.get_node_info("ghost") is None
    assert sf_client.get_node_info("never-joined") is None
    assert [r.status for r in sf_emulator.requests if r.method == "POST"] == [200, 200]


def test_remove_node_state_of_a_live_node_is_refused_without_retry(sf_client, sf_emulator):
    with pytest.raises(NodeIsUpError) as refused:
        sf_client.remove_node_state("scale-0")

    # FABRIC_E_NODE_IS_UP is HTTP 400 from the gateway (HttpUtil ErrorCodeToHttpStatus); final.
    assert (refused.value.code, refused.value.status) == ("FABRIC_E_NODE_IS_UP", 400)
    assert "FABRIC_E_NODE_IS_UP" in str(refused.value)
    assert len(sf_emulator.requests_to("POST", r"/Nodes/scale-0/\$/RemoveNodeState")) == 1


def test_remove_node_state_after_the_host_stops(sf_cluster, sf_client):
    sf_cluster.stop_host("scale-0")
    assert sf_client.get_node_info("scale-0").status == NodeStatus.DOWN

    sf_client.remove_node_state("scale-0")
    sf_client.remove_node_state("scale-0")  # repeating it is harmless

    everything = {n.name: n.status for n in sf_client.get_node_info_list(status_filter="all")}
    assert everything["scale-0"] == NodeStatus.REMOVED
    # The cluster manifest still lists the node (no configuration upgrade removed it), so the
    # node query shows a row with NodeStatus Invalid instead of nothing.
    assert sf_client.get_node_info("scale-0").status == NodeStatus.INVALID

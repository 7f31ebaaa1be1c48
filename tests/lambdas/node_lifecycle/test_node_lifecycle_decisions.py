"""Pure decisions: the zombie reaper, where a node stands in a drain, and the wait loop."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from node_lifecycle import (
    InstanceInfo,
    NodeStage,
    WaitStatus,
    WaitTimedOut,
    decide_reaping,
    instance_states_by_node,
    node_stage,
    wait_until_done,
)
from node_lifecycle.results import Deactivation, Outcome
from sf_rest import NodeInfo

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
TEN_MINUTES = timedelta(minutes=10)


def node(
    name: str,
    status: str = "Up",
    *,
    seed: bool = False,
    down_seconds: int = 0,
    node_type: str = "ScalingNodeType",
    ip: str = "",
    intent: str = "Invalid",
    deactivation: str = "None",
    **extra,
) -> NodeInfo:
    return NodeInfo.from_json(
        {
            "Name": name,
            "NodeStatus": status,
            "IsSeedNode": seed,
            "Type": node_type,
            "IpAddressOrFQDN": ip,
            "NodeDownTimeInSeconds": str(down_seconds),
            "NodeDeactivationInfo": {
                "NodeDeactivationIntent": intent,
                "NodeDeactivationStatus": deactivation,
            },
            **extra,
        }
    )


# -- the reaper ----------------------------------------------------------------------------


def test_a_seed_patching_restarts_is_not_counted_down_until_the_node_time_passes():
    """Patching deactivates a seed with intent Restart before its reboot: the seed alarm waits
    for the patch run's time for a node (the run alarms itself if the seed does not come back)."""
    restarting = node("seed-1", "Down", seed=True, down_seconds=600, node_type="PrimaryNodeType", intent="Restart")
    stuck = node("seed-2", "Down", seed=True, down_seconds=4000, node_type="PrimaryNodeType", intent="Restart")
    crashed = node("seed-0", "Down", seed=True, down_seconds=60, node_type="PrimaryNodeType")

    decision = decide_reaping([restarting, stuck, crashed], {}, now=NOW, down_for=TEN_MINUTES,
                              restart_for=timedelta(hours=1))  # fmt: skip

    assert decision.seed_nodes_down == ("seed-0", "seed-2")


def test_the_reaper_removes_only_long_down_non_seed_nodes_whose_instance_is_gone():
    nodes = [
        node("scale-0", "Down", down_seconds=3600),  # instance terminated: a zombie
        node("scale-1", "Down", down_seconds=3600),  # instance unknown to EC2: a zombie
        node("scale-2", "Down", down_seconds=3600),  # instance stopped, may come back
        node("scale-3", "Down", down_seconds=120),  # not down long enough
        node("scale-4", "Up"),
        node("scale-5", "Removed"),
        node("seed-0", "Down", seed=True, down_seconds=3600, node_type="PrimaryNodeType"),
    ]
    states = {"scale-0": "terminated", "scale-2": "stopped", "scale-3": "terminated"}

    decision = decide_reaping(nodes, states, now=NOW, down_for=TEN_MINUTES)

    assert decision.zombies == ("scale-0", "scale-1")
    assert decision.seed_nodes_down == ("seed-0",)
    assert decision.waiting == ("scale-2", "scale-3")
    assert json.loads(json.dumps(decision.to_dict()))["zombie_count"] == 2


def test_the_reaper_leaves_nodes_of_other_types_alone():
    fixed = node("primary-5", "Down", down_seconds=3600, node_type="PrimaryNodeType")

    decision = decide_reaping(
        [fixed], {}, now=NOW, down_for=TEN_MINUTES, node_types={"ScalingNodeType"}
    )

    assert decision.zombies == () and decision.waiting == ()


def test_the_reaper_counts_down_time_from_node_down_at_when_given():
    since = (NOW - timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
    long_down = node("scale-0", "Down", down_seconds=5, NodeDownAt=since)
    never_set = node("scale-1", "Down", down_seconds=900, NodeDownAt="0001-01-01T00:00:00.000Z")

    decision = decide_reaping([long_down, never_set], {}, now=NOW, down_for=TEN_MINUTES)

    assert decision.zombies == ("scale-0", "scale-1")


def test_instances_are_matched_to_nodes_by_tag_then_by_live_address():
    nodes = [node("scale-0", ip="10.0.2.10"), node("scale-1", ip="10.0.2.11")]
    instances = [
        InstanceInfo("i-0", "terminated", "", {"sf:nodename": "scale-0"}),
        InstanceInfo("i-1", "running", "10.0.2.11"),  # untagged, found by address
        InstanceInfo("i-2", "running", "10.0.2.10"),  # reused address: the tag wins
    ]

    assert instance_states_by_node(nodes, instances) == {
        "scale-0": "terminated",
        "scale-1": "running",
    }


# -- drain stages --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "stage"),
    [
        (None, NodeStage.REMOVED),
        (node("n", "Removed"), NodeStage.REMOVED),
        (node("n", "Down"), NodeStage.DOWN),
        (node("n", "Up"), NodeStage.DEACTIVATE),
        (node("n", "Disabled", intent="Pause", deactivation="Completed"), NodeStage.DEACTIVATE),
        (
            node("n", "Disabling", intent="RemoveNode", deactivation="SafetyCheckInProgress"),
            NodeStage.DEACTIVATING,
        ),
        (node("n", "Disabled", intent="RemoveData", deactivation="Completed"), NodeStage.DEACTIVATED),
        (node("n", "Unknown"), NodeStage.UNSETTLED),
    ],
)
def test_a_node_stage_follows_its_status_and_deactivation(info, stage):
    assert node_stage(info) == stage


def test_results_travel_as_json():
    result = Deactivation("scale-0", Outcome.REQUESTED, "RemoveNode")

    assert json.loads(json.dumps(result.to_dict())) == {
        "node_name": "scale-0",
        "outcome": "requested",
        "intent": "RemoveNode",
        "changed": True,
    }


# -- the wait loop (fake_time: tests/lambdas/conftest.py) --------------------------------


def test_the_wait_loop_polls_until_done_and_shows_every_result(fake_time):
    answers = iter(
        [
            WaitStatus(False, "Disabling"),
            WaitStatus(False, "Disabling"),
            WaitStatus(True, "Disabled"),
        ]
    )
    seen = []

    result = wait_until_done(
        lambda: next(answers),
        what="scale-0 to be Disabled",
        timeout_seconds=60,
        interval_seconds=5,
        on_poll=lambda r, elapsed: seen.append((r.status, elapsed)),
        sleep=fake_time.sleep,
        clock=fake_time.clock,
    )

    assert result.status == "Disabled"
    assert seen == [("Disabling", 0), ("Disabling", 5), ("Disabled", 10)]


def test_the_wait_loop_gives_up_naming_what_it_waited_for(fake_time):

    with pytest.raises(WaitTimedOut, match="scale-0 to be Disabled .last: SafetyCheck") as raised:
        wait_until_done(
            lambda: WaitStatus(False, "Disabling", "SafetyCheckInProgress"),
            what="scale-0 to be Disabled",
            timeout_seconds=30,
            interval_seconds=10,
            sleep=fake_time.sleep,
            clock=fake_time.clock,
        )
    assert raised.value.last.status == "Disabling"
    assert fake_time.now == 30  # polls at 0, 10, 20 and 30; the next would be too late

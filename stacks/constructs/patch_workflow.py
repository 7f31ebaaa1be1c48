"""The patch state machine: Windows updates on every node in place, seeds included, one node at a
time (lambdas/node_lifecycle/patching.py holds the steps), and the maintenance window's schedule
that starts it. `telemetry cluster patch` starts it too.

It is built from the lifecycle machinery (stacks/constructs/lifecycle_workflows.py): the same
Lambda Task conventions (TransientError retried, every failure caught), Wait states for every
wait, the membership lock's wait loop, and the worded alarm with its fallback and an undelivered
count. There is no lifecycle action here, so there are no heartbeats and no hold: a failure
leaves the node in its safest state, alarms with what to do, and fails the execution.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.constructs.lifecycle_workflows import (
    Pacing,
    _Steps,
    acknowledge_machine_policy,
    start_target,
    traced_state_machine,
)
from stacks.lifecycle_timing import LAMBDA_TASK_TIMEOUT_SECONDS

# What a scheduled run gets as input (a CLI run names the node, or nothing).
SCHEDULED_INPUT = {"trigger": "schedule"}


class PatchWorkflow(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        function: lambda_.IFunction,
        alarm_topic: sns.ITopic,
        state_machine_name: str,
        pacing: Pacing,
        schedule: str,
        schedule_enabled: bool,
        undelivered_events: sqs.IQueue,
        log_retention_days: int,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        steps = _Steps(self, function, pacing)
        definition = self._definition(steps)
        steps.catch_all(self._failure_path(steps, alarm_topic))
        self.state_machine = traced_state_machine(self, state_machine_name, definition, pacing.timeout,
                                                  log_retention_days, removal_policy)  # fmt: skip
        self.rule = events.Rule(
            self,
            "MaintenanceWindow",
            description=f"The maintenance window: starts {state_machine_name}"
            + ("" if schedule_enabled else " (disabled in this environment: patching.enabled)"),
            schedule=events.Schedule.expression(schedule),
            enabled=schedule_enabled,
            targets=[start_target(self.state_machine, pacing, undelivered_events,
                                  input=events.RuleTargetInput.from_object(SCHEDULED_INPUT))],  # fmt: skip
        )
        acknowledge_machine_policy(self.state_machine, function, "patch")

    def _definition(self, steps: _Steps) -> sfn.IChainable:
        payload = sfn.TaskInput.from_object(
            {"step": "begin", "state": {"event": sfn.JsonPath.object_at("$"), "execution": sfn.JsonPath.string_at("$$.Execution.Name")}}
        )
        begin = steps._lambda_task("Plan the patch run", payload, "$.run", transient=True, timeout_seconds=LAMBDA_TASK_TIMEOUT_SECONDS)
        steps.catchers.append(begin)
        pick = steps.task("Pick the next node", "next_node", "current")

        finish = steps.task("Finish the round", "finish", "finished").next(sfn.Succeed(self, "Patched"))
        done = steps.task("Record the node patched", "node_done", "node_result").next(pick)
        healthy = steps.poll("Wait for cluster health Ok", "poll_health", "healthy", done)
        activate = steps.task("Activate the node", "activate", "activation").next(healthy)
        back = steps.poll("Wait until the node is back after its reboot", "poll_back_up", "back", activate)
        installed = steps.poll("Wait for the install and reboot", "poll_install", "installed", back)
        # Not run again after an error that may have come after SendCommand: a second Install
        # beside the first would run two Windows Update sessions on one machine. The run stops
        # instead (the node activated again) and the next resumes at it.
        install = steps.invoke("Install updates, rebooting if needed", "install", "$.install", transient=False)
        steps.catchers.append(install)
        install.next(installed)
        disabled = steps.poll("Wait until the node is Disabled", "poll_disabled", "disabled", install)
        # A node another operation deactivated after it was picked (a drain held for the operator)
        # is passed over: the lock goes, and the run goes on with the next node.
        skip = steps.task("Pass over a node another operation deactivated", "skip_node", "current").next(pick)
        by_other = sfn.Choice(self, "Deactivated by another operation?")
        by_other.when(sfn.Condition.is_present("$.deactivation.skipped"), skip).otherwise(disabled)
        deactivate = steps.task("Deactivate the node (intent Restart)", "deactivate", "deactivation").next(by_other)
        health = steps.task("Check cluster health is Ok", "check_health", "health").next(deactivate)
        locked = steps.lock_then(health)
        up_to_date = steps.task("Record the node up to date", "up_to_date", "node_result").next(pick)
        needed = sfn.Choice(self, "Anything to install?")
        needed.when(sfn.Condition.number_greater_than("$.scanned.to_install", 0), locked).otherwise(up_to_date)
        scanned = steps.poll("Wait for the scan", "poll_scan", "scanned", needed)
        scan = steps.task("Scan for missing updates", "scan", "scan").next(scanned)
        # An earlier run's Install may still run on the node (it goes on after a stop): no scan,
        # and so no second Windows Update session, until it has ended.
        idle = steps.poll("Wait until no patch command runs on the node", "poll_idle", "idle", scan)
        left = sfn.Choice(self, "A node left?")
        left.when(sfn.Condition.string_equals("$.current.node_name", ""), finish).otherwise(idle)
        pick.next(left)
        return begin.next(pick)

    def _failure_path(self, steps: _Steps, alarm_topic: sns.ITopic) -> sfn.IChainable:
        """Leave the node in its safest state, give up the lock and the progress lease and word
        the alarm (fallback text if that step fails), publish it, fail."""
        failed = sfn.Fail(self, "Patching stopped", error="PatchStopped", cause="see the alarm message")
        word, fallback = steps.worded_alarm(
            "Leave the node safe and word the alarm", "stop", "Service Fabric patching stopped", transient=False,
            fallback_message="Execution {} stopped patching, and the step that leaves the node safe and words this alarm "
            "failed too; the execution history names the node. Check it with telemetry cluster status.",
        )  # fmt: skip
        alarm = steps.alarm_at("Alarm the operators", alarm_topic, "failure", failed)
        fallback.next(alarm)
        return word.next(alarm)

"""The scale-out and scale-in state machines, and the EventBridge rules that start them.

Every Task invokes one Lambda with `{"step": NAME, "state": <the execution's JSON>}` and
stores the answer under the step's key (lambdas/node_lifecycle/workflow.py holds the steps).
Waits are Wait states looping back to a poll step, so no Lambda sleeps. Any failure is
caught: the `fail` step releases the lock and words an alarm, which is published to the
environment's alarm topic before the execution fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.compliance import acknowledge, attribute_ref, wildcard_resource_finding
from stacks.constructs.log_group import log_group

# Errors worth another try before the failure path: the REST client already retried inside
# the call, so these are longer outages of a gateway or a seed.
TRANSIENT_ERRORS = ["FabricError", "GatewayUnavailableError"]
WAITING = ("wait_for_upgrade", "wait_for_instance")


@dataclass(frozen=True)
class Pacing:
    poll_interval: cdk.Duration
    lock_retry: cdk.Duration
    hold_interval: cdk.Duration  # between heartbeats while a seed node is held
    timeout: cdk.Duration  # the whole execution


class _Steps:
    """Builds the states of one state machine around one Lambda."""

    def __init__(self, scope: Construct, function: lambda_.IFunction, pacing: Pacing) -> None:
        self.scope, self.function, self.pacing = scope, function, pacing
        self.catchers: list[sfn.TaskStateBase] = []

    def task(self, label: str, step: str, key: str | None) -> tasks.LambdaInvoke:
        state = sfn.JsonPath.object_at("$")
        invoke = tasks.LambdaInvoke(
            self.scope,
            label,
            lambda_function=self.function,
            payload=sfn.TaskInput.from_object({"step": step, "state": state}),
            payload_response_only=True,
            result_path=f"$.{key}" if key else "$",
            retry_on_service_exceptions=True,
        )
        invoke.add_retry(
            errors=TRANSIENT_ERRORS,
            interval=cdk.Duration.seconds(10),
            max_attempts=3,
            backoff_rate=2,
        )
        self.catchers.append(invoke)
        return invoke

    def poll(self, label: str, step: str, key: str, then: sfn.IChainable, interval: cdk.Duration | None = None) -> sfn.IChainable:
        """poll -> done? -> then, else Wait -> poll."""
        poll = self.task(label, step, key)
        wait = sfn.Wait(self.scope, f"{label}: wait", time=sfn.WaitTime.duration(interval or self.pacing.poll_interval))
        done = sfn.Choice(self.scope, f"{label}: done?")
        done.when(sfn.Condition.boolean_equals(f"$.{key}.done", True), then).otherwise(wait)
        wait.next(poll)
        return poll.next(done)

    def retry_while_waiting(self, label: str, step: str, key: str, then: sfn.IChainable) -> sfn.IChainable:
        """start -> another upgrade or the instance not ready? Wait -> start again; else then."""
        start = self.task(label, step, key)
        wait = sfn.Wait(self.scope, f"{label}: wait", time=sfn.WaitTime.duration(self.pacing.lock_retry))
        waiting = sfn.Choice(self.scope, f"{label}: must wait?")
        for outcome in WAITING:
            waiting.when(sfn.Condition.string_equals(f"$.{key}.outcome", outcome), wait)
        waiting.otherwise(then)
        wait.next(start)
        return start.next(waiting)

    def lock_then(self, then: sfn.IChainable) -> sfn.IChainable:
        acquire = self.task("Take the membership lock", "acquire_lock", "lock")
        wait = sfn.Wait(self.scope, "Lock held elsewhere: wait", time=sfn.WaitTime.duration(self.pacing.lock_retry))
        held = sfn.Choice(self.scope, "Lock taken?")
        held.when(sfn.Condition.boolean_equals("$.lock.acquired", True), then).otherwise(wait)
        wait.next(acquire)
        return acquire.next(held)

    def begin(self) -> tasks.LambdaInvoke:
        begin = tasks.LambdaInvoke(
            self.scope,
            "Read the lifecycle action",
            lambda_function=self.function,
            payload=sfn.TaskInput.from_object(
                {
                    "step": "begin",
                    "state": {"event": sfn.JsonPath.object_at("$"), "execution": sfn.JsonPath.string_at("$$.Execution.Name")},
                }
            ),
            payload_response_only=True,
            retry_on_service_exceptions=True,
        )
        return begin

    def failure_path(self, alarm_topic: sns.ITopic, fail_label: str, error: str, *, hold: bool) -> sfn.IChainable:
        """Release the lock and word the alarm, publish it, then (drains) hold the instance with
        heartbeats for an operator before the execution fails. Its own tasks are not caught."""
        fail = self._unguarded("Release the lock and word the alarm", "fail", "$.failure")
        publish = tasks.SnsPublish(
            self.scope,
            "Alarm the operators",
            topic=alarm_topic,
            subject=sfn.JsonPath.string_at("$.failure.subject"),
            message=sfn.TaskInput.from_json_path_at("$.failure.message"),
            result_path=sfn.JsonPath.DISCARD,
        )
        failed = sfn.Fail(self.scope, fail_label, error=error, cause="see the alarm message")
        if not hold:
            return fail.next(publish).next(failed)
        # The removal upgrade needs the machine running: keep it until an operator is done.
        label = "Hold the instance for an operator"
        held = self._unguarded(label, "hold_instance", "$.failure_hold")
        wait = sfn.Wait(self.scope, f"{label}: wait", time=sfn.WaitTime.duration(self.pacing.hold_interval))
        done = sfn.Choice(self.scope, f"{label}: done?")
        done.when(sfn.Condition.boolean_equals("$.failure_hold.done", True), failed).otherwise(wait)
        wait.next(held)
        return fail.next(publish).next(held).next(done)

    def _unguarded(self, label: str, step: str, result_path: str) -> tasks.LambdaInvoke:
        """A task of the failure path: retried, but never caught into the failure path again."""
        task = tasks.LambdaInvoke(
            self.scope,
            label,
            lambda_function=self.function,
            payload=sfn.TaskInput.from_object({"step": step, "state": sfn.JsonPath.object_at("$")}),
            payload_response_only=True,
            result_path=result_path,
            retry_on_service_exceptions=True,
        )
        task.add_retry(errors=["States.ALL"], interval=cdk.Duration.seconds(10), max_attempts=3, backoff_rate=2)
        return task

    def catch_all(self, handler: sfn.IChainable) -> None:
        for task in self.catchers:
            task.add_catch(handler, errors=["States.ALL"], result_path="$.error")


class _Workflow(Construct):
    """A state machine with logging and tracing, started by one lifecycle transition of the
    scaling group. Subclasses give the definition; everything else is shared."""

    detail_type: str
    failure_label: str
    failure_error: str
    hold_on_failure = False  # keep the instance for an operator after the alarm

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        function: lambda_.IFunction,
        alarm_topic: sns.ITopic,
        state_machine_name: str,
        group: autoscaling.IAutoScalingGroup,
        group_name: str,
        hook_name: str,
        pacing: Pacing,
        log_retention_days: int,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        steps = _Steps(self, function, pacing)
        definition = steps.begin().next(steps.lock_then(self._after_lock(steps, alarm_topic, pacing)))
        steps.catch_all(
            steps.failure_path(alarm_topic, self.failure_label, self.failure_error, hold=self.hold_on_failure)
        )
        logs = log_group(self, "ExecutionLogs", retention_days=log_retention_days, removal_policy=removal_policy)
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=state_machine_name,
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            timeout=pacing.timeout,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=logs, level=sfn.LogLevel.ALL, include_execution_data=True),
        )
        self.rule = events.Rule(
            self,
            "LifecycleAction",
            description=f"{self.detail_type} of {group_name} ({hook_name}) starts {state_machine_name}",
            event_pattern=events.EventPattern(
                source=["aws.autoscaling"],
                detail_type=[self.detail_type],
                detail={"AutoScalingGroupName": [group_name], "LifecycleHookName": [hook_name]},
            ),
            targets=[targets.SfnStateMachine(self.state_machine)],
        )
        self.state_machine.node.add_dependency(group)
        policy = self.state_machine.role.node.try_find_child("DefaultPolicy")
        assert policy is not None
        acknowledge(
            policy,
            "AwsSolutions-IAM5",
            "Step Functions invokes the one lifecycle function by its ARN and any of its versions "
            "(':*'), as the CDK's LambdaInvoke grant writes it; no other function is reachable.",
            finding=wildcard_resource_finding(f"{attribute_ref(function, 'Arn')}:*"),
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5",
            "X-Ray trace segments and sampling rules have no resource-level permissions, so AWS "
            "requires Resource '*' for tracing a state machine.",
            finding=wildcard_resource_finding("*"),
        )

    def _after_lock(self, steps: _Steps, alarm_topic: sns.ITopic, pacing: Pacing) -> sfn.IChainable:
        raise NotImplementedError

    def _configuration_change(self, steps: _Steps, label: str, step: str, then: sfn.IChainable) -> sfn.IChainable:
        """Start the membership upgrade (waiting out others), then wait until it has taken
        effect; an upgrade already done goes straight on."""
        upgrade = steps.poll("Wait for the configuration upgrade", "poll_configuration_upgrade", "upgrade", then)
        changed = sfn.Choice(self, "Upgrade started?")
        changed.when(sfn.Condition.boolean_equals("$.configuration.changed", True), upgrade).otherwise(then)
        return steps.retry_while_waiting(label, step, "configuration", changed)


class ScaleInWorkflow(_Workflow):
    """Terminate lifecycle action -> deactivate, removal upgrade while the machine runs, check
    the node left (clean-up if not) -> CONTINUE (seed nodes: alarm and hold)."""

    detail_type = "EC2 Instance-terminate Lifecycle Action"
    failure_label, failure_error = "Drain failed", "DrainFailed"
    hold_on_failure = True

    def _after_lock(self, steps: _Steps, alarm_topic: sns.ITopic, pacing: Pacing) -> sfn.IChainable:
        finish = steps.task("Complete the lifecycle action", "finish", "finish").next(sfn.Succeed(self, "Drained"))
        # Clean-up only, for a node the removal upgrade left in the node list.
        remove_state = steps.task("Clean-up: remove the node state", "remove_node_state", "state_removal").next(finish)
        down = steps.poll("Clean-up: wait until the node is Down", "poll_node_down", "down", remove_state)
        stop_host = steps.task("Clean-up: stop the Fabric host", "stop_fabric_host", "host_stop").next(down)
        removed = sfn.Choice(self, "Node gone?")
        removed.when(sfn.Condition.boolean_equals("$.removal.removed", True), finish)
        removed.when(sfn.Condition.boolean_equals("$.removal.down", True), remove_state)
        removed.otherwise(stop_host)
        check = steps.task("Check the node left the node list", "check_node_removed", "removal").next(removed)
        configuration = self._configuration_change(
            steps, "Remove the node from the configuration", "start_configuration_removal", check
        )
        disabled = steps.poll("Wait until the node is Disabled", "poll_deactivation", "disabled", configuration)
        deactivate = steps.task("Deactivate the node", "deactivate_node", "deactivation").next(disabled)

        seed_alarm = tasks.SnsPublish(
            self,
            "Alarm: seed node refused",
            topic=alarm_topic,
            subject="Service Fabric scale-in refused a seed node",
            message=sfn.TaskInput.from_text(
                sfn.JsonPath.format(
                    "Instance {} runs seed node {}, which automation never removes. Its termination "
                    "is held (lifecycle heartbeats) for an operator; the hold ends at the configured limit.",
                    sfn.JsonPath.string_at("$.hook.instance_id"),
                    sfn.JsonPath.string_at("$.node.node_name"),
                )
            ),
            result_path=sfn.JsonPath.DISCARD,
        )
        held = steps.poll(
            "Hold the seed node's instance",
            "hold_instance",
            "hold",
            sfn.Fail(self, "Seed node refused", error="SeedNodeRefused", cause="a seed node's instance was to be terminated"),
            interval=pacing.hold_interval,
        )
        # Holding must not block every other membership change: give the lock up first.
        release_for_hold = steps.task("Release the lock while holding", "release_lock", "released")
        release_for_hold.next(seed_alarm).next(held)
        seed = sfn.Choice(self, "Seed node?")
        seed.when(sfn.Condition.boolean_equals("$.seed.refused", True), release_for_hold).otherwise(deactivate)
        check_seed = steps.task("Refuse seed nodes", "refuse_seed_node", "seed").next(seed)
        member = sfn.Choice(self, "In the cluster?")
        member.when(sfn.Condition.boolean_equals("$.node.is_member", False), finish).otherwise(check_seed)
        return steps.task("Resolve the node", "resolve_node", "node").next(member)


class ScaleOutWorkflow(_Workflow):
    """Launch lifecycle action -> AddNode.ps1, registration upgrade -> CONTINUE (or ABANDON)."""

    detail_type = "EC2 Instance-launch Lifecycle Action"
    failure_label, failure_error = "Join failed", "JoinFailed"

    def _after_lock(self, steps: _Steps, alarm_topic: sns.ITopic, pacing: Pacing) -> sfn.IChainable:
        finish = steps.task("Complete the lifecycle action", "finish", "finish").next(sfn.Succeed(self, "Joined"))
        configuration = self._configuration_change(
            steps, "Register the node with the configuration", "start_configuration_registration", finish
        )
        tag = steps.task("Tag the instance with its node name", "tag_node_instance", "tagging").next(configuration)
        node_up = steps.poll("Wait until the node is Up", "poll_node_up", "node_up", tag)
        join = steps.retry_while_waiting("Run AddNode.ps1 on the instance", "join_node", "join", node_up)
        return steps.task("Plan the node", "plan_node", "plan").next(join)

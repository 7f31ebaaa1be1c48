"""The scale-out and scale-in state machines, and the EventBridge rules that start them.

Every Task invokes one Lambda with `{"step": NAME, "state": <the execution's JSON>}` and
stores the answer under the step's key (lambdas/node_lifecycle/workflow.py holds the steps).
Waits are Wait states looping back to a poll step, so no Lambda sleeps.

Errors: a function fails with TransientError or PermanentError (lambdas/node_lifecycle/
step_errors.py), because Step Functions matches the error name exactly. Transient ones are
retried with backoff; every failure of a step is then caught into the failure path. The failure
path needs neither the gateway nor a well-formed event: it decides the lifecycle action and
words the alarm (a fallback text if even that fails), then publishes it (retried; if it still
cannot be published, it is counted as undelivered and the path goes on). Scale-out ABANDONs the
launch (Auto Scaling replaces the instance); scale-in ABANDONs the terminate action too, and the
group's retention policy keeps the instance running, retained, for an operator to finish the
drain (stacks/constructs/scaling_node_group.py). A launch action that is gone ends the join
without touching the node (ActionGone).

Every retry and the execution's timeout come from stacks/lifecycle_timing.py, which the
configuration is validated against.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.compliance import acknowledge, attribute_ref, wildcard_resource_finding
from stacks.constructs.log_group import log_group
from stacks.constructs.service_trust import narrow_service_trust

from stacks.lifecycle_timing import (
    ALARM_PUBLISH_TIMEOUT_SECONDS,
    ALARM_RETRY,
    EVENT_RETRIES_MAX,
    INVOKE_RETRY,
    LAMBDA_TASK_TIMEOUT_SECONDS,
    STEP_RETRY,
    Retrier,
)

ALL_ERRORS = [sfn.Errors.ALL]
PERMANENT_ERROR = "PermanentError"  # lambdas/node_lifecycle/step_errors.py
ACTION_GONE = "ActionGone"  # likewise: Auto Scaling no longer has the execution's lifecycle action
WAITING = ("wait_for_upgrade", "wait_for_instance")


def traced_state_machine(scope: Construct, name: str, definition: sfn.IChainable, timeout: cdk.Duration,
                         log_retention_days: int, removal_policy: cdk.RemovalPolicy) -> sfn.StateMachine:
    """A state machine traced with X-Ray and logging every event, with its data, to its own log group.

    Its role trusts Step Functions acting for this one state machine: the name is fixed, so the
    trust names its exact ARN (aws:SourceArn) and the account (aws:SourceAccount), where the CDK's
    role trusts every state machine of the account (`stateMachine:*`) because it cannot refer to
    the machine it belongs to (IAM User Guide, "The confused deputy problem"). The CDK's role is
    kept and its trust narrowed in place: a new role would be a replacement, and running
    executions keep the role they started with ("Running executions will continue to use the
    previous definition and roleArn", UpdateStateMachine), which the replacement would delete."""
    logs = log_group(scope, "ExecutionLogs", retention_days=log_retention_days, removal_policy=removal_policy,
                     customer_managed_key=False)  # fmt: skip
    stack = cdk.Stack.of(scope)
    arn = stack.format_arn(service="states", resource="stateMachine", resource_name=name,
                           arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)  # fmt: skip
    machine = sfn.StateMachine(
        scope,
        "StateMachine",
        state_machine_name=name,
        definition_body=sfn.DefinitionBody.from_chainable(definition),
        timeout=timeout,
        tracing_enabled=True,
        logs=sfn.LogOptions(destination=logs, level=sfn.LogLevel.ALL, include_execution_data=True),
    )
    # Overrides merge into the CDK's condition: ArnEquals comes, its ArnLike on stateMachine:* goes
    # (the deletion after the override, which would otherwise replace the deletion's marker).
    role = narrow_service_trust(machine.role, arn, exact=True)
    role.add_property_deletion_override("AssumeRolePolicyDocument.Statement.0.Condition.ArnLike")
    return machine


def start_target(state_machine: sfn.IStateMachine, pacing: Pacing, undelivered_events: sqs.IQueue,
                 input: events.RuleTargetInput | None = None) -> targets.SfnStateMachine:  # fmt: skip
    """An EventBridge rule's StartExecution, retried for as long as the event is worth starting,
    then left in the undelivered-events queue (which alarms)."""
    target = targets.SfnStateMachine(state_machine, input=input, retry_attempts=EVENT_RETRIES_MAX,
                                     max_event_age=pacing.event_age, dead_letter_queue=undelivered_events)  # fmt: skip
    _narrow_events_role_trust(state_machine)
    return target


def _narrow_events_role_trust(state_machine: sfn.IStateMachine) -> None:
    """The role EventBridge starts the machine with (the CDK's one per machine) trusts EventBridge
    rules of this account and Region only: aws:SourceAccount is "the account where the rule specified
    by aws:SourceArn exists" and aws:SourceArn "the ARN of the rule sending the event" (EventBridge
    User Guide, "Using IAM policy conditions in Amazon EventBridge"). The rule's own ARN cannot be
    named: the rule's target names the role, so the role naming the rule is a circular dependency,
    and a fixed rule name would replace every rule. Narrowed in place, as the machine's own role."""
    role = state_machine.node.find_child("EventsRole")  # the CDK's SfnStateMachine target makes it
    narrow_service_trust(role, cdk.Stack.of(state_machine).format_arn(service="events", resource="rule", resource_name="*"))


# The role's statements on "*", as the CDK writes them for a logged and traced state machine.
MACHINE_POLICY_WILDCARDS_REASON = (
    "Logging to CloudWatch Logs: Step Functions sets up the execution log delivery with the role's "
    "logs:CreateLogDelivery, GetLogDelivery, UpdateLogDelivery, DeleteLogDelivery, ListLogDeliveries, "
    "PutResourcePolicy, DescribeResourcePolicies and DescribeLogGroups, on '*' (Step Functions Developer Guide, "
    "\"IAM policies for logging to CloudWatch Logs\"): log deliveries and the account's log resource policy have "
    "no ARN to name. PutResourcePolicy could rewrite that account-wide policy, so the role trusts Step Functions "
    "acting for this one state machine only. Tracing: X-Ray's trace and sampling actions take no resource"
)


def acknowledge_machine_policy(state_machine: sfn.StateMachine, function: lambda_.IFunction, which: str) -> None:
    """The two wildcards of a state machine's role that invokes one function and traces, each
    acknowledged on that role's policy alone."""
    policy = state_machine.role.node.try_find_child("DefaultPolicy")
    assert policy is not None
    acknowledge(
        policy,
        "AwsSolutions-IAM5",
        f"Step Functions invokes the one {which} function by its ARN and any of its versions "
        "(':*'), as the CDK's LambdaInvoke grant writes it; no other function is reachable.",
        finding=wildcard_resource_finding(f"{attribute_ref(function, 'Arn')}:*"),
    )
    acknowledge(policy, "AwsSolutions-IAM5", MACHINE_POLICY_WILDCARDS_REASON, finding=wildcard_resource_finding("*"))


def _retry(task: sfn.TaskStateBase, retrier: Retrier) -> None:
    """One Retry entry as stacks/lifecycle_timing.py declares it, jittered so that executions
    retrying the same outage do not come back together."""
    task.add_retry(
        errors=list(retrier.errors),
        interval=cdk.Duration.seconds(retrier.interval_seconds),
        max_attempts=retrier.max_attempts,
        backoff_rate=retrier.backoff_rate,
        max_delay=cdk.Duration.seconds(retrier.max_delay_seconds),
        jitter_strategy=sfn.JitterType.FULL,
    )


@dataclass(frozen=True)
class Pacing:
    poll_interval: cdk.Duration
    lock_retry: cdk.Duration
    timeout: cdk.Duration  # the whole execution: the hook's global timeout
    event_age: cdk.Duration  # how long EventBridge tries to start an execution


class _Steps:
    """Builds the states of one state machine around one Lambda."""

    def __init__(self, scope: Construct, function: lambda_.IFunction, pacing: Pacing) -> None:
        self.scope, self.function, self.pacing = scope, function, pacing
        self.catchers: list[sfn.TaskStateBase] = []

    def invoke(
        self, label: str, step: str, result_path: str, *, transient: bool = True, timeout_seconds: int = LAMBDA_TASK_TIMEOUT_SECONDS
    ) -> tasks.LambdaInvoke:
        """One Lambda step, given the execution's state."""
        payload = sfn.TaskInput.from_object({"step": step, "state": sfn.JsonPath.object_at("$")})
        return self._lambda_task(label, payload, result_path, transient=transient, timeout_seconds=timeout_seconds)

    def _lambda_task(
        self, label: str, payload: sfn.TaskInput, result_path: str | None, *, transient: bool, timeout_seconds: int
    ) -> tasks.LambdaInvoke:
        """Every Lambda Task rides out Lambda's throttling and its transient service errors (CDK's
        retry_on_service_exceptions covers neither throttling nor a function in a VPC that is not
        ready), and stops waiting for an answer after its run's longest; one that makes calls that
        can fail transiently is also run again after a TransientError or a timeout."""
        invoke = tasks.LambdaInvoke(
            self.scope,
            label,
            lambda_function=self.function,
            payload=payload,
            payload_response_only=True,
            result_path=result_path,
            retry_on_service_exceptions=False,
            task_timeout=sfn.Timeout.duration(cdk.Duration.seconds(timeout_seconds)),
        )
        _retry(invoke, INVOKE_RETRY)
        if transient:
            _retry(invoke, STEP_RETRY)
        return invoke

    def task(self, label: str, step: str, key: str) -> tasks.LambdaInvoke:
        """A step of the main path: any failure it cannot retry away goes to the failure path."""
        invoke = self.invoke(label, step, f"$.{key}")
        self.catchers.append(invoke)
        return invoke

    def _until_done(
        self, label: str, look: sfn.TaskStateBase, key: str, interval: cdk.Duration, then: sfn.IChainable
    ) -> tuple[sfn.IChainable, sfn.Wait]:
        """look -> done? -> then, else Wait -> look; and the Wait, for a Catch that loops."""
        wait = sfn.Wait(self.scope, f"{label}: wait", time=sfn.WaitTime.duration(interval))
        done = sfn.Choice(self.scope, f"{label}: done?")
        done.when(sfn.Condition.boolean_equals(f"$.{key}.done", True), then).otherwise(wait)
        wait.next(look)
        return look.next(done), wait

    def poll(self, label: str, step: str, key: str, then: sfn.IChainable) -> sfn.IChainable:
        """A wait step of the main path, looked at every poll interval until done."""
        loop, _ = self._until_done(label, self.task(label, step, key), key, self.pacing.poll_interval, then)
        return loop

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
        """The event to the execution's state, with a first heartbeat; a malformed event goes to
        the failure path, which also reads the event itself when this step never answered."""
        payload = sfn.TaskInput.from_object(
            {
                "step": "begin",
                "state": {"event": sfn.JsonPath.object_at("$"), "execution": sfn.JsonPath.string_at("$$.Execution.Name")},
            }
        )
        begin = self._lambda_task(
            "Read the lifecycle action", payload, None, transient=True, timeout_seconds=LAMBDA_TASK_TIMEOUT_SECONDS
        )
        self.catchers.append(begin)
        return begin

    def alarm(self, label: str, topic: sns.ITopic, subject: str, message: sfn.TaskInput, then: sfn.IChainable) -> sfn.IChainable:
        """Publish, retried on any error (SNS errors are not all named alike across
        integrations, and a retry costs only time); if it still fails, count the alarm as
        undelivered and go on to `then` all the same."""
        publish = tasks.SnsPublish(
            self.scope, label, topic=topic, subject=subject, message=message, result_path=sfn.JsonPath.DISCARD,
            task_timeout=sfn.Timeout.duration(cdk.Duration.seconds(ALARM_PUBLISH_TIMEOUT_SECONDS)),
        )  # fmt: skip
        _retry(publish, ALARM_RETRY)
        count = self.invoke(f"{label}: count it undelivered", "alarm_undelivered", "$.alarm_undelivered", transient=False)
        count.add_catch(then, errors=ALL_ERRORS, result_path="$.alarm_count_error")
        publish.add_catch(count, errors=ALL_ERRORS, result_path="$.alarm_error")
        count.next(then)
        return publish.next(then)

    def alarm_at(self, label: str, topic: sns.ITopic, key: str, then: sfn.IChainable) -> sfn.IChainable:
        """`alarm` with the subject and message a step worded into $.<key>."""
        return self.alarm(label, topic, subject=sfn.JsonPath.string_at(f"$.{key}.subject"),
                          message=sfn.TaskInput.from_json_path_at(f"$.{key}.message"), then=then)  # fmt: skip

    def alarm_if(self, choice: str, label: str, topic: sns.ITopic, key: str, then: sfn.IChainable) -> sfn.Choice:
        """The alarm worded into $.<key> when $.<key>.alarm is true, then `then`; else `then` at once."""
        worth = sfn.Choice(self.scope, choice)
        worth.when(sfn.Condition.boolean_equals(f"$.{key}.alarm", True), self.alarm_at(label, topic, key, then))
        return worth.otherwise(then)

    def worded_alarm(
        self,
        label: str,
        step: str,
        fallback_subject: str,
        *,
        transient: bool,
        fallback_label: str = "Word a fallback alarm",
        fallback_message: str = "Execution {} failed, and so did the step wording its alarm; the execution history says why.",
    ) -> tuple[tasks.LambdaInvoke, sfn.Pass]:
        """The step that words the alarm into $.failure, and the fixed text it falls back to if
        that step fails (the Lambda itself broken)."""
        word = self.invoke(label, step, "$.failure", transient=transient)
        fallback = sfn.Pass(
            self.scope,
            fallback_label,
            parameters={
                "subject": fallback_subject,
                "message": sfn.JsonPath.format(fallback_message, sfn.JsonPath.string_at("$$.Execution.Id")),
            },
            result_path="$.failure",
        )
        word.add_catch(fallback, errors=ALL_ERRORS, result_path="$.failure_error")
        return word, fallback

    def catch_all(self, handler: sfn.IChainable, *, gone: sfn.IChainable | None = None) -> None:
        """Every main-path failure to `handler`; with `gone`, an action Auto Scaling no longer
        has to `gone` first (Step Functions tries a state's Catchers in order)."""
        for task in self.catchers:
            if gone is not None:
                task.add_catch(gone, errors=[ACTION_GONE], result_path="$.error")
            task.add_catch(handler, errors=ALL_ERRORS, result_path="$.error")


class _Workflow(Construct):
    """A state machine with logging and tracing, started by one lifecycle transition of the
    scaling group. Subclasses give the definition; everything else is shared."""

    detail_type: str

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
        undelivered_events: sqs.IQueue,
        log_retention_days: int,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        steps = _Steps(self, function, pacing)
        definition = steps.begin().next(steps.lock_then(self._after_lock(steps, alarm_topic)))
        steps.catch_all(self._failure_path(steps, alarm_topic), gone=self._gone_path(steps, alarm_topic))
        self.state_machine = traced_state_machine(self, state_machine_name, definition, pacing.timeout,
                                                  log_retention_days, removal_policy)  # fmt: skip
        self.rule = events.Rule(
            self,
            "LifecycleAction",
            description=f"{self.detail_type} of {group_name} ({hook_name}) starts {state_machine_name}",
            event_pattern=events.EventPattern(
                source=["aws.autoscaling"],
                detail_type=[self.detail_type],
                detail={"AutoScalingGroupName": [group_name], "LifecycleHookName": [hook_name]},
            ),
            # EventBridge retries a StartExecution that fails for a reason that passes, for as
            # long as a started execution could still save the action (its first heartbeat lands
            # before the hook times out), then leaves the event in the queue; the queue alarms.
            targets=[start_target(self.state_machine, pacing, undelivered_events)],
        )
        self.state_machine.node.add_dependency(group)
        acknowledge_machine_policy(self.state_machine, function, "lifecycle")

    def _after_lock(self, steps: _Steps, alarm_topic: sns.ITopic) -> sfn.IChainable:
        raise NotImplementedError

    def _failure_path(self, steps: _Steps, alarm_topic: sns.ITopic) -> sfn.IChainable:
        raise NotImplementedError

    def _gone_path(self, steps: _Steps, alarm_topic: sns.ITopic) -> sfn.IChainable | None:
        """Where an execution goes when its lifecycle action is gone; None: the failure path."""
        return None

    @staticmethod
    def _failure_alarm(steps: _Steps, alarm_topic: sns.ITopic, then: sfn.IChainable) -> sfn.IChainable:
        return steps.alarm_at("Alarm the operators", alarm_topic, "failure", then)

    def _configuration_change(self, steps: _Steps, label: str, step: str, then: sfn.IChainable) -> sfn.IChainable:
        """Start the membership upgrade (waiting out others), then wait until it has taken
        effect; an upgrade already done goes straight on."""
        upgrade = steps.poll("Wait for the configuration upgrade", "poll_configuration_upgrade", "upgrade", then)
        changed = sfn.Choice(self, "Upgrade started?")
        changed.when(sfn.Condition.boolean_equals("$.configuration.changed", True), upgrade).otherwise(then)
        return steps.retry_while_waiting(label, step, "configuration", changed)


class ScaleInWorkflow(_Workflow):
    """Terminate lifecycle action -> deactivate, removal upgrade while the machine runs, check
    the node left (clean-up if not) -> CONTINUE (seed nodes: alarm, and the instance retained)."""

    detail_type = "EC2 Instance-terminate Lifecycle Action"

    def _after_lock(self, steps: _Steps, alarm_topic: sns.ITopic) -> sfn.IChainable:
        ended = steps.alarm_if("Action ended before the drain?", "Alarm: drained, instance kept", alarm_topic, "finish",
                               sfn.Succeed(self, "Drained"))  # fmt: skip
        finish = steps.task("Complete the lifecycle action", "finish", "finish").next(ended)
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

        refused = sfn.Fail(self, "Seed node refused", error="SeedNodeRefused", cause="a seed node's instance was to be terminated")
        seed_alarm = steps.alarm(
            "Alarm: seed node refused",
            alarm_topic,
            subject="Service Fabric scale-in refused a seed node",
            message=sfn.TaskInput.from_text(
                sfn.JsonPath.format(
                    "Instance {} runs seed node {}, which automation never removes. Its terminate action was "
                    "ABANDONed: Auto Scaling retains the instance (Terminating:Retained), running, for an operator; "
                    "keep it (docs/day-2.md: failure modes, Terminating:Retained).",
                    sfn.JsonPath.string_at("$.hook.instance_id"),
                    sfn.JsonPath.string_at("$.node.node_name"),
                )
            ),
            then=refused,
        )
        # Release the lock and ABANDON (the instance is retained); the alarm goes out whatever
        # became of either (the lock expires by itself; an action nobody completes is ABANDONed).
        retain = steps.invoke("Release the lock and retain the instance", "retain_instance", "$.retained")
        retain.add_catch(seed_alarm, errors=ALL_ERRORS, result_path="$.retain_error")
        retain.next(seed_alarm)
        seed = sfn.Choice(self, "Seed node?")
        seed.when(sfn.Condition.boolean_equals("$.seed.refused", True), retain).otherwise(deactivate)
        check_seed = steps.task("Refuse seed nodes", "refuse_seed_node", "seed").next(seed)
        member = sfn.Choice(self, "In the cluster?")
        member.when(sfn.Condition.boolean_equals("$.node.is_member", False), finish).otherwise(check_seed)
        return steps.task("Resolve the node", "resolve_node", "node").next(member)

    def _drain_failed(self) -> sfn.Fail:
        if not hasattr(self, "_failed"):
            self._failed = sfn.Fail(self, "Drain failed", error="DrainFailed", cause="see the alarm message")
        return self._failed

    def _failure_path(self, steps: _Steps, alarm_topic: sns.ITopic) -> sfn.IChainable:
        """Release the lock, end the terminate action (ABANDON: the instance is retained, running,
        for an operator to finish the drain) and word the alarm, publish it, fail. An action that
        step could not end times out with the hook's default result, ABANDON, all the same."""
        failed = self._drain_failed()
        word, fallback = steps.worded_alarm(
            "Release the lock, retain the instance and word the alarm", "fail", "Service Fabric drain failed",
            transient=False,
        )  # fmt: skip
        alarm = self._failure_alarm(steps, alarm_topic, then=failed)
        fallback.next(alarm)
        return word.next(alarm)


class ScaleOutWorkflow(_Workflow):
    """Launch lifecycle action -> AddNode.ps1, registration upgrade -> CONTINUE (or ABANDON)."""

    detail_type = "EC2 Instance-launch Lifecycle Action"

    def _after_lock(self, steps: _Steps, alarm_topic: sns.ITopic) -> sfn.IChainable:
        ended = steps.alarm_if("Action ended before the join completed?", "Alarm: joined, launch action ended", alarm_topic,
                               "finish", sfn.Succeed(self, "Joined"))  # fmt: skip
        finish = steps.task("Complete the lifecycle action", "finish", "finish").next(ended)
        configuration = self._configuration_change(
            steps, "Register the node with the configuration", "start_configuration_registration", finish
        )
        tag = steps.task("Tag the instance with its node name", "tag_node_instance", "tagging").next(configuration)
        node_up = steps.poll("Wait until the node is Up", "poll_node_up", "node_up", tag)
        join = steps.retry_while_waiting("Run AddNode.ps1 on the instance", "join_node", "join", node_up)
        return steps.task("Plan the node", "plan_node", "plan").next(join)

    def _gone_path(self, steps: _Steps, alarm_topic: sns.ITopic) -> sfn.IChainable:
        """The launch action is gone: give the lock up and stop without touching the node; quiet
        for a duplicate execution, an alarm when the action ended mid-join."""
        stopped = sfn.Succeed(self, "Action gone: nothing to do", comment="another execution or an operator ended the action")
        gone = steps.invoke("Action gone: release the lock", "action_gone", "$.gone", transient=True)
        gone.add_catch(stopped, errors=ALL_ERRORS, result_path="$.gone_error")
        return gone.next(steps.alarm_if("Action gone mid-join?", "Alarm: join stopped", alarm_topic, "gone", stopped))

    def _failure_path(self, steps: _Steps, alarm_topic: sns.ITopic) -> sfn.IChainable:
        """Release the lock and clean up what the join half-added (best effort, the only step
        that talks to the cluster, and caught), ABANDON the launch and word the alarm (no
        gateway needed), publish it, fail."""
        failed = sfn.Fail(self, "Join failed", error="JoinFailed", cause="see the alarm message")
        abandon, fallback = steps.worded_alarm(
            "Abandon the launch and word the alarm", "abandon", "Service Fabric join failed", transient=True
        )
        alarm = self._failure_alarm(steps, alarm_topic, then=failed)
        fallback.next(alarm)
        abandon.next(alarm)
        clean_up = steps.invoke("Release the lock and clean up the join", "clean_up", "$.cleanup", transient=False)
        clean_up.add_catch(abandon, errors=ALL_ERRORS, result_path="$.cleanup_error")
        return clean_up.next(abandon)

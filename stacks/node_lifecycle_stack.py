"""Node lifecycle automation of the Service Fabric cluster: the scaling group's launch and
terminate lifecycle actions start state machines that join and drain nodes over the
Service Fabric REST API, one membership change at a time (a DynamoDB lock), and a
scheduled reaper counts nodes whose machines are gone (zombies) for the alarms.

Runtime code: lambdas/node_lifecycle (steps in workflow.py, handlers in handlers.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.compliance import acknowledge, wildcard_resource_finding
from stacks.config import EnvironmentConfig
from stacks.constructs.alarm_topic import AlarmTopic
from stacks.constructs.command_document import command_document
from stacks.constructs.lifecycle_functions import VPC_INTERFACE_ACTIONS, LifecycleFunction, function_code
from stacks.constructs.lifecycle_monitoring import LifecycleMonitoring
from stacks.constructs.lifecycle_workflows import Pacing, ScaleInWorkflow, ScaleOutWorkflow
from stacks.constructs.undelivered_events import UndeliveredEventsQueue
from stacks.constructs.membership_lock_table import MembershipLockTable
from stacks.constructs.patch_workflow import PatchWorkflow
from stacks.constructs.node_scripts import render_add_node_document, render_stop_host_document
from stacks.constructs.zombie_reaper import ZombieReaper
from stacks.naming import (
    CLUSTER_TAG,
    DEPLOYMENT_ACCOUNT,
    LAUNCH_HOOK_NAME,
    NODE_LIFECYCLE_METRICS_NAMESPACE,
    NODE_PREPARATION_STATUS_FILE,
    NODE_TYPE_TAG,
    SCALING_NODE_TYPE,
    TERMINATE_HOOK_NAME,
    add_node_document_name,
    gateway_thumbprint_parameter_name,
    membership_lock_table_name,
    node_lifecycle_state_machine_name,
    runtime_package_path,
    scaling_group_name,
    service_fabric_cluster_name,
    state_machine_arn,
    stop_host_document_name,
)
from stacks.removal import removal_policy

PATCH_DOCUMENT = "AWS-RunPatchBaseline"  # lambdas/node_lifecycle/patch_baseline.py sends it
# What each read a lifecycle function holds on "*" is for (_acknowledge_reads_on_everything).
READS_ON_EVERYTHING = {
    "ec2:DescribeInstances": "which instance runs which node, and whether it still exists",
    "autoscaling:DescribeAutoScalingGroups": "whether a drained instance was retained (its lifecycle action ended first) "
                                             "and which instances the group holds",
    "ssm:GetCommandInvocation": "how a Run Command sent to a node went",
    "ssm:ListCommandInvocations": "whether a patch command still runs on a node",
}
TRACING_ACTIONS = ("xray:PutTraceSegments", "xray:PutTelemetryRecords")  # the CDK's, for an X-Ray traced function


class NodeLifecycleStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        vpc: ec2.IVpc,
        scaling_group: autoscaling.IAutoScalingGroup,
        gateway_client_security_group: ec2.ISecurityGroup,
        gateway_endpoints: Sequence[str],
        alarms: AlarmTopic,
        dashboard: cloudwatch.Dashboard,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings, lifecycle = config.service_fabric, config.node_lifecycle
        cluster_name = service_fabric_cluster_name(config)
        group_name = scaling_group_name(config)
        removal = removal_policy(config)

        self.lock = MembershipLockTable(self, "MembershipLock", table_name=membership_lock_table_name(config))
        add_node = command_document(
            self,
            "AddNodeDocument",
            name=add_node_document_name(config),
            document_format="YAML",
            content=render_add_node_document(
                {
                    "statusFile": NODE_PREPARATION_STATUS_FILE,
                    "deploymentAccount": DEPLOYMENT_ACCOUNT,
                    "runtimePackage": runtime_package_path(config),
                    "runtimeVersion": settings.runtime_version,
                }
            ),
        )
        stop_host = command_document(
            self,
            "StopHostDocument",
            name=stop_host_document_name(config),
            content=render_stop_host_document(),
        )

        # The functions reach the gateways through the gateway client group, and AWS APIs
        # (endpoints, NAT) over 443 through their own.
        egress = ec2.SecurityGroup(
            self, "FunctionSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description=f"Node lifecycle functions of {cluster_name}: HTTPS to AWS APIs",
        )
        egress.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "AWS APIs through endpoints and NAT")
        state_machine_names = {
            "ScaleIn": node_lifecycle_state_machine_name(config, "scale-in"),
            "ScaleOut": node_lifecycle_state_machine_name(config, "scale-out"),
        }
        patch_machine_name = node_lifecycle_state_machine_name(config, "patch")
        machine_arns = {label: state_machine_arn(config, name) for label, name in state_machine_names.items()}
        environment = {
            "SF_GATEWAY_ENDPOINTS": ",".join(gateway_endpoints),
            "SF_ADMIN_CERTIFICATE_SECRET": settings.admin_certificate_secret,
            "SF_GATEWAY_THUMBPRINT_PARAMETER": gateway_thumbprint_parameter_name(config),
            "LOCK_TABLE_NAME": self.lock.table.table_name,
            "LOCK_TTL_SECONDS": str(lifecycle.lock_ttl_seconds),
            "SCALING_NODE_TYPE": SCALING_NODE_TYPE,
            "ADD_NODE_DOCUMENT": add_node_document_name(config),
            "STOP_HOST_DOCUMENT": stop_host_document_name(config),
            "ZOMBIE_DOWN_SECONDS": str(lifecycle.zombie_down_minutes * 60),
            "METRICS_NAMESPACE": NODE_LIFECYCLE_METRICS_NAMESPACE,
            "CLUSTER_NAME": cluster_name,
            # The reaper's backstop for lifecycle events that never started an execution.
            "SCALING_GROUP_NAME": group_name,
            "LAUNCH_HOOK_NAME": LAUNCH_HOOK_NAME,
            "TERMINATE_HOOK_NAME": TERMINATE_HOOK_NAME,
            "SCALE_OUT_STATE_MACHINE_ARN": machine_arns["ScaleOut"],
            "SCALE_IN_STATE_MACHINE_ARN": machine_arns["ScaleIn"],
            "LIFECYCLE_GLOBAL_TIMEOUT_SECONDS": str(config.lifecycle_timing.global_timeout_seconds),
            # The reaper does not count a seed Down while patching restarts it, up to a node's time.
            "PATCH_NODE_TIMEOUT_SECONDS": str(config.patching.node_timeout_minutes * 60),
        }
        code = function_code()

        # What becomes of a failed invocation, where a dead-letter queue would (checkov CKV_AWS_116).
        by_step_functions = ("Step Functions invokes it synchronously and handles a failure itself (retries, then the "
                             "failure path that alarms); its one asynchronous invocation is the daily keep-warm no-op, "
                             "which the next day repeats")
        by_schedule = ("EventBridge invokes it on a schedule; Lambda retries a failed run twice and the next scheduled "
                       "run repeats it (every part is safe to repeat); a queue would only keep the schedule's empty event")

        def function(construct_id: str, handler: str, description: str, timeout_minutes: int,
                     why_no_dead_letter_queue: str = by_step_functions) -> LifecycleFunction:  # fmt: skip
            made = LifecycleFunction(
                self,
                construct_id,
                code=code,
                handler=f"node_lifecycle.handlers.{handler}",
                description=description,
                environment={
                    **environment,
                    "WORKFLOW_TIMEOUT_SECONDS": str(timeout_minutes * 60),
                },
                vpc=vpc,
                security_groups=[egress, gateway_client_security_group],
                log_retention_days=lifecycle.log_retention_days,
                removal_policy=removal,
                why_no_dead_letter_queue=why_no_dead_letter_queue,
            )
            self._grant_common(made, config)
            return made

        scale_in = function("ScaleInFunction", "scale_in", f"Drains {cluster_name} nodes of terminating instances",
                            lifecycle.drain_timeout_minutes)
        scale_out = function("ScaleOutFunction", "scale_out", f"Joins launching instances to {cluster_name}",
                             lifecycle.join_timeout_minutes)
        reaper = function("ReaperFunction", "reaper", f"Restarts lost lifecycle actions, counts zombie and Down seed nodes of {cluster_name}",
                          lifecycle.drain_timeout_minutes, by_schedule)

        patching = config.patching
        patch = function("PatchFunction", "patch", f"Patches Windows on the {cluster_name} nodes in place, one at a time",
                         patching.node_timeout_minutes)  # fmt: skip

        # The lock's four item calls (lambdas/node_lifecycle/membership_lock.py, patch_progress.py),
        # not the CDK's read-write grant: its stream reads (GetRecords, GetShardIterator) take a
        # stream, not a table, and its scans and batches are never made.
        for made in (scale_in, scale_out, patch):  # the reaper never locks
            iam.Grant.add_to_principal(grantee=made.function, resource_arns=[self.lock.table.table_arn], actions=[
                "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"])  # fmt: skip
        for made in (scale_in, scale_out):  # patching serves no lifecycle action
            self._grant_lifecycle_actions(made, config, group_name)
        self._grant_run_command(scale_in, config, stop_host.ref, "stop the Fabric host service")
        self._grant_run_command(scale_out, config, add_node.ref, "run AddNode.ps1")
        self._grant_node_tagging(scale_out, config)
        self._grant_patch_baseline(patch, config)
        self._grant_orphan_restarts(reaper, config, group_name, list(machine_arns.values()))
        for made, which in ((scale_in, "scale-in"), (scale_out, "scale-out"), (reaper, "reaper"), (patch, "patch")):
            self._acknowledge_reads_on_everything(made, which)

        timing = config.lifecycle_timing
        pacing = Pacing(
            poll_interval=cdk.Duration.seconds(lifecycle.poll_interval_seconds),
            lock_retry=cdk.Duration.seconds(lifecycle.lock_retry_seconds),
            # No execution outlives the lifecycle action it serves; the steps' own deadlines end
            # it well before (validated in stacks/config.py).
            timeout=cdk.Duration.seconds(timing.global_timeout_seconds),
            event_age=cdk.Duration.seconds(timing.event_age_seconds),
        )
        self.undelivered_events = UndeliveredEventsQueue(
            self,
            "UndeliveredLifecycleEvents",
            queue_name=f"{config.resource_prefix}-sf-undelivered-lifecycle-events",
            alarm_topic=alarms.topic,
        )

        workflow_options = dict(
            alarm_topic=alarms.topic,
            group=scaling_group,
            group_name=group_name,
            log_retention_days=lifecycle.log_retention_days,
            removal_policy=removal,
            pacing=pacing,
            undelivered_events=self.undelivered_events.queue,
        )
        self.scale_in = ScaleInWorkflow(
            self,
            "ScaleIn",
            function=scale_in.function,
            state_machine_name=state_machine_names["ScaleIn"],
            hook_name=TERMINATE_HOOK_NAME,
            **workflow_options,
        )
        self.scale_out = ScaleOutWorkflow(
            self,
            "ScaleOut",
            function=scale_out.function,
            state_machine_name=state_machine_names["ScaleOut"],
            hook_name=LAUNCH_HOOK_NAME,
            **workflow_options,
        )
        # Their failure paths publish the worded alarm; the SnsPublish task grants only sns:Publish,
        # not the use of the topic's key that publishing to an encrypted topic needs.
        for workflow in (self.scale_in, self.scale_out):
            alarms.grant_publish(workflow.state_machine)
        self.patch = PatchWorkflow(
            self,
            "Patch",
            function=patch.function,
            alarm_topic=alarms.topic,
            state_machine_name=patch_machine_name,
            pacing=Pacing(
                poll_interval=cdk.Duration.seconds(patching.poll_interval_seconds),
                # The lock is waited for at the poll interval too: the run's history bound counts
                # every look of a node at that pace (EnvironmentConfig.patch_run_history_events).
                lock_retry=cdk.Duration.seconds(patching.poll_interval_seconds),
                # Every node at its longest, and an hour to spare.
                timeout=cdk.Duration.minutes(
                    (settings.seed_node_count + settings.scaling_max_nodes) * patching.node_timeout_minutes + 60
                ),
                event_age=cdk.Duration.hours(1),  # a maintenance window started an hour late is still one
            ),
            schedule=patching.schedule,
            schedule_enabled=patching.enabled,
            undelivered_events=self.undelivered_events.queue,
            log_retention_days=lifecycle.log_retention_days,
            removal_policy=removal,
        )
        alarms.grant_publish(self.patch.state_machine)
        self.undelivered_events.watch(self.patch.rule, "Patch")
        self.undelivered_events.watch(self.scale_in.rule, "ScaleIn")
        self.undelivered_events.watch(self.scale_out.rule, "ScaleOut")
        # A function in a VPC idle for weeks goes Inactive, and the invoke that finds it so fails
        # for longer than the invoke retries (workflow.keep_warm): one no-op invoke a day each.
        events.Rule(
            self,
            "KeepWarm",
            description=f"Keeps the {cluster_name} drain, join and patch functions from going Inactive between their runs",
            schedule=events.Schedule.rate(cdk.Duration.days(1)),
            targets=[
                targets.LambdaFunction(made.function, event=events.RuleTargetInput.from_object({"step": "keep_warm"}),
                                       retry_attempts=2)  # fmt: skip
                for made in (scale_in, scale_out, patch)
            ],
        )
        self.reaper = ZombieReaper(self, "ZombieReaper", function=reaper.function,
                                   interval_minutes=lifecycle.reaper_interval_minutes)
        LifecycleMonitoring(
            self,
            "Monitoring",
            namespace=NODE_LIFECYCLE_METRICS_NAMESPACE,
            cluster_name=cluster_name,
            # A run that stops alarms with its own words; timed-out or aborted runs alarm here.
            state_machine_arns={**machine_arns, "Patch": state_machine_arn(config, patch_machine_name)},
            reaper_interval_minutes=lifecycle.reaper_interval_minutes,
            alarm_topic=alarms.topic,
            dashboard=dashboard,
        )

    # -- least-privilege grants -----------------------------------------------------------

    def _grant_common(self, made: LifecycleFunction, config: EnvironmentConfig) -> None:
        """Every function: the admin client certificate, the published gateway thumbprint (not the
        cluster certificate secret, which holds its private key and the node password), and
        reading instances."""
        fn, settings = made.function, config.service_fabric
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["secretsmanager:GetSecretValue"],
                resources=[
                    self.format_arn(service="secretsmanager", resource="secret",
                                    resource_name=f"{settings.admin_certificate_secret}-??????",
                                    arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)
                ],
            )
        )
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ssm:GetParameter"],
                resources=[
                    self.format_arn(service="ssm", resource="parameter",
                                    resource_name=gateway_thumbprint_parameter_name(config).lstrip("/"))
                ],
            )
        )
        fn.add_to_role_policy(iam.PolicyStatement(actions=["ec2:DescribeInstances"], resources=["*"]))

    def _acknowledge_reads_on_everything(self, made: LifecycleFunction, which: str) -> None:
        """One reason per function, naming the reads it holds on "*" (none of which takes a
        resource) and what each is for; a new action on "*" without its purpose here stops synthesis."""
        policy = self._policy(made)
        assert isinstance(policy, iam.Policy)
        on_everything = sorted({action for statement in policy.document.to_json()["Statement"]
                                if statement["Resource"] == "*"
                                for action in ([statement["Action"]] if isinstance(statement["Action"], str)
                                               else statement["Action"])} - set(VPC_INTERFACE_ACTIONS) - set(TRACING_ACTIONS))  # fmt: skip
        unexplained = [action for action in on_everything if action not in READS_ON_EVERYTHING]
        assert not unexplained, f"{which}: say what {unexplained} on '*' are for (READS_ON_EVERYTHING)"
        acknowledge(policy, "AwsSolutions-IAM5",
                    f"The {which} function's reads on '*', which take no resource in IAM's catalogue: "
                    + "; ".join(f"{action}, {READS_ON_EVERYTHING[action]}" for action in on_everything)
                    + ". The network interface and X-Ray actions are acknowledged with the function's role.",
                    finding=wildcard_resource_finding("*"))  # fmt: skip

    def _grant_lifecycle_actions(self, made: LifecycleFunction, config: EnvironmentConfig, group_name: str) -> None:
        group_arn = self._group_arn(group_name)
        made.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"],
                resources=[group_arn],
            )
        )
        # Whether a drain's instance was retained (its action ended first): Describe* takes no resource.
        made.function.add_to_role_policy(iam.PolicyStatement(actions=["autoscaling:DescribeAutoScalingGroups"], resources=["*"]))
        acknowledge(
            self._policy(made),
            "AwsSolutions-IAM5",
            "An Auto Scaling group ARN carries a generated id; the wildcard stands only for that id, "
            "the group name is fixed, so only the Service Fabric scaling group's actions are allowed.",
            finding=wildcard_resource_finding(
                f"arn:<AWS::Partition>:autoscaling:{config.region}:{config.account}:autoScalingGroup:*:autoScalingGroupName/{group_name}"
            ),
        )

    def _grant_run_command(self, made: LifecycleFunction, config: EnvironmentConfig, document: str, purpose: str) -> None:
        fn = made.function
        document_arn = self.format_arn(service="ssm", resource="document", resource_name=document)
        instances = self.format_arn(service="ec2", resource="instance", resource_name="*")
        fn.add_to_role_policy(iam.PolicyStatement(actions=["ssm:SendCommand"], resources=[document_arn]))
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ssm:SendCommand"],
                resources=[instances],
                # Scaling nodes of this cluster alone: a seed is never joined or stopped this way.
                conditions={"StringEquals": {f"ssm:resourceTag/{CLUSTER_TAG}": service_fabric_cluster_name(config),
                                             f"ssm:resourceTag/{NODE_TYPE_TAG}": SCALING_NODE_TYPE}},
            )
        )
        fn.add_to_role_policy(iam.PolicyStatement(actions=["ssm:GetCommandInvocation"], resources=["*"]))
        acknowledge(
            self._policy(made),
            "AwsSolutions-IAM5",
            f"Run Command may target only instances tagged as scaling nodes of this cluster (condition on "
            f"the {CLUSTER_TAG} and {NODE_TYPE_TAG} tags), to {purpose}, with this stack's document alone; "
            "instance ids are not known in advance.",
            finding=wildcard_resource_finding(f"arn:<AWS::Partition>:ec2:{config.region}:{config.account}:instance/*"),
        )

    def _grant_patch_baseline(self, made: LifecycleFunction, config: EnvironmentConfig) -> None:
        """AWS-RunPatchBaseline (an AWS-owned document: no account in its ARN) on this cluster's
        nodes, seeds and scaling nodes alike (tag condition), and the patch states it reports."""
        fn = made.function
        document = self.format_arn(service="ssm", resource="document", resource_name=PATCH_DOCUMENT, account="")
        fn.add_to_role_policy(iam.PolicyStatement(actions=["ssm:SendCommand"], resources=[document]))
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ssm:SendCommand"],
                resources=[self.format_arn(service="ec2", resource="instance", resource_name="*")],
                conditions={"StringEquals": {f"ssm:resourceTag/{CLUSTER_TAG}": service_fabric_cluster_name(config)}},
            )
        )
        fn.add_to_role_policy(
            iam.PolicyStatement(actions=["ssm:GetCommandInvocation", "ssm:ListCommandInvocations"], resources=["*"])
        )
        # The patches a node reported: on the instance (IAM's catalogue: instance, with its tags),
        # this cluster's nodes alone, as the command sent to them.
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ssm:DescribeInstancePatchStates"],
                resources=[self.format_arn(service="ec2", resource="instance", resource_name="*")],
                conditions={"StringEquals": {f"ssm:resourceTag/{CLUSTER_TAG}": service_fabric_cluster_name(config)}},
            )
        )
        acknowledge(
            self._policy(made),
            "AwsSolutions-IAM5",
            f"Run Command may send only the AWS-RunPatchBaseline document, and only to instances tagged as nodes of "
            f"this cluster (condition on the {CLUSTER_TAG} tag: its seeds and scaling nodes); instance ids are not "
            "known in advance.",
            finding=wildcard_resource_finding(f"arn:<AWS::Partition>:ec2:{config.region}:{config.account}:instance/*"),
        )

    def _grant_orphan_restarts(
        self, made: LifecycleFunction, config: EnvironmentConfig, group_name: str, machine_arns: list[str]
    ) -> None:
        """The reaper finds lifecycle actions waiting with no execution and starts one: it reads
        the group's instances, heartbeats an action (never completes one), lists and reads the two
        state machines' executions and starts them."""
        fn = made.function
        fn.add_to_role_policy(iam.PolicyStatement(actions=["autoscaling:DescribeAutoScalingGroups"], resources=["*"]))
        fn.add_to_role_policy(
            iam.PolicyStatement(actions=["autoscaling:RecordLifecycleActionHeartbeat"], resources=[self._group_arn(group_name)])
        )
        fn.add_to_role_policy(iam.PolicyStatement(actions=["states:ListExecutions", "states:StartExecution"], resources=machine_arns))
        executions = [arn.replace(":stateMachine:", ":execution:") + ":*" for arn in machine_arns]
        fn.add_to_role_policy(iam.PolicyStatement(actions=["states:DescribeExecution"], resources=executions))
        policy = self._policy(made)
        acknowledge(
            policy,
            "AwsSolutions-IAM5",
            "An Auto Scaling group ARN carries a generated id; the wildcard stands only for that id, "
            "the group name is fixed, so the reaper may heartbeat only the Service Fabric scaling group's actions.",
            finding=wildcard_resource_finding(
                f"arn:<AWS::Partition>:autoscaling:{config.region}:{config.account}:autoScalingGroup:*:autoScalingGroupName/{group_name}"
            ),
        )
        for arn in executions:
            acknowledge(
                policy,
                "AwsSolutions-IAM5",
                "An execution's ARN ends with its name, unknown in advance; the wildcard covers only the "
                "executions of this one node lifecycle state machine, which the reaper reads to see which "
                "instances an execution already serves.",
                finding=wildcard_resource_finding(arn),
            )

    def _group_arn(self, group_name: str) -> str:
        return self.format_arn(
            service="autoscaling", resource="autoScalingGroup",
            resource_name=f"*:autoScalingGroupName/{group_name}", arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )

    def _grant_node_tagging(self, made: LifecycleFunction, config: EnvironmentConfig) -> None:
        made.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[self.format_arn(service="ec2", resource="instance", resource_name="*")],
                conditions={
                    "StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": service_fabric_cluster_name(config)},
                    "ForAllValues:StringEquals": {"aws:TagKeys": ["sf:nodename"]},
                },
            )
        )

    @staticmethod
    def _policy(made: LifecycleFunction) -> Construct:
        role = made.function.role
        assert role is not None
        policy = role.node.try_find_child("DefaultPolicy")
        assert policy is not None
        return policy

"""The MSK cluster: IAM- and SASL/SCRAM-authenticated, TLS-only, encrypted with its own key, logging to
CloudWatch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Fn, RemovalPolicy, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_msk as msk
from constructs import Construct

from stacks.constructs.keys import rotating_key
from stacks.constructs.log_group import log_group

IAM_PORT = 9098
# SASL/SCRAM over TLS from within AWS (MSK Developer Guide, "Port information").
SCRAM_PORT = 9096


def server_properties(*, log_retention_hours: int, min_insync_replicas: int) -> str:
    """Broker settings for durable, low-latency ingestion."""
    settings: Mapping[str, object] = {
        # Topics are declared in config and created by telemetry/commands/topics.py, never by a typo.
        "auto.create.topics.enable": "false",
        "default.replication.factor": 3,
        # What survives the loss of one broker (or one zone) depends on the writer's acks:
        # - acks=all (the simulator, the Flink job's group commits, every IAM client here): the
        #   leader acknowledges once min.insync.replicas (2) replicas have the write, so it survives;
        # - acks=1 (device messages: the AWS IoT rule's Kafka action accepts only "0" or "1"): the
        #   leader alone has it when it acknowledges, so a leader lost before its followers copied
        #   the write loses it (kafka_topic_rule.py; README, "Durability of each path").
        "min.insync.replicas": min_insync_replicas,
        "unclean.leader.election.enable": "false",
        "log.retention.hours": log_retention_hours,
        # SASL/SCRAM users (the device gateway's rule) are authorized by Kafka ACLs; MSK's default
        # is true, which lets such a user do anything on a resource without ACLs (MSK Developer
        # Guide, "Apache Kafka ACLs"). IAM clients are not affected: "The
        # allow.everyone.if.no.acl.found Apache Kafka setting has no effect if your cluster uses
        # IAM access control" (MSK Developer Guide, "IAM access control"). Brokers are super users.
        "allow.everyone.if.no.acl.found": "false",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


class MskCluster(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        cluster_name: str,
        kafka_version: str,
        broker_instance_type: str,
        broker_count: int,
        ebs_volume_gib: int,
        storage_autoscaling_max_gib: int,
        storage_autoscaling_target_percent: int,
        enhanced_monitoring: str,
        log_retention_hours: int,
        min_insync_replicas: int,
        broker_log_retention_days: int,
        removal_policy: RemovalPolicy,
        tiered_storage: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self.cluster_name = cluster_name
        self.broker_count = broker_count

        self.key = rotating_key(
            self,
            "DataKey",
            description=f"Encrypts the data volumes of MSK cluster {cluster_name}",
            removal_policy=removal_policy,
        )

        self.security_group = ec2.SecurityGroup(
            self,
            "BrokerSecurityGroup",
            vpc=vpc,
            description=f"MSK brokers of {cluster_name}: IAM listener from client groups only",
            allow_all_outbound=False,
        )
        # Members of this group may reach the brokers. Other stacks attach it to their instances
        # and functions instead of handing their own groups back (which would make a cycle).
        self.client_security_group = ec2.SecurityGroup(
            self,
            "ClientSecurityGroup",
            vpc=vpc,
            description=f"Clients of MSK cluster {cluster_name}",
            allow_all_outbound=False,
        )
        self.allow_client(self.client_security_group)
        # The AWS IoT rules engine's Kafka action cannot sign in with IAM, only SASL/SCRAM (or mTLS):
        # its VPC destination's interfaces join this group, which reaches the SCRAM listener only.
        self.scram_client_security_group = ec2.SecurityGroup(
            self,
            "ScramClientSecurityGroup",
            vpc=vpc,
            description=f"SASL/SCRAM clients of MSK cluster {cluster_name}",
            allow_all_outbound=False,
        )
        self.security_group.add_ingress_rule(
            self.scram_client_security_group, ec2.Port.tcp(SCRAM_PORT), "Kafka clients, SASL/SCRAM over TLS"
        )
        self.scram_client_security_group.add_egress_rule(
            self.security_group, ec2.Port.tcp(SCRAM_PORT), "MSK brokers, SASL/SCRAM over TLS"
        )

        configuration = msk.CfnConfiguration(
            self,
            "Configuration",
            name=f"{cluster_name}-brokers",
            description="Durable low-latency ingestion: no auto-created topics, RF 3, min ISR 2",
            kafka_versions_list=[kafka_version],
            server_properties=server_properties(
                log_retention_hours=log_retention_hours, min_insync_replicas=min_insync_replicas
            ),
        )

        broker_logs = log_group(
            self, "BrokerLogs", retention_days=broker_log_retention_days, removal_policy=removal_policy,
            customer_managed_key=False,
        )

        self.cluster = msk.CfnCluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            kafka_version=kafka_version,
            number_of_broker_nodes=broker_count,
            broker_node_group_info=msk.CfnCluster.BrokerNodeGroupInfoProperty(
                instance_type=broker_instance_type,
                client_subnets=vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED).subnet_ids,
                security_groups=[self.security_group.security_group_id],
                storage_info=msk.CfnCluster.StorageInfoProperty(
                    ebs_storage_info=msk.CfnCluster.EBSStorageInfoProperty(volume_size=ebs_volume_gib)
                ),
            ),
            client_authentication=msk.CfnCluster.ClientAuthenticationProperty(
                # ClientAuthentication is not create-only in the AWS::MSK::Cluster schema: enabling
                # SCRAM on a live cluster is an in-place update (UpdateSecurity), not a replacement.
                sasl=msk.CfnCluster.SaslProperty(
                    iam=msk.CfnCluster.IamProperty(enabled=True),
                    scram=msk.CfnCluster.ScramProperty(enabled=True),
                ),
                unauthenticated=msk.CfnCluster.UnauthenticatedProperty(enabled=False),
            ),
            encryption_info=msk.CfnCluster.EncryptionInfoProperty(
                encryption_at_rest=msk.CfnCluster.EncryptionAtRestProperty(data_volume_kms_key_id=self.key.key_arn),
                encryption_in_transit=msk.CfnCluster.EncryptionInTransitProperty(client_broker="TLS", in_cluster=True),
            ),
            configuration_info=msk.CfnCluster.ConfigurationInfoProperty(
                arn=configuration.attr_arn, revision=configuration.attr_latest_revision_revision
            ),
            enhanced_monitoring=enhanced_monitoring,
            # Tiered storage: the cluster may keep closed segments of a topic that enables it in a
            # remote tier ("Enable tiered storage on an existing Amazon MSK cluster": StorageMode
            # TIERED, an in-place update; the topics opt in, `telemetry topics`). Kafka 3.6 or later,
            # m5/m7g brokers (stacks/config.py refuses the rest). Left out otherwise, as before, so a
            # cluster without tiered storage sees no change.
            storage_mode="TIERED" if tiered_storage else None,
            logging_info=msk.CfnCluster.LoggingInfoProperty(
                broker_logs=msk.CfnCluster.BrokerLogsProperty(
                    cloud_watch_logs=msk.CfnCluster.CloudWatchLogsProperty(
                        enabled=True, log_group=broker_logs.log_group_name
                    )
                )
            ),
        )
        self.cluster.apply_removal_policy(removal_policy)
        self.cluster_arn = self.cluster.attr_arn
        self._storage_autoscaling(ebs_volume_gib, storage_autoscaling_max_gib, storage_autoscaling_target_percent)

    def _storage_autoscaling(self, volume_gib: int, max_gib: int, target_percent: int) -> None:
        """Broker storage grows before it fills: Application Auto Scaling on the brokers' volume
        ("Automatic scaling for Amazon MSK clusters"; Application Auto Scaling User Guide, "Amazon
        MSK and Application Auto Scaling": the cluster ARN as resource id, its service-linked role
        made by the service, scale-in disabled because MSK storage only grows), tracking the
        predefined metric KafkaBrokerStorageUtilization at a target of 10-80 %. A step adds the
        larger of 10 GiB and 10 %, at most once every six hours and sometimes only after more than
        24, so the disk alarm (msk_monitoring.py, above the target) still pages when growth cannot
        keep up or the volume reached its ceiling (max_gib, within the 16,384 GiB per broker MSK
        allows). CloudFormation sends the template's VolumeSize whenever anything under
        EBSStorageInfo changes (cloudformation-coverage-roadmap issue 1129), which MSK refuses
        below the grown size plus 10 GiB: docs/capacity-and-cost.md says how to change the storage afterwards."""
        target = appscaling.CfnScalableTarget(
            self,
            "StorageScaling",
            service_namespace="kafka",
            scalable_dimension="kafka:broker-storage:VolumeSize",
            resource_id=self.cluster.attr_arn,
            min_capacity=volume_gib,
            max_capacity=max_gib,
        )
        appscaling.CfnScalingPolicy(
            self,
            "StorageScalingPolicy",
            policy_name=f"{self.cluster.cluster_name}-broker-storage",
            policy_type="TargetTrackingScaling",
            scaling_target_id=target.ref,
            target_tracking_scaling_policy_configuration=appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
                target_value=target_percent,
                predefined_metric_specification=appscaling.CfnScalingPolicy.PredefinedMetricSpecificationProperty(
                    predefined_metric_type="KafkaBrokerStorageUtilization"
                ),
                disable_scale_in=True,
            ),
        )

    def allow_client(self, peer: ec2.ISecurityGroup) -> None:
        """Let members of `peer` reach the brokers' IAM listener, and nothing else."""
        self.security_group.add_ingress_rule(
            peer, ec2.Port.tcp(IAM_PORT), "Kafka clients, SASL/IAM over TLS"
        )
        peer.add_egress_rule(self.security_group, ec2.Port.tcp(IAM_PORT), "MSK brokers, SASL/IAM over TLS")

    def _resource_arn(self, kind: str, name: str) -> str:
        # arn:aws:kafka:REGION:ACCOUNT:cluster/NAME/UUID -> arn:...:KIND/NAME/UUID/NAME
        stack = Stack.of(self)
        cluster_uuid = Fn.select(2, Fn.split("/", self.cluster_arn))
        return stack.format_arn(
            service="kafka", resource=kind, resource_name=f"{self.cluster_name}/{cluster_uuid}/{name}"
        )

    def topic_arn(self, topic: str) -> str:
        return self._resource_arn("topic", topic)

    def group_arn(self, group: str) -> str:
        # Any cluster UUID: only one cluster of this name exists per account and region, and
        # groups are often granted by prefix (`simulator-*`) anyway.
        return Stack.of(self).format_arn(
            service="kafka", resource="group", resource_name=f"{self.cluster_name}/*/{group}"
        )

    def grant_produce(self, grantee: iam.IGrantable, topic: str) -> None:
        self._grant_connect(grantee)
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["kafka-cluster:DescribeTopic", "kafka-cluster:WriteData"],
            resource_arns=[self.topic_arn(topic)],
        )
        # Producers here are idempotent (librdkafka's and the Java client's default with acks=all),
        # and on MSK "It is not possible to WriteDataIdempotently to a topic by only providing
        # WriteData access to that topic" (MSK Developer Guide, "Create authorization policies
        # for the IAM role"): the action is granted on the cluster.
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["kafka-cluster:WriteDataIdempotently"],
            resource_arns=[self.cluster_arn],
        )

    def grant_consume(self, grantee: iam.IGrantable, topic: str, group: str) -> None:
        self._grant_connect(grantee)
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData"],
            resource_arns=[self.topic_arn(topic)],
        )
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"],
            resource_arns=[self.group_arn(group)],
        )

    def grant_topic_administration(self, grantee: iam.IGrantable, topics: Sequence[str]) -> None:
        """What telemetry/commands/topics.py needs, on exactly the declared topics. Its Kafka calls and
        their actions (MSK Developer Guide, "Semantics of IAM authorization policy actions and
        resources"): Metadata -> DescribeTopic; DescribeConfigs -> DescribeTopicDynamicConfiguration;
        CreateTopics (with retention.ms) -> CreateTopic; CreatePartitions -> AlterTopic;
        IncrementalAlterConfigs -> AlterTopicDynamicConfiguration. Topics are only ever created
        from msk.topics, which is deployed first, so their names are known here: no topic/* grant.
        The SASL/SCRAM users' ACLs are managed by the same tool over IAM ("You can invoke Apache
        Kafka ACL APIs for an MSK cluster that uses IAM access control", MSK Developer Guide, "IAM
        access control"): Kafka's CreateAcls and DeleteAcls need ALTER on the cluster, DescribeAcls
        DESCRIBE on the cluster (Kafka's AclApis), which are AlterCluster and DescribeCluster."""
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:AlterCluster"],
            resource_arns=[self.cluster_arn],
        )
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=[
                "kafka-cluster:DescribeTopic",
                "kafka-cluster:CreateTopic",
                "kafka-cluster:AlterTopic",
                "kafka-cluster:DescribeTopicDynamicConfiguration",
                "kafka-cluster:AlterTopicDynamicConfiguration",
            ],
            resource_arns=[self.topic_arn(topic) for topic in topics],
        )

    def _grant_connect(self, grantee: iam.IGrantable) -> None:
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"],
            resource_arns=[self.cluster_arn],
        )

"""A SASL/SCRAM user of the MSK cluster: its secret, the customer managed key that encrypts it, and
the secret's association with the cluster.

MSK's rules for such secrets (MSK Developer Guide, "Set up SASL/SCRAM authentication for an Amazon
MSK cluster"): the name begins with `AmazonMSK_`; the secret is encrypted with a customer managed
key, since "A secret created with the default AWS KMS key cannot be used with an Amazon MSK
cluster"; the value is JSON with `username` and `password`; the secret is associated with the
cluster (BatchAssociateScramSecret, here `AWS::MSK::BatchScramSecret`). Kafka ACLs, not IAM,
decide what the user may do once signed in.
"""

from __future__ import annotations

import json

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_msk as msk
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from stacks.compliance import acknowledge
from stacks.constructs.keys import rotating_key

# MSK reads associated secrets through its service-linked role.
MSK_SERVICE_LINKED_ROLE = "aws-service-role/kafka.amazonaws.com/AWSServiceRoleForKafka"


class ScramUser(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        secret_name: str,
        username: str,
        cluster_arn: str,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.username = username

        self.key = rotating_key(
            self,
            "SecretKey",
            description=f"Encrypts the MSK SCRAM secret {secret_name}",
            removal_policy=removal_policy,
        )
        # MSK decrypts the secret with its service-linked role, and only through Secrets Manager.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowMskToReadTheScramSecret",
                principals=[
                    iam.ArnPrincipal(
                        stack.format_arn(service="iam", region="", resource="role", resource_name=MSK_SERVICE_LINKED_ROLE)
                    )
                ],
                actions=["kms:Decrypt", "kms:DescribeKey"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"StringEquals": {"kms:ViaService": f"secretsmanager.{stack.region}.amazonaws.com"}},
            )
        )

        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            secret_name=secret_name,
            description=f"SASL/SCRAM credentials of MSK user {username}",
            encryption_key=self.key,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template=json.dumps({"username": username}),
                generate_string_key="password",
                # The password travels inside Kafka client properties and a get_secret() template:
                # no quotes or backslashes to escape.
                exclude_punctuation=True,
                password_length=40,
            ),
            removal_policy=removal_policy,
        )
        acknowledge(
            self.secret,
            "AwsSolutions-SMG4",
            "Secrets Manager has no managed rotation function for MSK SCRAM users; rotation is an "
            "operator step (new password in this secret) until a rotation function is built",
        )
        self.association = msk.CfnBatchScramSecret(
            self, "Association", cluster_arn=cluster_arn, secret_arn_list=[self.secret.secret_arn]
        )

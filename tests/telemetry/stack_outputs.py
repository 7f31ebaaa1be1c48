"""A session whose CloudFormation DescribeStacks is answered by botocore's Stubber (request and
response checked against the real API model), every other client being the session's own (moto)."""

from __future__ import annotations

import datetime
import json

from botocore.stub import Stubber

CREATED = datetime.datetime(2026, 11, 23, tzinfo=datetime.timezone.utc)  # the stand-in stack's CreationTime


def outputs_list(values: dict[str, str]) -> list[dict]:
    return [{"OutputKey": k, "OutputValue": v} for k, v in values.items()]


def stack_id(stack: str) -> str:
    return f"arn:aws:cloudformation:eu-west-1:111111111111:stack/{stack}/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"


class StubbedStackSession:
    """moto for EC2, Secrets Manager and SSM; DescribeStacks answered by a Stubber."""

    def __init__(self, session, stack: str, outputs: list[dict] | None):
        self.session, self.events = session, session.events
        self.cloudformation = session.client("cloudformation")
        self.stubber = Stubber(self.cloudformation)
        if outputs is None:
            self.stubber.add_client_error(
                "describe_stacks", "ValidationError", f"Stack with id {stack} does not exist", 400,
                expected_params={"StackName": stack},
            )
        else:
            self.stubber.add_response(
                "describe_stacks",
                # CreationTime as botocore parses it from a real answer (a timestamp), not a string.
                {"Stacks": [{"StackName": stack, "StackId": stack_id(stack), "CreationTime": CREATED,
                             "StackStatus": "CREATE_COMPLETE", "Outputs": outputs}]},
                {"StackName": stack},
            )
        self.stubber.activate()

    def client(self, name, **kwargs):
        return self.cloudformation if name == "cloudformation" else self.session.client(name, **kwargs)


def certificate_secret(issued) -> str:
    """A certificate secret as docs/deploy.md says to create it (the nodes read the PFX keys)."""
    return json.dumps({"certificate": issued.cert_pem, "private_key": issued.key_pem, "pfx": "cGZ4", "pfx_password": "pw"})


def dev_gateway(session, pki, endpoint: str) -> list[dict]:
    """dev's two certificate secrets in `session` (moto), and the ServiceFabric stack outputs that
    name them and the gateway at `endpoint`."""
    secrets = session.client("secretsmanager")
    secrets.create_secret(Name="telemetry-dev/service-fabric/cluster-certificate", SecretString=certificate_secret(pki.server))
    secrets.create_secret(Name="telemetry-dev/service-fabric/admin-certificate", SecretString=certificate_secret(pki.client))
    return outputs_list({
        "HttpGatewayEndpoint": endpoint,
        "ClusterCertificateSecret": "telemetry-dev/service-fabric/cluster-certificate",
        "AdminCertificateSecret": "telemetry-dev/service-fabric/admin-certificate",
    })  # fmt: skip

"""What happens to stateful resources when their stack is deleted."""

from aws_cdk import RemovalPolicy

from stacks.config import EnvironmentConfig


def removal_policy(config: EnvironmentConfig) -> RemovalPolicy:
    # Production data outlives its stack; other environments clean up after themselves.
    return RemovalPolicy.RETAIN if config.production else RemovalPolicy.DESTROY

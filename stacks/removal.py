"""What happens to stateful resources when their stack is deleted."""

from aws_cdk import RemovalPolicy

from stacks.config import EnvironmentConfig


def removal_policy(config: EnvironmentConfig) -> RemovalPolicy:
    """Production data outlives its stack (and a replacement); other environments clean up after
    themselves. In production a resource is still deleted when the stack operation that created
    it rolls back (DeletionPolicy RetainExceptOnCreate, CloudFormation User Guide, "DeletionPolicy
    attribute"): a failed first deployment leaves no named, retained resource behind that would
    stop the next one from creating it again."""
    return RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE if config.production else RemovalPolicy.DESTROY

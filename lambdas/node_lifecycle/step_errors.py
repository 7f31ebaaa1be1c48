"""How a failed step reaches its state machine: as one of three error names the definition matches.

Step Functions matches a Lambda error by the `errorType` the runtime reports, which is the
exception's class name, exactly: no inheritance, no prefixes (Step Functions Developer Guide,
"Error names"; Lambda Developer Guide, "AWS Lambda function errors in Python"). Naming every
exception that deserves another try in every Retry would miss the next one added, so the
handlers raise one of two kinds, and the original type leads the message:

- TransientError: worth another try, the same request may succeed later: the gateway did not
  answer or answered 5xx/not ready, a timeout, AWS throttling or an AWS 5xx.
- PermanentError: another try gets the same answer: a refusal by the cluster, a node that is
  not where the step needs it, bad input or settings, a TLS failure, a bug.
- ActionGone: Auto Scaling has no pending lifecycle action for the execution any more (another
  execution completed it, someone did by hand, or it timed out). Whatever the execution does next
  is another owner's to do: the scale-out state machine ends without touching the node.

stacks/constructs/lifecycle_workflows.py retries TransientError, routes ActionGone, and catches
everything.
"""

from __future__ import annotations

from types import SimpleNamespace

from botocore.exceptions import ClientError
from botocore.exceptions import ConnectionError as AwsConnectionError
from botocore.exceptions import HTTPClientError
from botocore.retries.standard import (
    RetryContext,
    ThrottledRetryableChecker,
    TransientRetryableChecker,
)
from sf_rest import FabricError, GatewayUnavailableError, TlsError, UpgradeInProgressError
from sf_rest.errors import CONNECT_FAILED, CONNECTION_LOST, READ_TIMEOUT, TRANSIENT_CODES

from .errors import ActionNoLongerPending

# Failures that got no usable answer from the gateway, or an answer that says "not now".
_FABRIC_TRANSIENT_CODES = TRANSIENT_CODES | {CONNECT_FAILED, CONNECTION_LOST, READ_TIMEOUT}
# botocore's own standard-mode view of throttling and transient AWS errors.
_THROTTLED, _TRANSIENT = ThrottledRetryableChecker(), TransientRetryableChecker()


class TransientError(Exception):
    """The step may succeed if run again later; the state machine retries it."""


class PermanentError(Exception):
    """Running the step again would get the same answer; the state machine goes to its
    failure path at once."""


class ActionGone(Exception):
    """The execution's lifecycle action is no longer pending; the state machine stops serving it."""


def is_transient(error: BaseException) -> bool:
    if isinstance(error, FabricError):
        if isinstance(error, TlsError):
            return False  # a certificate problem does not heal by waiting
        if isinstance(error, (GatewayUnavailableError, UpgradeInProgressError)):
            return True
        return error.code in _FABRIC_TRANSIENT_CODES
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        context = RetryContext(
            attempt_number=1,
            parsed_response=error.response,
            http_response=SimpleNamespace(status_code=status),
        )
        return _THROTTLED.is_retryable(context) or _TRANSIENT.is_retryable(context)
    return isinstance(error, (AwsConnectionError, HTTPClientError))


def as_step_error(error: BaseException) -> TransientError | PermanentError | ActionGone:
    """The error the state machine sees, its message led by the original type."""
    said = f"{type(error).__name__}: {error}"
    if isinstance(error, ActionNoLongerPending):
        return ActionGone(said)
    return (TransientError if is_transient(error) else PermanentError)(said)

"""Service Fabric REST client shared by the node lifecycle Lambdas and the operator command (telemetry/)."""

from .client import ServiceFabricClient
from .client_certificate import (
    ClientCertificate,
    certificate_thumbprint,
    remove_client_certificate,
    write_client_certificate,
)
from .errors import (
    ConfigurationUpgradeRefused,
    FabricError,
    GatewayUnavailableError,
    InvalidArgumentError,
    NodeIsUpError,
    NodeNotFoundError,
    TlsError,
    UpgradeInProgressError,
)
from .gateway import Timeouts
from .image_store import ImageStoreUploadError, UploadSession, upload_file
from .models import (
    ClusterConfigurationUpgradeStatus,
    ClusterHealth,
    HealthState,
    DeactivationIntent,
    DeactivationStatus,
    NodeInfo,
    NodeStatus,
    UpgradeHealthPolicy,
    UpgradeState,
)
from .retry import NO_RETRY, RetryPolicy

__all__ = [
    "ClientCertificate",
    "ClusterConfigurationUpgradeStatus",
    "ClusterHealth",
    "HealthState",
    "ImageStoreUploadError",
    "ConfigurationUpgradeRefused",
    "DeactivationIntent",
    "DeactivationStatus",
    "FabricError",
    "GatewayUnavailableError",
    "InvalidArgumentError",
    "NO_RETRY",
    "NodeInfo",
    "NodeIsUpError",
    "NodeNotFoundError",
    "NodeStatus",
    "RetryPolicy",
    "ServiceFabricClient",
    "Timeouts",
    "TlsError",
    "UpgradeHealthPolicy",
    "UpgradeInProgressError",
    "UpgradeState",
    "UploadSession",
    "certificate_thumbprint",
    "remove_client_certificate",
    "upload_file",
    "write_client_certificate",
]

"""An HTTP(S) emulator of the Service Fabric HTTP gateway, for tests.

    cluster = standard_cluster()                 # seed-0..2 and scale-0..1, all Up
    with SfEmulator(cluster, pki=make_pki(tmp)) as gateway:
        gateway.endpoint                         # https://127.0.0.1:<port>
        cluster.stop_host("scale-0")             # as if FabricHostSvc stopped
        gateway.inject_error(503, "FABRIC_E_NOT_READY", times=2)
        gateway.requests_to("POST", r"/Nodes/scale-0/\\$/Deactivate")

Pytest fixtures (sf_pki, sf_cluster, sf_emulator) are in `tests.sf_emulator.fixtures`.
"""

from .certs import Issued, Pki, make_pki
from .cluster import (
    ALL_INTENTS,
    DOCUMENTED_INTENTS,
    EmulatedCluster,
    EmulatedFabricError,
    EmulatedNode,
)
from .faults import Fault, FaultPlan
from .server import RecordedRequest, SfEmulator
from .standard import standard_cluster

__all__ = [
    "ALL_INTENTS",
    "DOCUMENTED_INTENTS",
    "EmulatedCluster",
    "EmulatedFabricError",
    "EmulatedNode",
    "Fault",
    "FaultPlan",
    "Issued",
    "Pki",
    "RecordedRequest",
    "SfEmulator",
    "make_pki",
    "standard_cluster",
]

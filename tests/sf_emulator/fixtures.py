"""Pytest fixtures; import them into a conftest.py:

from tests.sf_emulator.fixtures import sf_cluster, sf_emulator, sf_pki  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .certs import Pki, make_pki
from .cluster import EmulatedCluster
from .server import SfEmulator
from .standard import standard_cluster


@pytest.fixture(scope="session")
def sf_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A throwaway cluster CA, gateway server certificate and admin client certificate."""
    return make_pki(tmp_path_factory.mktemp("sf-pki"))


@pytest.fixture
def sf_cluster() -> EmulatedCluster:
    """Three seed nodes and two scaling nodes, Up and in the cluster configuration."""
    return standard_cluster()


@pytest.fixture
def sf_emulator(sf_cluster: EmulatedCluster, sf_pki: Pki) -> Iterator[SfEmulator]:
    """The gateway over HTTPS, requiring a client certificate signed by the cluster CA."""
    with SfEmulator(sf_cluster, pki=sf_pki) as emulator:
        yield emulator

"""Fixtures for the Service Fabric REST client tests: the HTTPS emulator and clients of it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sf_rest import RetryPolicy, ServiceFabricClient, Timeouts



@dataclass
class FakeTime:
    """Stands in for time.sleep/time.monotonic: sleeping only advances the clock."""

    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def fast_retry(fake_time: FakeTime) -> RetryPolicy:
    """4 attempts, 0.5 s doubling backoff, jitter pinned to its maximum, no real sleeping."""
    return RetryPolicy(
        max_attempts=4,
        max_elapsed_seconds=60.0,
        base_delay_seconds=0.5,
        max_delay_seconds=4.0,
        sleep=fake_time.sleep,
        clock=fake_time.clock,
        random=lambda: 1.0,
    )


# Generous for a loaded CI machine; tests of read timeouts pass their own.
TEST_TIMEOUTS = Timeouts(connect_seconds=5.0, read_seconds=5.0, server_seconds=1)


@pytest.fixture
def make_client(
    sf_emulator,
    sf_pki,
    fast_retry,
) -> Iterator[Callable[..., ServiceFabricClient]]:
    """Builds clients of the emulator; keyword arguments override the defaults."""
    made: list[ServiceFabricClient] = []

    def make(**overrides: Any) -> ServiceFabricClient:
        options: dict[str, Any] = dict(
            client_certificate=(sf_pki.client.cert_path, sf_pki.client.key_path),
            ca_bundle=sf_pki.ca_path,
            timeouts=TEST_TIMEOUTS,
            retry=fast_retry,
        )
        options.update(overrides)
        endpoint = options.pop("endpoint", sf_emulator.endpoint)
        client = ServiceFabricClient(endpoint, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def sf_client(make_client) -> ServiceFabricClient:
    return make_client()

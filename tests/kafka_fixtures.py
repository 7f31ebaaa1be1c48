"""A real single-node Kafka broker for every test that needs one (simulator, topics, S3 sink).

The broker gets a state folder of its own (and so its own port and data), so it never touches
the broker a developer started with `make demo` or `devtools/local_kafka.py start`. One broker
serves the whole session.
"""

import pytest

from devtools import local_kafka
from telemetry.commands.topics import everything_of


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("local-kafka")
    try:
        broker = local_kafka.start_broker(state_dir=state_dir)
    except local_kafka.LocalKafkaError as error:
        pytest.fail(f"could not start the local Kafka broker: {error}")
    yield broker
    local_kafka.stop_broker(state_dir)


# The policy-enforcing broker's identities: SASL/PLAIN users are fixed when the broker starts, so
# the session gets a pool; each test takes fresh ones and gives them exactly the ACLs it derives.
SUPER_USER = "harness-admin"
IDENTITY_POOL = tuple(f"identity-{index}" for index in range(1, 21))


class SecuredKafka:
    """The SASL broker, its super user's Admin client, and fresh identities to hand ACLs to."""

    def __init__(self, broker: local_kafka.Broker, passwords: dict[str, str]):
        self.broker = broker
        self.passwords = passwords
        self.admin = admin_client(broker.client_settings())
        self._unused = list(IDENTITY_POOL)

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers

    def new_identity(self, acls_for_principal) -> tuple[str, str]:
        """A user no test has used, given the ACLs acls_for_principal("User:<name>") returns
        (created with Kafka's Admin API as the super user); returns (user, password)."""
        if not self._unused:
            raise RuntimeError(f"all {len(IDENTITY_POOL)} identities of the session are taken")
        user = self._unused.pop(0)
        bindings = acls_for_principal(f"User:{user}")
        if bindings:
            for future in self.admin.create_acls(bindings).values():
                future.result(timeout=30)
            self.wait_until_enforced(f"User:{user}", len(set(bindings)))
        return user, self.passwords[user]

    def settings_for_grants(self, grants, monkeypatch, client_id: str) -> dict:
        """A tool's client settings (simulator.kafka_config) as a fresh SASL user holding exactly
        the ACLs the IAM `grants` translate to; the password goes where the tools read it."""
        from simulator.kafka_config import SASL_PASSWORD_ENV, connection_settings
        from tests.msk_authorization import acls_for_grants

        user, password = self.new_identity(lambda principal: acls_for_grants(grants, principal))
        monkeypatch.setenv(SASL_PASSWORD_ENV, password)
        return connection_settings(
            self.bootstrap_servers,
            security_protocol="SASL_PLAINTEXT",
            region=None,
            client_id=client_id,
            sasl_username=user,
        )

    def new_scram_user(self, name: str) -> str:
        """A SASL/SCRAM-SHA-512 user of the SCRAM listener, with no ACLs; returns its password.
        The credentials are stored with AlterUserScramCredentials as the super user, and the
        broker learns them from the metadata log: wait until the user can sign in."""
        import secrets
        import time

        from confluent_kafka import KafkaException
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        password = secrets.token_hex(12)
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        upsert = UserScramCredentialUpsertion(name, info, password.encode())
        for future in self.admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        client = admin_client(self.broker.scram_client_settings(name, password))
        deadline = time.monotonic() + 30
        while True:
            try:
                client.list_topics(timeout=5)
                return password
            except KafkaException:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"SCRAM user {name} could not sign in within 30 s") from None
                time.sleep(0.2)

    def reset_topic(self, name: str, *, partitions: int | None = None, retention_ms: int = 86_400_000) -> None:
        """As the super user: delete `name` if present, then create it with `partitions` when
        asked; wait until the broker's metadata shows the result."""
        import time

        from confluent_kafka.admin import NewTopic

        if name in self.admin.list_topics(timeout=30).topics:
            self.admin.delete_topics([name])[name].result(timeout=30)
        if partitions is not None:
            topic = NewTopic(name, partitions, 1, config={"retention.ms": str(retention_ms)})
            self.admin.create_topics([topic])[name].result(timeout=30)
        deadline = time.monotonic() + 30
        while (name in self.admin.list_topics(timeout=30).topics) != (partitions is not None):
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} did not settle in 30 s")
            time.sleep(0.2)

    def wait_until_enforced(self, principal: str, count: int) -> None:
        """CreateAcls returns once the controller has the ACLs; the broker's authorizer learns
        them from the metadata log a moment later, and a client that connects first is refused.
        DescribeAcls answers from that authorizer, so wait until it lists them all."""
        import time

        deadline = time.monotonic() + 30
        while len(self.admin.describe_acls(everything_of(principal)).result(timeout=30)) != count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not enforce the {count} ACLs of {principal} in 30 s")
            time.sleep(0.1)

    def remove_acls_of(self, principal: str) -> None:
        """Deletes every ACL of `principal` and waits until the broker enforces none."""
        for future in self.admin.delete_acls([everything_of(principal)]).values():
            future.result(timeout=30)
        self.wait_until_enforced(principal, 0)


def admin_client(settings: dict):
    from confluent_kafka.admin import AdminClient

    # log_level 0: failures surface as exceptions; no retry chatter after the broker stops.
    return AdminClient({**settings, "log_level": 0})


@pytest.fixture(scope="session")
def secured_kafka(tmp_path_factory):
    """A broker that authenticates every client (SASL/PLAIN, and SASL/SCRAM on a second listener)
    and enforces Kafka ACLs with nothing allowed by default, on 127.0.0.1; the harness administers
    it as a super user."""
    import secrets

    passwords = {name: secrets.token_hex(8) for name in (SUPER_USER, *IDENTITY_POOL)}
    state_dir = tmp_path_factory.mktemp("local-kafka-sasl")
    try:
        broker = local_kafka.start_broker(
            state_dir=state_dir, sasl_users=passwords, super_user=SUPER_USER
        )
    except local_kafka.LocalKafkaError as error:
        pytest.fail(f"could not start the SASL Kafka broker: {error}")
    yield SecuredKafka(broker, passwords)
    local_kafka.stop_broker(state_dir)

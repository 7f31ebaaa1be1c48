"""A command's sessions (telemetry/shared/sessions.py): one per Region, one client per service and
plain arguments, on real boto3 sessions answered by moto."""

from __future__ import annotations

import threading

import boto3
from botocore.config import Config

from telemetry.shared.sessions import CommandSession, command_sessions


def test_a_service_asked_for_again_is_the_client_made_before(moto_session):
    session = CommandSession(moto_session)
    ssm = session.client("ssm")
    assert session.client("ssm") is ssm
    assert session.client("ec2") is not ssm
    elsewhere = session.client("ssm", region_name="us-east-1")
    assert elsewhere is not ssm and elsewhere.meta.region_name == "us-east-1"
    assert session.client("ssm", region_name="us-east-1") is elsewhere
    ssm.put_parameter(Name="/telemetry/one", Value="1", Type="String")
    assert session.client("ssm").get_parameter(Name="/telemetry/one")["Parameter"]["Value"] == "1"


def test_a_client_asked_for_with_a_config_is_made_each_time(moto_session):
    """A botocore Config compares by identity: a client is not remembered by one."""
    session = CommandSession(moto_session)
    config = Config(retries={"max_attempts": 2, "mode": "standard"})
    first = session.client("iot", config=config)
    assert session.client("iot", config=config) is not first
    assert first.meta.config.retries["mode"] == "standard"


def test_a_client_asked_for_by_position_is_made_each_time(moto_session):
    session = CommandSession(moto_session)
    first = session.client("ssm", "us-east-1")
    assert first.meta.region_name == "us-east-1" and session.client("ssm", "us-east-1") is not first


def test_everything_but_clients_is_the_sessions_own(moto_session):
    session = CommandSession(moto_session)
    assert session.region_name == "eu-west-1"
    assert session.get_credentials().access_key == moto_session.get_credentials().access_key
    assert session.events is moto_session.events
    assert session._session is moto_session._session  # botocore's session, as boto3's names it


def test_each_region_is_asked_of_the_factory_once(moto_session):
    asked: list[str] = []

    def factory(region: str):
        asked.append(region)
        return boto3.Session(region_name=region)

    sessions = command_sessions(factory)
    ireland = sessions("eu-west-1")
    assert sessions("eu-west-1") is ireland and isinstance(ireland, CommandSession)
    assert sessions("us-east-1").region_name == "us-east-1"
    assert asked == ["eu-west-1", "us-east-1"]


def test_a_factory_that_gives_no_session_still_gives_none():
    assert command_sessions(lambda region: None)("eu-west-1") is None


def test_threads_asking_at_once_get_one_client(moto_session):
    """A session is not thread-safe ("Multithreading or multiprocessing with clients", boto3's
    guide): clients are made under a lock, and every thread gets the one made."""
    session = CommandSession(moto_session)
    start, got = threading.Barrier(8), []

    def ask() -> None:
        start.wait()
        got.append(session.client("sqs"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 8 and len({id(client) for client in got}) == 1

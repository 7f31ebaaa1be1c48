"""What the tests that run the sink job in its own JVM share."""

from __future__ import annotations

import pytest

from devtools import local_flink


@pytest.fixture(scope="session")
def java_classpath() -> str:
    """The job's compiled classes, its test classes (SinkJobRun) and every dependency
    (devtools/local_flink.py builds them with Maven, under a lock)."""
    try:
        return local_flink.test_classpath()
    except local_flink.LocalFlinkError as error:
        pytest.fail(str(error))

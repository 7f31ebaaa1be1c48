"""What the tests that run the sink job in its own JVM share."""

from __future__ import annotations

import fcntl
import os
import subprocess

import pytest

from tests.conftest import REPO

FLINK = REPO / "flink"


@pytest.fixture(scope="session")
def java_classpath(tmp_path_factory) -> str:
    """The job's compiled classes, its test classes (SinkJobRun) and every dependency. Maven runs
    under a lock: two test workers compiling into the same target folder would break each other."""
    out = tmp_path_factory.mktemp("flink-classpath") / "classpath.txt"
    (FLINK / "target").mkdir(exist_ok=True)
    with open(FLINK / "target" / ".pytest-mvn.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = subprocess.run(
            [
                "mvn", "-q", "-B", "-f", str(FLINK / "pom.xml"), "test-compile",
                "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath",
                "-Dmdep.includeScope=test", f"-Dmdep.outputFile={out}",
            ],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    if built.returncode != 0:
        pytest.fail(f"mvn test-compile failed:\n{built.stdout[-3000:]}{built.stderr[-3000:]}")
    target = FLINK / "target"
    return os.pathsep.join([str(target / "classes"), str(target / "test-classes"), out.read_text().strip()])

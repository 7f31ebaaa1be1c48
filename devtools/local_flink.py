"""The Flink sink job's build for local runs: the shipped jar (flink/target/telemetry-sink.jar) and
the class paths the tests and `make demo` run it with, built with Maven under a lock (two test
workers compiling into one target folder would break each other), and only when a source changed.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FLINK = REPO / "flink"
TARGET = FLINK / "target"
JAR = TARGET / "telemetry-sink.jar"
# Every dependency of the test scope: Flink itself (provided: the Managed Flink runtime supplies
# it), logging, the test utilities; written by maven-dependency-plugin's build-classpath.
DEPENDENCIES = TARGET / "test-classpath.txt"


class LocalFlinkError(Exception):
    pass


def _newest_source() -> float:
    sources = [FLINK / "pom.xml", *(p for p in (FLINK / "src").rglob("*") if p.is_file())]
    return max(p.stat().st_mtime for p in sources)


def _maven(*goals: str) -> None:
    TARGET.mkdir(exist_ok=True)
    with open(TARGET / ".pytest-mvn.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(FLINK / "pom.xml"), *goals],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
    if built.returncode != 0:
        raise LocalFlinkError(f"mvn {' '.join(goals)} failed:\n{built.stdout[-3000:]}{built.stderr[-3000:]}")


def _build_unless_fresh(goals: tuple[str, ...], *made: Path) -> None:
    """`mvn goals`, which also writes the dependency list, unless the list and every path in `made`
    exist and the list and the files among them are newer than every source under flink/."""
    paths = (DEPENDENCIES, *made)
    if all(p.exists() for p in paths) and min(p.stat().st_mtime for p in paths if p.is_file()) >= _newest_source():
        return
    _maven(*goals, "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath",
           "-Dmdep.includeScope=test", f"-Dmdep.outputFile={DEPENDENCIES}")  # fmt: skip
    # build-classpath leaves the list as it was when it did not change, and an old list would
    # have every later run build again: its date is the build's.
    DEPENDENCIES.touch()


def test_classpath() -> str:
    """The job's compiled classes, its test classes (SinkJobRun, ...) and every dependency,
    compiling both (mvn test-compile) when a source under flink/ is newer than the last build."""
    _build_unless_fresh(("test-compile",), TARGET / "classes", TARGET / "test-classes")
    return os.pathsep.join([str(TARGET / "classes"), str(TARGET / "test-classes"), DEPENDENCIES.read_text().strip()])


def job_classpath() -> str:
    """The shipped jar first, so the job's classes are the jar's, then the test classes (the
    Managed Flink stand-in, ManagedFlinkStandIn) and the dependencies, Flink among them. Packages
    the jar (mvn package -DskipTests, which compiles the tests too) when a source under flink/ is
    newer than it or than the dependency list."""
    _build_unless_fresh(("package", "-DskipTests"), JAR, TARGET / "test-classes")
    return os.pathsep.join([str(JAR), str(TARGET / "test-classes"), DEPENDENCIES.read_text().strip()])

"""The jar that ships (flink/target/telemetry-sink.jar) against what Managed Service for Apache Flink
puts on its class path.

What the service supplies, and the sources:
- Flink itself (flink-dist): every `provided` Flink jar of flink/pom.xml and what they pull in. A
  copy in the job's jar would be shadowed (Flink loads `org.apache.flink.` parent-first:
  CoreOptions.classloader.parent-first-patterns.default) or clash with it.
- The application properties reader, aws-kinesisanalytics-runtime: AWS's own Flink 2.2 example marks
  it provided (aws-samples/amazon-managed-service-for-apache-flink-examples, java/GettingStarted/pom.xml).
- The s3:// file system, as a plugin: Flink registers file system factories once, at process start,
  from its class path and plugins/ (FileSystem.initialize, called from TaskManagerRunner and
  ClusterEntrypoint), so a factory in a job's jar is never used. AWS's examples mark
  flink-s3-fs-hadoop provided ("On the Flink cluster it is installed as plugin", java/S3ParquetSource/pom.xml).
Not settled by any page: the exact contents of the service's lib/ and plugins/ for FLINK-2_2, and
whether it puts Hadoop on the parent class path; the jar carries the Hadoop classes parquet-hadoop
links against because flink-dist has none.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from devtools import local_flink

pytestmark = pytest.mark.integration

# The Flink artifacts shaded into the jar (flink/pom.xml, compile scope); every other Flink jar on
# the build's class path is the runtime's.
BUNDLED_FLINK = ("flink-connector-kafka-", "flink-parquet-", "flink-s3-fs-hadoop-")
# Test-only jars: not on the service's class path, and not in the jar.
TEST_ONLY = ("-tests.jar", "flink-test-utils")


@pytest.fixture(scope="module")
def shipped() -> tuple[set[str], list[Path]]:
    try:
        local_flink.job_classpath()  # packages the jar when a source under flink/ is newer
    except local_flink.LocalFlinkError as error:
        pytest.fail(str(error))
    entries = set(zipfile.ZipFile(local_flink.JAR).namelist())
    dependencies = [Path(p) for p in local_flink.DEPENDENCIES.read_text().strip().split(os.pathsep)]
    return entries, dependencies


def test_the_jar_holds_no_class_of_the_runtimes_flink(shipped):
    entries, dependencies = shipped
    runtime = [p for p in dependencies if "/org/apache/flink/" in p.as_posix()
               and not p.name.startswith(BUNDLED_FLINK) and not any(t in p.name for t in TEST_ONLY)]  # fmt: skip
    assert any(p.name.startswith("flink-runtime-") for p in runtime) and any(p.name.startswith("flink-core-") for p in runtime)
    classes = {e for e in entries if e.endswith(".class") and not e.startswith("META-INF/versions/")}
    for jar in runtime:
        # META-INF/versions/ copies are left out above: flink-shaded-jackson carries Jackson's
        # multi-release classes unrelocated, at the version the jar's own Jackson has.
        both = classes & set(zipfile.ZipFile(jar).namelist())
        assert not both, f"{jar.name} (the runtime's) and the jar both hold {sorted(both)[:5]}"


def test_the_jar_leaves_out_what_the_service_supplies(shipped):
    entries, _ = shipped
    assert not [e for e in entries if e.startswith("com/amazonaws/services/kinesisanalytics/runtime/")]
    # No second S3 file system: its classes and the service entries Flink would look for.
    assert not [e for e in entries if e.startswith("org/apache/flink/fs/")]
    assert not [e for e in entries if e.startswith("META-INF/services/org.apache.flink.core.fs.")
                or e.startswith("META-INF/services/org.apache.flink.core.security.token.")]  # fmt: skip
    assert not [e for e in entries if e.startswith("com/google/protobuf/")]  # flink-parquet's, unused


def test_the_jar_holds_what_the_job_links_against(shipped):
    entries, _ = shipped
    for needed in (
        "telemetry/sink/TelemetrySinkJob.class",
        "org/apache/flink/connector/kafka/source/KafkaSource.class",
        "org/apache/kafka/clients/consumer/KafkaConsumer.class",
        "software/amazon/msk/auth/iam/IAMClientCallbackHandler.class",
        "org/apache/flink/formats/parquet/ParquetWriterFactory.class",
        "org/apache/parquet/hadoop/ParquetWriter.class",
        # parquet-hadoop's writer takes a Hadoop Configuration; flink-dist has no Hadoop.
        "org/apache/hadoop/conf/Configuration.class",
        "com/fasterxml/jackson/core/JsonFactory.class",
    ):
        assert needed in entries, needed

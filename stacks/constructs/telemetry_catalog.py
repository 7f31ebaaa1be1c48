"""The Glue table Athena queries the telemetry Parquet files through, and an Athena workgroup.

Partitions are projected, not registered: Athena computes `dt=yyyy-MM-dd/hour=HH/` locations
from the query's predicates, so files are queryable the moment the Flink job commits them, with
no crawler and no `MSCK REPAIR TABLE`.
"""

from __future__ import annotations

from aws_cdk import Fn, Stack
from aws_cdk import aws_athena as athena
from aws_cdk import aws_glue as glue
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

# The Parquet schema the Flink job writes (flink/, TelemetryRecord), in Athena's type names.
TELEMETRY_COLUMNS = (
    ("run_id", "string"),
    ("producer_id", "string"),
    ("device_id", "string"),
    ("seq", "bigint"),
    ("sent_ns", "bigint"),
    ("event_time", "timestamp"),
    ("temperature_c", "double"),
    ("humidity_pct", "double"),
    ("battery_pct", "double"),
    ("lat", "double"),
    ("lon", "double"),
    ("status", "string"),
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
    ("ingest_time", "timestamp"),
    ("read_time", "timestamp"),
)
# UTC hour of the event time, or of the ingest time for a reading whose device clock is outside
# the projection (flink/, DeviceClock), as the job's bucket assigner writes it.
PARTITION_KEYS = (("dt", "string"), ("hour", "string"))

PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
PARQUET_INPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
PARQUET_OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"


def projection_parameters(*, location_template: str, start_date: str) -> dict[str, str]:
    return {
        "projection.enabled": "true",
        "projection.dt.type": "date",
        "projection.dt.format": "yyyy-MM-dd",
        "projection.dt.range": f"{start_date},NOW",
        "projection.dt.interval": "1",
        "projection.dt.interval.unit": "DAYS",
        "projection.hour.type": "integer",
        "projection.hour.range": "0,23",
        "projection.hour.digits": "2",
        "storage.location.template": location_template,
    }


class TelemetryCatalog(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        prefix: str,
        database_name: str,
        table_name: str,
        projection_start_date: str,
        workgroup_name: str,
        results_prefix: str,
        results_key: kms.IKey,
        delete_workgroup_with_history: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        account = Stack.of(self).account
        self.database_name = database_name
        self.table_name = table_name

        self.database = glue.CfnDatabase(
            self,
            "Database",
            catalog_id=account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=database_name, description="Telemetry written by the Managed Flink sink"
            ),
        )
        # Fn::Sub with `${!name}`: CloudFormation writes a literal `${dt}` for Athena to fill in.
        location_template = Fn.sub(
            f"s3://${{Bucket}}/{prefix}/dt=${{!dt}}/hour=${{!hour}}/", {"Bucket": bucket.bucket_name}
        )
        self.table = glue.CfnTable(
            self,
            "Table",
            catalog_id=account,
            database_name=database_name,
            table_input=glue.CfnTable.TableInputProperty(
                name=table_name,
                description="One row per telemetry message, partitioned by event date and hour (UTC; ingest time for an out-of-range device clock)",
                table_type="EXTERNAL_TABLE",
                parameters={
                    "classification": "parquet",
                    "EXTERNAL": "TRUE",
                    **projection_parameters(location_template=location_template, start_date=projection_start_date),
                },
                partition_keys=[glue.CfnTable.ColumnProperty(name=n, type=t) for n, t in PARTITION_KEYS],
                storage_descriptor=glue.CfnTable.StorageDescriptorProperty(
                    location=f"s3://{bucket.bucket_name}/{prefix}/",
                    input_format=PARQUET_INPUT,
                    output_format=PARQUET_OUTPUT,
                    serde_info=glue.CfnTable.SerdeInfoProperty(
                        serialization_library=PARQUET_SERDE, parameters={"serialization.format": "1"}
                    ),
                    columns=[glue.CfnTable.ColumnProperty(name=n, type=t) for n, t in TELEMETRY_COLUMNS],
                ),
            ),
        )
        self.table.add_resource_dependency(self.database)

        # Results are encrypted with the telemetry key and the settings are enforced, so a client
        # cannot write results unencrypted or elsewhere.
        self.workgroup = athena.CfnWorkGroup(
            self,
            "Workgroup",
            name=workgroup_name,
            description=f"Queries over {database_name}.{table_name}",
            recursive_delete_option=delete_workgroup_with_history,
            work_group_configuration=athena.CfnWorkGroup.WorkGroupConfigurationProperty(
                enforce_work_group_configuration=True,
                publish_cloud_watch_metrics_enabled=True,
                result_configuration=athena.CfnWorkGroup.ResultConfigurationProperty(
                    output_location=f"s3://{bucket.bucket_name}/{results_prefix}/",
                    encryption_configuration=athena.CfnWorkGroup.EncryptionConfigurationProperty(
                        encryption_option="SSE_KMS", kms_key=results_key.key_arn
                    ),
                ),
            ),
        )

package telemetry.sink.output;

import static org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName.BINARY;
import static org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName.DOUBLE;
import static org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName.INT32;
import static org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName.INT64;

import java.util.Map;
import org.apache.flink.formats.parquet.ParquetBuilder;
import org.apache.flink.formats.parquet.ParquetWriterFactory;
import org.apache.hadoop.conf.Configuration;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.api.WriteSupport;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.io.OutputFile;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.io.api.RecordConsumer;
import org.apache.parquet.schema.LogicalTypeAnnotation;
import org.apache.parquet.schema.LogicalTypeAnnotation.TimeUnit;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.Types;
import telemetry.sink.parse.TelemetryRecord;

/**
 * The Parquet layout of telemetry records. The Glue table is declared from the same column list
 * (names and types), so a change here is a change of the table's schema.
 */
public final class TelemetryParquet {
    /** Column names in file order; the Glue table declares the same. */
    public static final String[] COLUMNS = {
        "run_id", "producer_id", "device_id", "seq", "sent_ns", "event_time", "temperature_c",
        "humidity_pct", "battery_pct", "lat", "lon", "status", "kafka_partition", "kafka_offset",
        "ingest_time", "read_time"
    };

    public static final MessageType SCHEMA =
            Types.buildMessage()
                    .required(BINARY).as(LogicalTypeAnnotation.stringType()).named("run_id")
                    .required(BINARY).as(LogicalTypeAnnotation.stringType()).named("producer_id")
                    .required(BINARY).as(LogicalTypeAnnotation.stringType()).named("device_id")
                    .required(INT64).named("seq")
                    .required(INT64).named("sent_ns")
                    .required(INT64)
                    .as(LogicalTypeAnnotation.timestampType(true, TimeUnit.MILLIS))
                    .named("event_time")
                    .required(DOUBLE).named("temperature_c")
                    .required(DOUBLE).named("humidity_pct")
                    .required(DOUBLE).named("battery_pct")
                    .required(DOUBLE).named("lat")
                    .required(DOUBLE).named("lon")
                    .required(BINARY).as(LogicalTypeAnnotation.stringType()).named("status")
                    .required(INT32).named("kafka_partition")
                    .required(INT64).named("kafka_offset")
                    .required(INT64)
                    .as(LogicalTypeAnnotation.timestampType(true, TimeUnit.MILLIS))
                    .named("ingest_time")
                    .required(INT64)
                    .as(LogicalTypeAnnotation.timestampType(true, TimeUnit.MILLIS))
                    .named("read_time")
                    .named("telemetry");

    /** Row groups are buffered in memory per open part file; 32 MiB keeps a subtask's heap small. */
    static final int ROW_GROUP_BYTES = 32 * 1024 * 1024;

    private TelemetryParquet() {}

    /** The bulk writer factory FileSink uses: Snappy-compressed Parquet with the schema above. */
    public static ParquetWriterFactory<TelemetryRecord> writerFactory() {
        return new ParquetWriterFactory<>(new WriterBuilder());
    }

    private static final class WriterBuilder implements ParquetBuilder<TelemetryRecord> {
        private static final long serialVersionUID = 1L;

        @Override
        public ParquetWriter<TelemetryRecord> createWriter(OutputFile out) throws java.io.IOException {
            return new Builder(out)
                    .withCompressionCodec(CompressionCodecName.SNAPPY)
                    .withRowGroupSize((long) ROW_GROUP_BYTES)
                    .withDictionaryEncoding(true)
                    .build();
        }
    }

    private static final class Builder extends ParquetWriter.Builder<TelemetryRecord, Builder> {
        Builder(OutputFile file) {
            super(file);
        }

        @Override
        protected Builder self() {
            return this;
        }

        @Override
        protected WriteSupport<TelemetryRecord> getWriteSupport(Configuration conf) {
            return new TelemetryWriteSupport();
        }
    }

    /** Writes one record as one row, columns in {@link #COLUMNS} order. */
    static final class TelemetryWriteSupport extends WriteSupport<TelemetryRecord> {
        private RecordConsumer out;

        @Override
        public WriteContext init(Configuration configuration) {
            return new WriteContext(SCHEMA, Map.of("writer", "telemetry-sink"));
        }

        @Override
        public void prepareForWrite(RecordConsumer recordConsumer) {
            this.out = recordConsumer;
        }

        @Override
        public void write(TelemetryRecord record) {
            out.startMessage();
            string(0, record.runId);
            string(1, record.producerId);
            string(2, record.deviceId);
            int64(3, record.seq);
            int64(4, record.sentNs);
            int64(5, record.eventTimeMillis);
            float64(6, record.temperatureC);
            float64(7, record.humidityPct);
            float64(8, record.batteryPct);
            float64(9, record.lat);
            float64(10, record.lon);
            string(11, record.status);
            out.startField(COLUMNS[12], 12);
            out.addInteger(record.kafkaPartition);
            out.endField(COLUMNS[12], 12);
            int64(13, record.kafkaOffset);
            int64(14, record.ingestTimeMillis);
            int64(15, record.readTimeMillis);
            out.endMessage();
        }

        private void string(int index, String value) {
            out.startField(COLUMNS[index], index);
            out.addBinary(Binary.fromString(value));
            out.endField(COLUMNS[index], index);
        }

        private void int64(int index, long value) {
            out.startField(COLUMNS[index], index);
            out.addLong(value);
            out.endField(COLUMNS[index], index);
        }

        private void float64(int index, double value) {
            out.startField(COLUMNS[index], index);
            out.addDouble(value);
            out.endField(COLUMNS[index], index);
        }
    }
}

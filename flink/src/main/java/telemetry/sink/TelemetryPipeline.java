package telemetry.sink;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.SimpleStringEncoder;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.KafkaSourceBuilder;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.filesystem.OutputFileConfig;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.sink.filesystem.rollingpolicies.OnCheckpointRollingPolicy;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import telemetry.sink.config.SinkJobConfig;
import telemetry.sink.output.EventHourBucketAssigner;
import telemetry.sink.output.ProcessingHourBucketAssigner;
import telemetry.sink.output.SizeOrCheckpointRollingPolicy;
import telemetry.sink.output.TelemetryParquet;
import telemetry.sink.parse.KafkaMessage;
import telemetry.sink.parse.TelemetryRecord;

/**
 * The job graph: Kafka topic, parse, Parquet files by event hour (ingest hour for a device clock out
 * of range, counted); dead letters as JSON lines by processing hour, counted. The same graph runs on Managed Flink, locally, in the tests and the benchmark.
 */
public final class TelemetryPipeline {
    // Stable operator ids: state in a snapshot is matched to operators by these.
    static final String SOURCE_UID = "telemetry-kafka-source";
    static final String PARSE_UID = "parse-telemetry";
    static final String TELEMETRY_SINK_UID = "telemetry-parquet-sink";
    static final String SMOKE_SINK_UID = "smoke-parquet-sink";
    static final String DEAD_LETTER_SINK_UID = "dead-letter-sink";
    static final String DEAD_LETTER_COUNT_UID = "count-dead-letters";
    static final String CLOCK_COUNT_UID = "count-clock-out-of-range";
    static final String CLOCK_DISCARD_UID = "clock-out-of-range-counted";

    private TelemetryPipeline() {}

    /** Adds the job to env, reading the topic without end. */
    public static void attach(StreamExecutionEnvironment env, SinkJobConfig config) {
        attach(env, config, null);
    }

    /**
     * Adds the job to env. With stoppingOffsets the source ends there and the job finishes after
     * committing its files (the benchmark uses this); null reads without end.
     */
    public static void attach(StreamExecutionEnvironment env, SinkJobConfig config, OffsetsInitializer stoppingOffsets) {
        // Without object reuse every record is deep-copied between chained operators
        // (OperatorChain builds a CopyingChainingOutput, whose pushToOperator calls
        // TypeSerializer.copy; flink-runtime 2.2.0). Reuse is safe here: the deserializer and the
        // parser emit a new object per record, no operator keeps or modifies its input, and the
        // Parquet writer copies string values out (Binary.fromString) before the next record.
        env.getConfig().enableObjectReuse();
        SingleOutputStreamOperator<TelemetryRecord> records = env
                .fromSource(kafkaSource(config, stoppingOffsets), WatermarkStrategy.noWatermarks(), "telemetry topic")
                .uid(SOURCE_UID)
                .process(new ParseTelemetry(config.deviceClock(),
                        config.smokePath == null ? null : SinkJobConfig.SMOKE_RUN_PREFIX))
                .name("parse telemetry")
                .uid(PARSE_UID);

        records.sinkTo(telemetrySink(config, config.outputPath)).name("telemetry parquet").uid(TELEMETRY_SINK_UID);
        if (config.smokePath != null) {
            // The same Parquet files and hour partitions, under a prefix the table never reads.
            records.getSideOutput(ParseTelemetry.SMOKE)
                    .sinkTo(telemetrySink(config, config.smokePath))
                    .name("smoke parquet")
                    .uid(SMOKE_SINK_UID);
        }
        // Dead letters are rare: one task counts them all and writes them.
        records.getSideOutput(ParseTelemetry.DEAD_LETTERS)
                .map(new CountedInOneTask<String>(ParseTelemetry.DEAD_LETTER_METRIC))
                .setParallelism(1)
                .name("count dead letters")
                .uid(DEAD_LETTER_COUNT_UID)
                .sinkTo(deadLetterSink(config))
                .setParallelism(1)
                .name("dead letters")
                .uid(DEAD_LETTER_SINK_UID);
        records.getSideOutput(ParseTelemetry.CLOCK_OUT_OF_RANGE)
                .map(new CountedInOneTask<String>(ParseTelemetry.CLOCK_OUT_OF_RANGE_METRIC))
                .setParallelism(1)
                .name("count out-of-range device clocks")
                .uid(CLOCK_COUNT_UID)
                .sinkTo(new DiscardingSink<>())
                .setParallelism(1)
                .name("counted only")
                .uid(CLOCK_DISCARD_UID);
    }

    static KafkaSource<KafkaMessage> kafkaSource(SinkJobConfig config, OffsetsInitializer stoppingOffsets) {
        KafkaSourceBuilder<KafkaMessage> builder = KafkaSource.<KafkaMessage>builder()
                .setBootstrapServers(config.bootstrapServers)
                .setTopics(config.topic)
                .setGroupId(config.groupId)
                .setStartingOffsets(startingOffsets(config))
                .setDeserializer(new KafkaMessageDeserializer())
                .setProperties(config.kafkaClientProperties())
                // Offsets are committed to the group on each completed checkpoint (for lag
                // metrics and for a fresh start); a restored job uses its checkpointed offsets.
                .setProperty("commit.offsets.on.checkpoint", "true");
        if (stoppingOffsets != null) {
            builder.setBounded(stoppingOffsets);
        }
        return builder.build();
    }

    private static OffsetsInitializer startingOffsets(SinkJobConfig config) {
        switch (config.startingOffsets) {
            case EARLIEST:
                return OffsetsInitializer.earliest();
            case LATEST:
                return OffsetsInitializer.latest();
            case COMMITTED_EARLIEST:
            default:
                return OffsetsInitializer.committedOffsets(OffsetResetStrategy.EARLIEST);
        }
    }

    static FileSink<TelemetryRecord> telemetrySink(SinkJobConfig config, String basePath) {
        return FileSink.forBulkFormat(new Path(basePath), TelemetryParquet.writerFactory())
                .withBucketAssigner(new EventHourBucketAssigner())
                .withRollingPolicy(new SizeOrCheckpointRollingPolicy<>(config.maxPartSizeBytes()))
                .withOutputFileConfig(OutputFileConfig.builder().withPartPrefix("part").withPartSuffix(".parquet").build())
                .build();
    }

    static FileSink<String> deadLetterSink(SinkJobConfig config) {
        // Rolled on checkpoint only: dead letters are rare, and each checkpoint makes them visible.
        return FileSink.forRowFormat(new Path(config.deadLetterPath), new SimpleStringEncoder<String>("UTF-8"))
                .withBucketAssigner(new ProcessingHourBucketAssigner<>())
                .withRollingPolicy(OnCheckpointRollingPolicy.build())
                .withOutputFileConfig(OutputFileConfig.builder().withPartPrefix("part").withPartSuffix(".jsonl").build())
                .build();
    }
}

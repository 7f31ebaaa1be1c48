package telemetry.sink;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.parquet.schema.LogicalTypeAnnotation;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;
import telemetry.sink.config.SinkJobConfig;
import telemetry.sink.output.HourPartition;
import telemetry.sink.output.TelemetryParquet;
import telemetry.sink.testing.JobCounters;
import telemetry.sink.testing.LocalKafka;
import telemetry.sink.testing.LocalKafkaExtension;
import telemetry.sink.testing.SimulatorMessages;
import telemetry.sink.testing.SinkOutput;
import telemetry.sink.testing.TestJobs;

/** The real job graph, a real broker, the local file system behind the same FileSink code. */
@ExtendWith(LocalKafkaExtension.class)
class TelemetrySinkIntegrationTest {
    private static final String TOPIC = "telemetry-it";
    private static final int DEVICES = 40;
    private static final int MESSAGES_PER_DEVICE = 60;
    // 23:58:00 to 00:02:00 UTC: two hours and two dates; every 7th device reports hours later.
    private static final long START_NS = Instant.parse("2025-11-23T23:58:00Z").toEpochMilli() * 1_000_000L;
    private static final long STEP_NS = 4_000_000_000L; // 4 s between a device's messages
    private static final long LATE_NS = Duration.ofHours(5).toNanos();
    private static final int SMOKE_MESSAGES = 60;

    @Test
    void everyValidMessageLandsOnceInItsEventHourAndEveryMalformedOneIsADeadLetter(
            LocalKafka kafka, @TempDir Path dir) throws Exception {
        kafka.createTopic(TOPIC, 3);
        Map<String, String> malformed = malformedMessages();
        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        SimulatorMessages messages = new SimulatorMessages("it-run", "it-host", 300);
        for (int device = 0; device < DEVICES; device++) {
            for (long seq = 0; seq < MESSAGES_PER_DEVICE; seq++) {
                long sentNs = START_NS + seq * STEP_NS + device * 1_000L + (device % 7 == 0 ? LATE_NS : 0);
                byte[] key = messages.deviceId(device).getBytes(StandardCharsets.UTF_8);
                records.add(new ProducerRecord<>(TOPIC, key, messages.render(device % 2, device, seq, sentNs)));
            }
        }
        // Two devices with wrong clocks: reset to 1970, and a year ahead. Their readings are kept,
        // filed by the hour Kafka stamped them, and counted.
        long producedFrom = Instant.now().toEpochMilli();
        List<Long> wrongClocks = List.of(1_000_000_000L, Instant.now().plus(Duration.ofDays(365)).toEpochMilli() * 1_000_000L);
        for (int i = 0; i < wrongClocks.size(); i++) {
            int device = DEVICES + i;
            records.add(new ProducerRecord<>(TOPIC, messages.deviceId(device).getBytes(StandardCharsets.UTF_8),
                    messages.render(0, device, 0, wrongClocks.get(i))));
        }
        int valid = records.size();
        // A deployment's smoke run (telemetry deploy names them smoke-...): beside the lake, not in it.
        SimulatorMessages smoke = new SimulatorMessages(SinkJobConfig.SMOKE_RUN_PREFIX + "20261126-061500", "smoke-host", 300);
        for (long seq = 0; seq < SMOKE_MESSAGES; seq++) {
            records.add(new ProducerRecord<>(TOPIC, smoke.deviceId(0).getBytes(StandardCharsets.UTF_8),
                    smoke.render(0, 0, seq, START_NS + seq * STEP_NS)));
        }
        int position = 0;
        for (String value : malformed.keySet()) {
            // Spread among the valid messages, so parsing carries on after a bad one.
            byte[] bytes = value == null ? null : value.getBytes(StandardCharsets.ISO_8859_1);
            records.add(position, new ProducerRecord<>(TOPIC, null, bytes));
            position += valid / malformed.size();
        }
        try (KafkaProducer<byte[], byte[]> producer = kafka.producer()) {
            for (ProducerRecord<byte[], byte[]> record : records) {
                producer.send(record);
            }
            producer.flush();
        }

        Path output = dir.resolve("telemetry");
        Path deadLetters = dir.resolve("dead-letters");
        Path smokeOutput = dir.resolve("smoke");
        SinkJobConfig config = TestJobs.config(kafka.bootstrapServers(), TOPIC, output, deadLetters,
                Map.of("earliest.event.date", "2025-01-01", "max.clock.ahead.seconds", "300",
                        "smoke.path", smokeOutput.toUri().toString()));
        Configuration metrics = new Configuration();
        metrics.setString("metrics.reporter.counters.factory.class", JobCounters.Factory.class.getName());
        JobCounters.reset();
        StreamExecutionEnvironment env = TestJobs.localEnvironment(dir.resolve("checkpoints"), 500, null, metrics);
        TelemetryPipeline.attach(env, config);
        JobClient job = env.executeAsync("telemetry-sink-it");
        try {
            TestJobs.awaitUntil(Duration.ofSeconds(90),
                    () -> SinkOutput.committedRowCount(output) >= valid
                            && SinkOutput.committedRowCount(smokeOutput) >= SMOKE_MESSAGES
                            && SinkOutput.committedFiles(deadLetters, ".jsonl").size() > 0
                            && deadLetterCount(deadLetters) >= malformed.size(),
                    () -> "committed rows " + SinkOutput.committedRowCount(output) + " of " + valid
                            + ", dead letters " + deadLetterCount(deadLetters) + " of " + malformed.size());
            Thread.sleep(1500); // three more checkpoints: nothing may be committed twice
        } finally {
            TestJobs.cancel(job);
        }
        long producedTo = Instant.now().toEpochMilli();

        List<SinkOutput.Row> rows = SinkOutput.readRows(output);
        System.out.printf("integration: records in %d (%d valid, %d malformed), records out %d, dead letters %d%n",
                records.size(), valid, malformed.size(), rows.size(), deadLetterCount(deadLetters));
        assertThat(rows).hasSize(valid);
        assertThat(rows).noneMatch(r -> r.runId().startsWith(SinkJobConfig.SMOKE_RUN_PREFIX));
        List<SinkOutput.Row> smokeRows = SinkOutput.readRows(smokeOutput);
        assertThat(smokeRows).hasSize(SMOKE_MESSAGES)
                .allMatch(r -> r.runId().equals(SinkJobConfig.SMOKE_RUN_PREFIX + "20261126-061500"));
        assertThat(smokeRows.stream().map(SinkOutput.Row::partition).collect(Collectors.toSet()))
                .containsExactlyInAnyOrder("dt=2025-11-23/hour=23", "dt=2025-11-24/hour=00");
        assertThat(rows.stream().map(SinkOutput.Row::key).distinct().count()).isEqualTo(valid);
        for (SinkOutput.Row row : rows) {
            assertThat(row.eventTimeMillis()).isEqualTo(row.sentNs() / 1_000_000L);
            assertThat(row.ingestTimeMillis()).isBetween(producedFrom, producedTo);
            assertThat(row.readTimeMillis()).isBetween(row.ingestTimeMillis(), producedTo);
            long filedBy = wrongClocks.contains(row.sentNs()) ? row.ingestTimeMillis() : row.eventTimeMillis();
            assertThat(row.partition()).isEqualTo(HourPartition.of(filedBy).replace('/', java.io.File.separatorChar));
        }
        assertThat(rows.stream().filter(r -> wrongClocks.contains(r.sentNs()))).hasSize(2);
        assertThat(rows.stream().map(SinkOutput.Row::partition).filter(p -> p.startsWith("dt=2025-11-2"))
                .collect(Collectors.toSet()))
                .containsExactlyInAnyOrder("dt=2025-11-23/hour=23", "dt=2025-11-24/hour=00",
                        "dt=2025-11-24/hour=04", "dt=2025-11-24/hour=05");
        // Each count is one counter in one task, whatever the job's parallelism: one CloudWatch series.
        assertThat(TestJobs.PARALLELISM).isGreaterThan(1);
        assertThat(JobCounters.named(ParseTelemetry.DEAD_LETTER_METRIC)).singleElement()
                .satisfies(c -> assertThat(c.getCount()).isEqualTo(malformed.size()));
        assertThat(JobCounters.named(ParseTelemetry.CLOCK_OUT_OF_RANGE_METRIC)).singleElement()
                .satisfies(c -> assertThat(c.getCount()).isEqualTo(2));
        assertThat(rows.stream().map(SinkOutput.Row::kafkaPartition).collect(Collectors.toSet()))
                .containsExactlyInAnyOrder(0, 1, 2);
        SinkOutput.Row first = rows.stream().filter(r -> r.deviceId().equals("it-host-d000001") && r.seq() == 3)
                .findFirst().orElseThrow();
        assertThat(first.producerId()).isEqualTo("it-host/p01");
        assertThat(first.runId()).isEqualTo("it-run");
        assertThat(first.sentNs()).isEqualTo(START_NS + 3 * STEP_NS + 1_000L);
        assertThat(first.status()).isEqualTo("ok");
        assertThat(first.batteryPct()).isEqualTo(97.0);

        Path anyFile = SinkOutput.committedFiles(output, ".parquet").get(0);
        assertThat(anyFile.getFileName().toString()).startsWith("part-").endsWith(".parquet");
        assertColumnTypes(SinkOutput.schema(anyFile));

        List<JsonNode> letters = SinkOutput.readDeadLetters(deadLetters);
        assertThat(letters).hasSize(malformed.size());
        Map<String, String> reasonByValue = new HashMap<>();
        for (JsonNode letter : letters) {
            assertThat(letter.get("topic").asText()).isEqualTo(TOPIC);
            assertThat(letter.get("offset").asLong()).isNotNegative();
            assertThat(letter.get("kafka_timestamp").asText()).isNotEmpty();
            assertThat(letter.get("partition_dir").asText()).matches("dt=\\d{4}-\\d{2}-\\d{2}/hour=\\d{2}");
            String value = switch (letter.get("value_encoding").asText()) {
                case "none" -> null;
                case "base64" -> new String(java.util.Base64.getDecoder().decode(letter.get("value").asText()),
                        StandardCharsets.ISO_8859_1);
                default -> letter.get("value").asText();
            };
            reasonByValue.put(value, letter.get("reason").asText());
        }
        assertThat(reasonByValue.keySet()).containsExactlyInAnyOrderElementsOf(malformed.keySet());
        malformed.forEach((value, reason) -> assertThat(reasonByValue.get(value)).startsWith(reason));
    }

    /** Malformed values (ISO-8859-1 text, so any byte can appear) and the reason each must get. */
    private static Map<String, String> malformedMessages() {
        Map<String, String> malformed = new LinkedHashMap<>();
        malformed.put("not json at all", "malformed JSON");
        malformed.put("{\"run_id\":\"R\",\"producer_id\":\"h/p00\",\"device_id\":\"h-d000001\",\"seq\":1}",
                "missing field: sent_ns");
        malformed.put("{\"run_id\":\"R\",\"producer_id\":\"h/p00\",\"device_id\":\"h-d000001\",\"seq\":\"one\"}",
                "invalid field seq: expected an integer, got a string");
        malformed.put("[]", "not a JSON object");
        malformed.put("{\"run_id\":\"R\u00ff\u00fe\"}", "malformed JSON");
        malformed.put(null, "empty value");
        return malformed;
    }

    private static long deadLetterCount(Path deadLetters) {
        try {
            return SinkOutput.readDeadLetters(deadLetters).size();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static void assertColumnTypes(MessageType schema) {
        assertThat(schema.getFields().stream().map(f -> f.getName()).toList()).containsExactly(TelemetryParquet.COLUMNS);
        assertThat(schema.getType("seq").asPrimitiveType().getPrimitiveTypeName()).isEqualTo(PrimitiveTypeName.INT64);
        assertThat(schema.getType("kafka_partition").asPrimitiveType().getPrimitiveTypeName())
                .isEqualTo(PrimitiveTypeName.INT32);
        assertThat(schema.getType("event_time").asPrimitiveType().getPrimitiveTypeName())
                .isEqualTo(PrimitiveTypeName.INT64);
        assertThat(schema.getType("event_time").getLogicalTypeAnnotation())
                .isEqualTo(LogicalTypeAnnotation.timestampType(true, LogicalTypeAnnotation.TimeUnit.MILLIS));
        assertThat(schema.getType("status").getLogicalTypeAnnotation()).isEqualTo(LogicalTypeAnnotation.stringType());
        assertThat(schema.getType("lat").asPrimitiveType().getPrimitiveTypeName()).isEqualTo(PrimitiveTypeName.DOUBLE);
    }
}

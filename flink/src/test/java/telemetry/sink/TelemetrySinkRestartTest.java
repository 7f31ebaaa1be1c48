package telemetry.sink;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;
import telemetry.sink.config.SinkJobConfig;
import telemetry.sink.testing.LocalKafka;
import telemetry.sink.testing.LocalKafkaExtension;
import telemetry.sink.testing.SimulatorMessages;
import telemetry.sink.testing.SinkOutput;
import telemetry.sink.testing.TestJobs;

/**
 * Exactly once across a hard stop: the job is cancelled while data is flowing (after at least one
 * completed checkpoint), restarted from its last retained checkpoint, and fed more data; every
 * message must be committed exactly once.
 */
@ExtendWith(LocalKafkaExtension.class)
class TelemetrySinkRestartTest {
    private static final String TOPIC = "telemetry-restart";
    private static final int DEVICES = 100;
    private static final int FIRST_BATCH = 40_000; // paced over about 8 s
    private static final int SECOND_BATCH = 10_000;
    private static final int PACE_MESSAGES = 500;
    private static final long PACE_MILLIS = 100;
    private static final long CHECKPOINT_INTERVAL_MS = 300;
    private static final long START_NS = Instant.parse("2025-11-23T09:59:00Z").toEpochMilli() * 1_000_000L;

    @Test
    void cancelledAfterACheckpointAndRestoredLosesAndDuplicatesNothing(LocalKafka kafka, @TempDir Path dir)
            throws Exception {
        kafka.createTopic(TOPIC, 3);
        Path output = dir.resolve("telemetry");
        Path checkpoints = dir.resolve("checkpoints");
        SinkJobConfig config = TestJobs.config(kafka.bootstrapServers(), TOPIC, output, dir.resolve("dead-letters"), Map.of());
        SimulatorMessages messages = new SimulatorMessages("restart-run", "restart-host", 300);

        // First run: cancel it mid-stream, once checkpoints have committed a fair part of the batch.
        JobClient first = start(config, checkpoints, null);
        CompletableFuture<Void> firstBatch = CompletableFuture.runAsync(() -> produce(kafka, messages, 0, FIRST_BATCH, true));
        TestJobs.awaitUntil(Duration.ofSeconds(60),
                () -> TestJobs.latestCompletedCheckpoint(checkpoints).isPresent()
                        && SinkOutput.committedRowCount(output) >= FIRST_BATCH / 5,
                () -> "no completed checkpoint with committed output; rows " + SinkOutput.committedRowCount(output));
        boolean flowingAtCancel = !firstBatch.isDone();
        TestJobs.cancel(first);
        long committedByFirstRun = SinkOutput.committedRowCount(output);
        Path checkpoint = TestJobs.latestCompletedCheckpoint(checkpoints).orElseThrow();
        firstBatch.get();

        // The rest of the first batch and a second one arrive while the job is down.
        produce(kafka, messages, FIRST_BATCH, SECOND_BATCH, false);
        int recordsIn = FIRST_BATCH + SECOND_BATCH;

        JobClient second = start(config, checkpoints, checkpoint);
        try {
            TestJobs.awaitUntil(Duration.ofSeconds(90), () -> SinkOutput.committedRowCount(output) >= recordsIn,
                    () -> "committed rows " + SinkOutput.committedRowCount(output) + " of " + recordsIn);
            Thread.sleep(5 * CHECKPOINT_INTERVAL_MS); // later checkpoints must not add duplicates
        } finally {
            TestJobs.cancel(second);
        }

        List<SinkOutput.Row> rows = SinkOutput.readRows(output);
        long distinct = rows.stream().map(SinkOutput.Row::key).distinct().count();
        System.out.printf("restart: records in %d, records out %d (distinct %d); first run committed %d before"
                        + " it was cancelled %s, restored from %s%n",
                recordsIn, rows.size(), distinct, committedByFirstRun,
                flowingAtCancel ? "while data was flowing" : "after the first batch was written", checkpoint.getFileName());
        assertThat(flowingAtCancel).as("the first run was cancelled while messages were still arriving").isTrue();
        assertThat(committedByFirstRun).isBetween((long) FIRST_BATCH / 5, (long) FIRST_BATCH - 1);
        assertThat(rows).hasSize(recordsIn);
        assertThat(distinct).isEqualTo(recordsIn);
    }

    private static JobClient start(SinkJobConfig config, Path checkpoints, Path restoreFrom) throws Exception {
        StreamExecutionEnvironment env = TestJobs.localEnvironment(checkpoints, CHECKPOINT_INTERVAL_MS, restoreFrom);
        TelemetryPipeline.attach(env, config);
        return env.executeAsync(restoreFrom == null ? "telemetry-sink-first-run" : "telemetry-sink-restored");
    }

    /** Messages first .. first+count-1, numbered globally; seq runs per device. */
    private static void produce(LocalKafka kafka, SimulatorMessages messages, int first, int count, boolean paced) {
        try (KafkaProducer<byte[], byte[]> producer = kafka.producer()) {
            for (int i = first; i < first + count; i++) {
                int device = i % DEVICES;
                long seq = i / DEVICES;
                long sentNs = START_NS + i * 10_000_000L; // 10 ms apart: crosses 10:00 after 6,000
                byte[] key = messages.deviceId(device).getBytes(StandardCharsets.UTF_8);
                producer.send(new ProducerRecord<>(TOPIC, key, messages.render(device % 4, device, seq, sentNs)));
                if (paced && (i - first) % PACE_MESSAGES == PACE_MESSAGES - 1) {
                    producer.flush();
                    Thread.sleep(PACE_MILLIS);
                }
            }
            producer.flush();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }
}

package telemetry.sink.output;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.Locale;
import org.apache.flink.api.common.serialization.BulkWriter;
import org.apache.flink.core.fs.local.LocalDataOutputStream;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import telemetry.sink.parse.TelemetryParser;
import telemetry.sink.parse.TelemetryRecord;
import telemetry.sink.testing.SimulatorMessages;

/**
 * The arithmetic behind "no committed file under 1 MiB at 5,000 msg/s or more" (README, sink
 * section): one writer's share of one 60 s checkpoint interval, written with the job's Parquet
 * settings, must make at least 1 MiB. A change that shrinks a record in Parquet (another codec,
 * fewer columns) or a lower rate per writer shows up here, not in S3.
 */
class CheckpointPartSizeTest {
    private static final long MIB = 1L << 20;
    private static final int CHECKPOINT_SECONDS = 60;

    @TempDir
    Path dir;

    // cdk.json: parallelism 1 (dev), 2 (staging), 4 (prod); a fleet of 10,000 devices (the
    // benchmark's), keyed by device, so each writer sees its share of the devices. At parallelism
    // 4 the simulator's readings (1,024 variants per process) compress so well that 5,000 msg/s
    // makes 0.98 MiB (13.7 bytes a record); 5,200 msg/s makes 1.20 MiB (README, sink section).
    @ParameterizedTest(name = "parallelism {0} at {1} msg/s")
    @CsvSource({"1, 5000", "2, 5000", "4, 5200"})
    void oneWritersCheckpointIntervalMakesOneMib(int parallelism, int messagesPerSecond) throws Exception {
        int records = messagesPerSecond / parallelism * CHECKPOINT_SECONDS;
        int devices = 10_000 / parallelism;
        SimulatorMessages messages = new SimulatorMessages("run", "host", 512);
        long startNs = Instant.parse("2025-11-23T09:15:00Z").toEpochMilli() * 1_000_000L;
        long stepNs = CHECKPOINT_SECONDS * 1_000_000_000L / records;

        File file = dir.resolve("part.parquet").toFile();
        try (LocalDataOutputStream out = new LocalDataOutputStream(file)) {
            BulkWriter<TelemetryRecord> writer = TelemetryParquet.writerFactory().create(out);
            for (int i = 0; i < records; i++) {
                int device = i % devices;
                TelemetryRecord record = TelemetryParser.parse(messages.render(device % 4, device, i / devices, startNs + i * stepNs));
                record.kafkaPartition = device % 12;
                record.kafkaOffset = 1_000_000L + i;
                writer.addElement(record);
            }
            writer.finish();
        }
        long size = Files.size(file.toPath());
        System.out.printf(Locale.ROOT, "checkpoint part: parallelism %d, %,d records, %,d bytes (%.2f MiB), %.1f bytes/record%n",
                parallelism, records, size, size / (double) MIB, size / (double) records);
        assertThat(size).isGreaterThanOrEqualTo(MIB);
    }
}

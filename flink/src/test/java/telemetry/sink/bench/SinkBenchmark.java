package telemetry.sink.bench;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import telemetry.sink.TelemetryPipeline;
import telemetry.sink.config.SinkJobConfig;
import telemetry.sink.testing.LocalKafka;
import telemetry.sink.testing.SimulatorMessages;
import telemetry.sink.testing.SinkOutput;
import telemetry.sink.testing.TestJobs;

/**
 * Records per second through the real job graph in a local MiniCluster, from a pre-filled local
 * topic to committed Parquet files, and the sizes of the files written.
 *
 * <p>The source is bounded at the topic's end offsets, so the job finishes once everything is
 * read and its final checkpoint has committed the files. The measured time therefore includes
 * job start-up and up to one checkpoint interval of waiting for that last commit.
 */
public final class SinkBenchmark {
    private static final long PROGRESS_EVERY_MS = 5_000;

    public static void main(String[] args) throws Exception {
        Options options = Options.parse(args);
        Path workDir = Path.of(System.getProperty("build.dir", LocalKafka.repoRoot().resolve("flink/target").toString()))
                .resolve("bench-sink");
        deleteTree(workDir);
        Files.createDirectories(workDir);
        try (LocalKafka kafka = LocalKafka.start(workDir.resolve("kafka"), true)) {
            String topic = "telemetry-bench";
            kafka.createTopic(topic, options.partitions);
            fill(kafka, topic, options);
            run(kafka, topic, workDir, options);
        }
    }

    private static void fill(LocalKafka kafka, String topic, Options options) {
        SimulatorMessages messages = new SimulatorMessages("bench", "bench-host", options.messageBytes);
        // Event times cover 90 minutes in order, as a live fleet would send them: two hours.
        long startNs = Instant.parse("2025-11-23T09:15:00Z").toEpochMilli() * 1_000_000L;
        long stepNs = Duration.ofMinutes(90).toNanos() / options.messages;
        long began = System.nanoTime();
        long lastReport = began;
        try (KafkaProducer<byte[], byte[]> producer = kafka.producer()) {
            for (int i = 0; i < options.messages; i++) {
                int device = i % options.devices;
                byte[] key = messages.deviceId(device).getBytes(StandardCharsets.UTF_8);
                byte[] value = messages.render(device % 4, device, i / options.devices, startNs + i * stepNs);
                producer.send(new ProducerRecord<>(topic, key, value));
                if ((i & 0xffff) == 0 && System.nanoTime() - lastReport > TimeUnit.MILLISECONDS.toNanos(PROGRESS_EVERY_MS)) {
                    lastReport = System.nanoTime();
                    System.out.printf(Locale.ROOT, "filling topic: %,d of %,d messages%n", i, options.messages);
                }
            }
            producer.flush();
        }
        double seconds = (System.nanoTime() - began) / 1e9;
        System.out.printf(Locale.ROOT, "filled %s: %,d messages of %d bytes in %.1f s (%,.0f msg/s), %d partitions%n",
                topic, options.messages, options.messageBytes, seconds, options.messages / seconds, options.partitions);
    }

    private static void run(LocalKafka kafka, String topic, Path workDir, Options options) throws Exception {
        Path output = workDir.resolve("telemetry");
        SinkJobConfig config = TestJobs.config(kafka.bootstrapServers(), topic, output, workDir.resolve("dead-letters"),
                Map.of("max.part.size.mb", String.valueOf(options.maxPartSizeMb)));
        StreamExecutionEnvironment env = TestJobs.localEnvironment(workDir.resolve("checkpoints"),
                options.checkpointIntervalMs, null);
        env.setParallelism(options.parallelism);
        TelemetryPipeline.attach(env, config, OffsetsInitializer.latest());

        long began = System.nanoTime();
        JobClient job = env.executeAsync("telemetry-sink-bench");
        var result = job.getJobExecutionResult();
        while (true) {
            try {
                result.get(PROGRESS_EVERY_MS, TimeUnit.MILLISECONDS); // rethrows a job failure
                break;
            } catch (java.util.concurrent.TimeoutException stillRunning) {
                System.out.printf(Locale.ROOT, "%5.1f s: %,d rows committed%n",
                        (System.nanoTime() - began) / 1e9, SinkOutput.committedRowCount(output));
            }
        }
        double seconds = (System.nanoTime() - began) / 1e9;

        List<Path> files = SinkOutput.committedFiles(output, ".parquet");
        List<Long> sizes = new ArrayList<>();
        for (Path file : files) {
            sizes.add(Files.size(file));
        }
        sizes.sort(Comparator.naturalOrder());
        long rows = SinkOutput.committedRowCount(output);
        long bytes = sizes.stream().mapToLong(Long::longValue).sum();
        Map<String, Object> report = new LinkedHashMap<>();
        report.put("messages", options.messages);
        report.put("message_bytes", options.messageBytes);
        report.put("partitions", options.partitions);
        report.put("parallelism", options.parallelism);
        report.put("checkpoint_interval_ms", options.checkpointIntervalMs);
        report.put("max_part_size_mb", options.maxPartSizeMb);
        report.put("rows_committed", rows);
        report.put("seconds", round(seconds));
        report.put("records_per_second", Math.round(rows / seconds));
        report.put("files", files.size());
        report.put("file_bytes_min", sizes.isEmpty() ? 0 : sizes.get(0));
        report.put("file_bytes_median", sizes.isEmpty() ? 0 : sizes.get(sizes.size() / 2));
        report.put("file_bytes_max", sizes.isEmpty() ? 0 : sizes.get(sizes.size() - 1));
        report.put("bytes_total", bytes);
        report.put("bytes_per_record", rows == 0 ? 0 : round((double) bytes / rows));
        report.put("partitions_written", files.stream().map(f -> output.relativize(f.getParent()).toString()).distinct().sorted().toList());

        System.out.printf(Locale.ROOT, "sink: %,d rows committed in %.1f s (start-up and final checkpoint included):"
                        + " %,.0f records/s at parallelism %d%n", rows, seconds, rows / seconds, options.parallelism);
        System.out.printf(Locale.ROOT, "files: %d Parquet files in %s; size min %s, median %s, max %s; %.1f bytes/record"
                        + " (from %d-byte JSON messages)%n", files.size(), report.get("partitions_written"),
                human(sizes.isEmpty() ? 0 : sizes.get(0)), human(sizes.isEmpty() ? 0 : sizes.get(sizes.size() / 2)),
                human(sizes.isEmpty() ? 0 : sizes.get(sizes.size() - 1)), rows == 0 ? 0.0 : (double) bytes / rows,
                options.messageBytes);
        if (rows != options.messages) {
            throw new IllegalStateException("committed " + rows + " rows for " + options.messages + " messages");
        }
        if (options.report != null) {
            Files.createDirectories(options.report.toAbsolutePath().getParent());
            Files.writeString(options.report, toJson(report) + "\n");
            System.out.println("wrote " + options.report);
        }
    }

    private static double round(double value) {
        return Math.round(value * 10.0) / 10.0;
    }

    private static String human(long bytes) {
        return bytes >= 1 << 20 ? String.format(Locale.ROOT, "%.1f MiB", bytes / 1048576.0)
                : String.format(Locale.ROOT, "%.1f KiB", bytes / 1024.0);
    }

    private static String toJson(Map<String, Object> report) {
        StringBuilder json = new StringBuilder("{\n");
        int i = 0;
        for (Map.Entry<String, Object> entry : report.entrySet()) {
            Object value = entry.getValue();
            String rendered = value instanceof List<?> list
                    ? list.stream().map(v -> "\"" + v + "\"").reduce((a, b) -> a + ", " + b).map(s -> "[" + s + "]").orElse("[]")
                    : String.valueOf(value);
            json.append("  \"").append(entry.getKey()).append("\": ").append(rendered)
                    .append(++i < report.size() ? ",\n" : "\n");
        }
        return json.append("}").toString();
    }

    private static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (var paths = Files.walk(root)) {
            for (Path path : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(path);
            }
        }
    }

    /** Command-line options: --messages N --message-bytes N --partitions N --parallelism N ... */
    private static final class Options {
        int messages = 1_000_000;
        int messageBytes = 512; // the simulator's default --message-bytes
        int devices = 10_000;
        int partitions = 4;
        int parallelism = 2;
        long checkpointIntervalMs = 5_000;
        int maxPartSizeMb = SinkJobConfig.DEFAULT_MAX_PART_SIZE_MB;
        Path report;

        static Options parse(String[] args) {
            Options options = new Options();
            for (int i = 0; i < args.length; i++) {
                String flag = args[i];
                if (flag.equals("--help")) {
                    System.out.println("SinkBenchmark [--messages N] [--message-bytes N] [--devices N] [--partitions N]"
                            + " [--parallelism N] [--checkpoint-interval-ms N] [--max-part-size-mb N] [--report FILE]");
                    System.exit(0);
                }
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException(flag + " needs a value (see --help)");
                }
                String value = args[++i];
                switch (flag) {
                    case "--messages" -> options.messages = Integer.parseInt(value);
                    case "--message-bytes" -> options.messageBytes = Integer.parseInt(value);
                    case "--devices" -> options.devices = Integer.parseInt(value);
                    case "--partitions" -> options.partitions = Integer.parseInt(value);
                    case "--parallelism" -> options.parallelism = Integer.parseInt(value);
                    case "--checkpoint-interval-ms" -> options.checkpointIntervalMs = Long.parseLong(value);
                    case "--max-part-size-mb" -> options.maxPartSizeMb = Integer.parseInt(value);
                    case "--report" -> options.report = Path.of(value);
                    default -> throw new IllegalArgumentException("unknown option " + flag + " (see --help)");
                }
            }
            return options;
        }
    }
}

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
import org.apache.flink.configuration.Configuration;
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
 * read and its final checkpoint has committed the files. One run reports three figures: start-up
 * (submission to the first record written), the steady rate over the middle of the topic (see
 * {@link Steady}), and the whole run including start-up and the wait for the last commit. Kafka's
 * own ConsumerPerformance reads the same topic first, as the anchor.
 */
public final class SinkBenchmark {
    private static final long PROGRESS_EVERY_MS = 5_000;
    private static final long SAMPLE_EVERY_MS = 100;
    private static final double STEADY_FROM = 0.2;
    private static final double STEADY_TO = 0.8;
    /** The FileSink's writer: Flink names a sink's writer operator "<sink name>: Writer". */
    private static final String SINK_WRITER_OPERATOR = "telemetry parquet: Writer";

    public static void main(String[] args) throws Exception {
        Options options;
        try {
            options = Options.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("SinkBenchmark: " + e.getMessage());
            System.exit(2);
            return;
        }
        Path workDir = Path.of(System.getProperty("build.dir", LocalKafka.repoRoot().resolve("flink/target").toString()))
                .resolve("bench-sink");
        deleteTree(workDir);
        Files.createDirectories(workDir);
        try (LocalKafka kafka = LocalKafka.start(workDir.resolve("kafka"), true)) {
            String topic = "telemetry-bench";
            kafka.createTopic(topic, options.partitions);
            fill(kafka, topic, options);
            options.anchor = consumerPerformance(kafka, topic, options);
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

    /**
     * Kafka's own consumer benchmark over the same topic, from the jars devtools/local_kafka.py
     * fetched: the rate one plain consumer reaches on this machine and broker, the anchor for the
     * sink's figures. Run before the job, not beside it, so the two do not share the cores.
     */
    private static ConsumerPerformance consumerPerformance(LocalKafka kafka, String topic, Options options)
            throws IOException, InterruptedException {
        Path libs = LocalKafka.repoRoot().resolve(".cache/kafka/libs");
        List<String> command = List.of("java", "-Xmx512m", "-cp", libs + "/*", "org.apache.kafka.tools.ConsumerPerformance",
                "--bootstrap-server", kafka.bootstrapServers(), "--topic", topic,
                "--messages", String.valueOf(options.messages), "--group", "consumer-performance-" + System.nanoTime(),
                "--timeout", "60000", "--hide-header");
        Process process = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.DISCARD).start();
        List<String> lines = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8).lines().toList();
        if (!process.waitFor(5, TimeUnit.MINUTES) || process.exitValue() != 0) {
            throw new IllegalStateException("ConsumerPerformance failed: " + lines);
        }
        // One CSV line (kafka-tools 4.1.0, ConsumerPerformance.printStats): start.time, end.time,
        // data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
        // fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec. fetch.* leave out the group join.
        String last = lines.isEmpty() ? "" : lines.get(lines.size() - 1);
        String[] fields = last.split(",\\s*");
        if (fields.length < 10) {
            throw new IllegalStateException("ConsumerPerformance printed " + lines);
        }
        long consumed = Long.parseLong(fields[4]);
        if (consumed < options.messages) {
            throw new IllegalStateException("ConsumerPerformance read " + consumed + " of " + options.messages + " messages");
        }
        ConsumerPerformance result = new ConsumerPerformance(consumed, Double.parseDouble(fields[5]),
                Long.parseLong(fields[6]), Long.parseLong(fields[7]), Double.parseDouble(fields[9]));
        System.out.printf(Locale.ROOT, "ConsumerPerformance (one Kafka consumer, same topic): %,d messages,"
                        + " %,.0f records/s while fetching (%,d ms), %,.0f records/s with the %,d ms group join%n",
                consumed, result.fetchRecordsPerSecond, result.fetchMs, result.recordsPerSecond, result.rebalanceMs);
        return result;
    }

    record ConsumerPerformance(long messages, double recordsPerSecond, long rebalanceMs, long fetchMs,
                               double fetchRecordsPerSecond) {}

    /**
     * (nanoTime since submission, records handed to the Parquet writers so far, CPU time of this
     * JVM so far). The MiniCluster runs in this JVM; the broker and the other benchmarks on the
     * machine do not, so CPU per record hardly moves when they compete for the cores.
     */
    record Sample(long nanos, long records, long cpuNanos) {}

    private static final com.sun.management.OperatingSystemMXBean OS =
            (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();

    private static void run(LocalKafka kafka, String topic, Path workDir, Options options) throws Exception {
        Path output = workDir.resolve("telemetry");
        SinkJobConfig config = TestJobs.config(kafka.bootstrapServers(), topic, output, workDir.resolve("dead-letters"),
                Map.of("max.part.size.mb", String.valueOf(options.maxPartSizeMb)));
        Configuration metrics = new Configuration();
        metrics.setString("metrics.reporter.records.factory.class", RecordCounters.Factory.class.getName());
        RecordCounters.operatorName = SINK_WRITER_OPERATOR;
        StreamExecutionEnvironment env = TestJobs.localEnvironment(workDir.resolve("checkpoints"),
                options.checkpointIntervalMs, null, metrics);
        env.setParallelism(options.parallelism);
        TelemetryPipeline.attach(env, config, OffsetsInitializer.latest());

        long began = System.nanoTime();
        JobClient job = env.executeAsync("telemetry-sink-bench");
        var result = job.getJobExecutionResult();
        List<Sample> samples = new ArrayList<>();
        long lastProgress = began;
        while (true) {
            try {
                result.get(SAMPLE_EVERY_MS, TimeUnit.MILLISECONDS); // rethrows a job failure
                break;
            } catch (java.util.concurrent.TimeoutException stillRunning) {
                long now = System.nanoTime();
                samples.add(new Sample(now - began, RecordCounters.total(), OS.getProcessCpuTime()));
                if (now - lastProgress >= TimeUnit.MILLISECONDS.toNanos(PROGRESS_EVERY_MS)) {
                    lastProgress = now;
                    System.out.printf(Locale.ROOT, "%5.1f s: %,d records written, %,d rows committed%n",
                            (now - began) / 1e9, RecordCounters.total(), SinkOutput.committedRowCount(output));
                }
            }
        }
        double seconds = (System.nanoTime() - began) / 1e9;
        if (RecordCounters.COUNTERS.size() != options.parallelism) {
            throw new IllegalStateException("found " + RecordCounters.COUNTERS.size() + " numRecordsIn counters of \""
                    + SINK_WRITER_OPERATOR + "\" for parallelism " + options.parallelism);
        }
        Steady steady = Steady.of(samples, options.messages);

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
        report.put("startup_seconds", round(steady.startupSeconds));
        report.put("steady_records_per_second", Math.round(steady.recordsPerSecond));
        report.put("steady_window_seconds", round(steady.windowSeconds));
        report.put("steady_window_records", steady.windowRecords);
        report.put("steady_cpu_microseconds_per_record", round(steady.cpuMicrosPerRecord * 10) / 10);
        report.put("consumer_performance_records_per_second", Math.round(options.anchor.fetchRecordsPerSecond));
        report.put("consumer_performance_records_per_second_with_join", Math.round(options.anchor.recordsPerSecond));
        report.put("files", files.size());
        report.put("file_bytes_min", sizes.isEmpty() ? 0 : sizes.get(0));
        report.put("file_bytes_median", sizes.isEmpty() ? 0 : sizes.get(sizes.size() / 2));
        report.put("file_bytes_max", sizes.isEmpty() ? 0 : sizes.get(sizes.size() - 1));
        report.put("bytes_total", bytes);
        report.put("bytes_per_record", rows == 0 ? 0 : round((double) bytes / rows));
        report.put("partitions_written", files.stream().map(f -> output.relativize(f.getParent()).toString()).distinct().sorted().toList());

        System.out.printf(Locale.ROOT, "start-up: %.1f s from job submission to the first record written to a Parquet writer%n",
                steady.startupSeconds);
        System.out.printf(Locale.ROOT, "steady: %,.0f records/s at parallelism %d (records written to the Parquet writers"
                        + " between %.0f%% and %.0f%% of the topic: %,d records in %.1f s)%n", steady.recordsPerSecond,
                options.parallelism, STEADY_FROM * 100, STEADY_TO * 100, steady.windowRecords, steady.windowSeconds);
        System.out.printf(Locale.ROOT, "steady CPU: %.2f µs of this JVM's CPU time per record in that window"
                + " (the MiniCluster's threads; not the broker's)%n", steady.cpuMicrosPerRecord);
        System.out.printf(Locale.ROOT, "whole run: %,d rows committed in %.1f s (start-up and final checkpoint included):"
                        + " %,.0f records/s%n", rows, seconds, rows / seconds);
        System.out.printf(Locale.ROOT, "anchor: ConsumerPerformance %,.0f records/s (one consumer, no parsing, no writing)%n",
                options.anchor.fetchRecordsPerSecond);
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

    /**
     * Start-up and the steady rate from the samples of the writers' numRecordsIn (records parsed
     * and handed to the Parquet writers, summed over subtasks). That counter moves with every
     * record, unlike committed rows, which move only at checkpoints. The window runs from the
     * sample where 20% of the topic had been written to the last sample before 80%: well after
     * start-up, and before the end, where readers that finish their partitions early leave
     * fewer readers running. A record counted there is committed at the next checkpoint; the
     * count of committed rows at the end is checked against the topic.
     */
    record Steady(double startupSeconds, double recordsPerSecond, double windowSeconds, long windowRecords,
                  double cpuMicrosPerRecord) {
        static Steady of(List<Sample> samples, long messages) {
            Sample first = samples.stream().filter(s -> s.records() > 0).findFirst()
                    .orElseThrow(() -> new IllegalStateException("no record was written while the job ran"));
            Sample from = samples.stream().filter(s -> s.records() >= STEADY_FROM * messages).findFirst().orElse(null);
            Sample to = null;
            for (Sample sample : samples) {
                if (sample.records() <= STEADY_TO * messages) {
                    to = sample;
                }
            }
            if (from == null || to == null || to.nanos() - from.nanos() < TimeUnit.SECONDS.toNanos(2)) {
                throw new IllegalStateException("the run was too short for a steady window; use more --messages");
            }
            double window = (to.nanos() - from.nanos()) / 1e9;
            long records = to.records() - from.records();
            return new Steady(first.nanos() / 1e9, records / window, window, records,
                    (to.cpuNanos() - from.cpuNanos()) / 1e3 / records);
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
        int messages = 3_000_000;
        int messageBytes = 512; // the simulator's default --message-bytes
        int devices = 10_000;
        int partitions = 4;
        int parallelism = 2;
        long checkpointIntervalMs = 5_000;
        int maxPartSizeMb = SinkJobConfig.DEFAULT_MAX_PART_SIZE_MB;
        Path report;
        ConsumerPerformance anchor;

        private static long number(String flag, String value) {
            try {
                return Long.parseLong(value);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(flag + " needs a whole number, got \"" + value + "\"");
            }
        }

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
                    case "--messages" -> options.messages = (int) number(flag, value);
                    case "--message-bytes" -> options.messageBytes = (int) number(flag, value);
                    case "--devices" -> options.devices = (int) number(flag, value);
                    case "--partitions" -> options.partitions = (int) number(flag, value);
                    case "--parallelism" -> options.parallelism = (int) number(flag, value);
                    case "--checkpoint-interval-ms" -> options.checkpointIntervalMs = number(flag, value);
                    case "--max-part-size-mb" -> options.maxPartSizeMb = (int) number(flag, value);
                    case "--report" -> options.report = Path.of(value);
                    default -> throw new IllegalArgumentException("unknown option " + flag + " (see --help)");
                }
            }
            if (options.messages <= 0 || options.messageBytes <= 0 || options.devices <= 0 || options.partitions <= 0
                    || options.parallelism <= 0 || options.checkpointIntervalMs < 100 || options.maxPartSizeMb <= 0) {
                throw new IllegalArgumentException("--messages, --message-bytes, --devices, --partitions, --parallelism and"
                        + " --max-part-size-mb must be positive, --checkpoint-interval-ms at least 100 (see --help)");
            }
            return options;
        }
    }
}

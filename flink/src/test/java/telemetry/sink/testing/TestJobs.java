package telemetry.sink.testing;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import java.util.stream.Stream;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import telemetry.sink.config.SinkJobConfig;

/** Running the real job graph in a local MiniCluster, and waiting for what it writes. */
public final class TestJobs {
    public static final int PARALLELISM = 2;

    private TestJobs() {}

    /** The job's configuration for a local broker and local output directories. */
    public static SinkJobConfig config(String bootstrapServers, String topic, Path output, Path deadLetters,
                                       Map<String, String> sinkOverrides) {
        Properties kafka = new Properties();
        kafka.setProperty("bootstrap.servers", bootstrapServers);
        kafka.setProperty("topic", topic);
        kafka.setProperty("group.id", "telemetry-sink-" + topic);
        kafka.setProperty("security.protocol", "PLAINTEXT");
        kafka.setProperty("starting.offsets", "committed-earliest");
        Properties sink = new Properties();
        sink.setProperty("output.path", output.toUri().toString());
        sink.setProperty("dead.letter.path", deadLetters.toUri().toString());
        sinkOverrides.forEach(sink::setProperty);
        Map<String, Properties> groups = new HashMap<>();
        groups.put(SinkJobConfig.KAFKA_GROUP, kafka);
        groups.put(SinkJobConfig.SINK_GROUP, sink);
        return SinkJobConfig.from(groups);
    }

    /**
     * A local environment (its own MiniCluster per job) that checkpoints every intervalMs into
     * checkpoints/, keeps the last checkpoint when the job is cancelled, does not restart a
     * failed job (a failure should fail the test), and restores from restoreFrom when given.
     */
    public static StreamExecutionEnvironment localEnvironment(Path checkpoints, long intervalMs, Path restoreFrom) {
        return localEnvironment(checkpoints, intervalMs, restoreFrom, new Configuration());
    }

    /** As above, with extra settings (metric reporters, ...) added to the MiniCluster's. */
    public static StreamExecutionEnvironment localEnvironment(Path checkpoints, long intervalMs, Path restoreFrom,
                                                              Configuration extra) {
        Configuration conf = new Configuration();
        conf.addAll(extra);
        conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(intervalMs));
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints.toUri().toString());
        conf.set(CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
                ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "disable");
        if (restoreFrom != null) {
            conf.set(StateRecoveryOptions.SAVEPOINT_PATH, restoreFrom.toUri().toString());
        }
        return StreamExecutionEnvironment.createLocalEnvironment(PARALLELISM, conf);
    }

    /** Cancels the job and waits until it has stopped. */
    public static void cancel(JobClient job) throws Exception {
        job.cancel().get(60, TimeUnit.SECONDS);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline) {
            try {
                if (job.getJobStatus().get(10, TimeUnit.SECONDS).isGloballyTerminalState()) {
                    return;
                }
            } catch (Exception e) {
                return; // the per-job MiniCluster is gone: the job has stopped
            }
            Thread.sleep(100);
        }
        throw new IllegalStateException("job " + job.getJobID() + " did not stop within 60 s");
    }

    /** The newest checkpoint under root whose metadata was written (i.e. it completed). */
    public static Optional<Path> latestCompletedCheckpoint(Path root) {
        if (!Files.isDirectory(root)) {
            return Optional.empty();
        }
        try (Stream<Path> paths = Files.walk(root, 3)) {
            return paths.filter(p -> p.getFileName().toString().equals("_metadata"))
                    .map(Path::getParent)
                    .filter(p -> p.getFileName().toString().startsWith("chk-"))
                    .max(Comparator.comparingLong(p -> Long.parseLong(p.getFileName().toString().substring(4))));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Polls condition every 100 ms; fails with describe() when it has not held within timeout. */
    public static void awaitUntil(Duration timeout, BooleanSupplier condition, Supplier<String> describe)
            throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + timeout.toSeconds() + " s: " + describe.get());
            }
            Thread.sleep(100);
        }
    }
}

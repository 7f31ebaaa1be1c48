package telemetry.sink.testing;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.LogEvent;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.appender.AbstractAppender;
import org.apache.logging.log4j.core.config.Property;
import telemetry.sink.TelemetryPipeline;
import telemetry.sink.config.ApplicationProperties;
import telemetry.sink.config.SinkJobConfig;

/**
 * Runs the sink job once, from a properties file in the job's own local format, in a local
 * MiniCluster, until it has committed {@code --rows} Parquet rows and its consumer group's
 * offsets have reached the end of the topic; then cancels it. For tests that drive the job from
 * outside the JVM (tests/flink_sink/test_sink_as_sink_role.py runs it as the sink role's SASL user).
 *
 * <p>Exit 0 when done. Exit 2 with one last stderr line {@code sink run failed: ...} naming the
 * Kafka error when the job fails, or when it logs a Kafka refusal it carries on after (an offset
 * commit the broker refused is only logged by the Kafka source). Which IAM action that error means
 * is the caller's business: the job knows nothing of IAM names.
 *
 * <p>Usage: {@code SinkJobRun --properties FILE --rows N [--dead-letters D] [--timeout-s S]}: with
 * {@code --dead-letters}, it also waits until D dead letters are committed.
 */
public final class SinkJobRun {
    private SinkJobRun() {}

    public static void main(String[] args) throws Exception {
        Path propertiesFile = Path.of(argument(args, "--properties", null));
        long rows = Long.parseLong(argument(args, "--rows", null));
        long deadLetters = Long.parseLong(argument(args, "--dead-letters", "0"));
        Duration timeout = Duration.ofSeconds(Long.parseLong(argument(args, "--timeout-s", "120")));
        SinkJobConfig config = SinkJobConfig.from(ApplicationProperties.fromFile(propertiesFile));
        AtomicReference<String> loggedKafkaError = watchLogsForKafkaErrors();

        Path checkpoints = Path.of(java.net.URI.create(config.outputPath)).getParent().resolve("checkpoints");
        // Restarts disabled: a refused request fails the run instead of restarting the job forever.
        StreamExecutionEnvironment env = TestJobs.localEnvironment(checkpoints, config.checkpointIntervalMs, null);
        TelemetryPipeline.attach(env, config);
        JobClient job = env.executeAsync("telemetry-sink-run");
        // Asked for up front: a failed job's per-job MiniCluster shuts down, and its status with it.
        CompletableFuture<JobExecutionResult> result = job.getJobExecutionResult();
        String failure;
        try {
            failure = await(result, config, rows, deadLetters, timeout, loggedKafkaError);
        } catch (Exception e) {
            failure = "checking the job's progress failed: " + causes(e);
        }
        if (failure != null) {
            // No cancel: a failing job's MiniCluster may be shutting down already; exit ends it.
            System.err.println("sink run failed: " + failure);
            System.exit(2);
        }
        TestJobs.cancel(job);
        System.out.println("sink run committed " + rows + " rows, " + deadLetters + " dead letters and the group's offsets");
        System.exit(0);
    }

    /** null when done; otherwise what went wrong, on one line. */
    private static String await(CompletableFuture<JobExecutionResult> result, SinkJobConfig config, long rows,
                                long deadLetters, Duration timeout, AtomicReference<String> loggedKafkaError)
            throws Exception {
        Path output = Path.of(java.net.URI.create(config.outputPath));
        Path deadLetterOutput = Path.of(java.net.URI.create(config.deadLetterPath));
        long deadline = System.nanoTime() + timeout.toNanos();
        try (Admin admin = Admin.create(adminProperties(config))) {
            while (System.nanoTime() < deadline) {
                if (result.isDone()) {
                    try {
                        result.get();
                        return "the job ended before committing " + rows + " rows";
                    } catch (ExecutionException e) {
                        return "the job failed: " + causes(e.getCause());
                    }
                }
                if (loggedKafkaError.get() != null) {
                    return "the job logged " + loggedKafkaError.get();
                }
                if (SinkOutput.committedRowCount(output) >= rows
                        && (deadLetters == 0 || SinkOutput.readDeadLetters(deadLetterOutput).size() >= deadLetters)
                        && groupCaughtUp(admin, config)) {
                    return null;
                }
                Thread.sleep(200);
            }
        }
        return "timed out after " + timeout.toSeconds() + " s: committed rows " + SinkOutput.committedRowCount(output)
                + " of " + rows + ", dead letters " + SinkOutput.readDeadLetters(deadLetterOutput).size() + " of "
                + deadLetters;
    }

    /** The group's committed offsets equal the topic's end offsets (read as the job's own user). */
    private static boolean groupCaughtUp(Admin admin, SinkJobConfig config) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(config.groupId).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
        int partitions = admin.describeTopics(List.of(config.topic)).allTopicNames().get(30, TimeUnit.SECONDS)
                .get(config.topic).partitions().size();
        Map<TopicPartition, OffsetSpec> latest = new java.util.HashMap<>();
        for (int p = 0; p < partitions; p++) {
            latest.put(new TopicPartition(config.topic, p), OffsetSpec.latest());
        }
        var ends = admin.listOffsets(latest).all().get(30, TimeUnit.SECONDS);
        for (var end : ends.entrySet()) {
            OffsetAndMetadata offset = committed.get(end.getKey());
            if (end.getValue().offset() > 0 && (offset == null || offset.offset() < end.getValue().offset())) {
                return false;
            }
        }
        return true;
    }

    private static Properties adminProperties(SinkJobConfig config) {
        Properties properties = config.kafkaClientProperties();
        properties.setProperty(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, config.bootstrapServers);
        return properties;
    }

    /** The first warning or error logged with a Kafka refusal (authorization, authentication) among its causes. */
    private static AtomicReference<String> watchLogsForKafkaErrors() {
        AtomicReference<String> first = new AtomicReference<>();
        LoggerContext context = (LoggerContext) LogManager.getContext(false);
        AbstractAppender appender = new AbstractAppender("kafka-errors", null, null, true, Property.EMPTY_ARRAY) {
            @Override
            public void append(LogEvent event) {
                Throwable thrown = event.getThrown();
                if (thrown != null && hasKafkaError(thrown)) {
                    first.compareAndSet(null, "\"" + event.getMessage().getFormattedMessage() + "\": " + causes(thrown));
                }
            }
        };
        appender.start();
        context.getConfiguration().getRootLogger().addAppender(appender, Level.WARN, null);
        context.updateLoggers();
        return first;
    }

    private static boolean hasKafkaError(Throwable thrown) {
        for (Throwable t = thrown; t != null; t = t.getCause()) {
            String name = t.getClass().getName();
            // Refusals only: retriable errors (a leader moving, a topic not yet known) are logged too.
            if (name.startsWith("org.apache.kafka.common.errors.")
                    && (name.endsWith("AuthorizationException") || name.endsWith("AuthenticationException"))) {
                return true;
            }
        }
        return false;
    }

    /** The cause chain as "Class: message <- Class: message ...", on one line. */
    private static String causes(Throwable thrown) {
        List<String> links = new ArrayList<>();
        for (Throwable t = thrown; t != null && links.size() < 12; t = t.getCause()) {
            links.add(t.getClass().getName() + ": " + String.valueOf(t.getMessage()).replace('\n', ' '));
        }
        return String.join(" <- ", links);
    }

    private static String argument(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        if (fallback == null) {
            throw new IllegalArgumentException("usage: SinkJobRun --properties FILE --rows N [--dead-letters D] [--timeout-s S]; "
                    + name + " is missing");
        }
        return fallback;
    }
}

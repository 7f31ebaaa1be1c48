package telemetry.sink.testing;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A single-node KRaft broker on 127.0.0.1, started and stopped with the repository's
 * devtools/local_kafka.py (which fetches the broker jars with Maven on first use).
 */
public final class LocalKafka implements AutoCloseable {
    private final Path script;
    private final Path stateDir;
    private final String bootstrapServers;

    private LocalKafka(Path script, Path stateDir, String bootstrapServers) {
        this.script = script;
        this.stateDir = stateDir;
        this.bootstrapServers = bootstrapServers;
    }

    /** Starts a broker whose state lives in stateDir (a broker already running there is reused). */
    public static LocalKafka start(Path stateDir) throws IOException, InterruptedException {
        return start(stateDir, false);
    }

    /** fullJit: let the broker's JVM use C2 (long benchmarks); tests keep the quicker C1 start. */
    public static LocalKafka start(Path stateDir, boolean fullJit) throws IOException, InterruptedException {
        Path script = repoRoot().resolve("devtools/local_kafka.py");
        if (!Files.isRegularFile(script)) {
            throw new IllegalStateException("devtools/local_kafka.py not found at " + script);
        }
        Files.createDirectories(stateDir);
        List<String> output = fullJit ? run(script, stateDir, "start", "--full-jit") : run(script, stateDir, "start");
        String bootstrap = output.isEmpty() ? "" : output.get(output.size() - 1).trim();
        if (!bootstrap.matches("127\\.0\\.0\\.1:\\d+")) {
            throw new IllegalStateException("local_kafka.py start printed " + output);
        }
        return new LocalKafka(script, stateDir, bootstrap);
    }

    public String bootstrapServers() {
        return bootstrapServers;
    }

    public void createTopic(String name, int partitions) throws Exception {
        try (Admin admin = Admin.create(clientProperties())) {
            admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all().get(60, TimeUnit.SECONDS);
        }
    }

    /** A producer that waits for every write (acks=all) and never reorders within a partition. */
    public KafkaProducer<byte[], byte[]> producer() {
        Properties properties = clientProperties();
        properties.put(ProducerConfig.ACKS_CONFIG, "all");
        properties.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        properties.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        properties.put(ProducerConfig.BATCH_SIZE_CONFIG, String.valueOf(256 * 1024));
        properties.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
        return new KafkaProducer<>(properties, new ByteArraySerializer(), new ByteArraySerializer());
    }

    private Properties clientProperties() {
        Properties properties = new Properties();
        properties.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
        return properties;
    }

    @Override
    public void close() throws IOException, InterruptedException {
        run(script, stateDir, "stop");
    }

    /**
     * The repository root: the system property repo.root (set by surefire), else the working
     * directory when it holds flink/ (make from the root), else its parent (run from flink/).
     */
    public static Path repoRoot() {
        String configured = System.getProperty("repo.root");
        if (configured != null) {
            return Path.of(configured).toAbsolutePath().normalize();
        }
        Path cwd = Path.of("").toAbsolutePath();
        return Files.isDirectory(cwd.resolve("flink")) ? cwd : cwd.getParent();
    }

    private static List<String> run(Path script, Path stateDir, String... command) throws IOException, InterruptedException {
        List<String> argv = new java.util.ArrayList<>(List.of("python3", script.toString(), "--state-dir", stateDir.toString()));
        argv.addAll(List.of(command));
        Process process = new ProcessBuilder(argv).redirectErrorStream(false)
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        byte[] stdout = process.getInputStream().readAllBytes();
        if (!process.waitFor(5, TimeUnit.MINUTES)) {
            process.destroyForcibly();
            throw new IllegalStateException("local_kafka.py " + String.join(" ", command) + " timed out");
        }
        List<String> lines = new String(stdout, StandardCharsets.UTF_8).lines().toList();
        if (process.exitValue() != 0) {
            throw new IllegalStateException("local_kafka.py " + String.join(" ", command) + " exited "
                    + process.exitValue() + ": " + lines);
        }
        return lines;
    }
}

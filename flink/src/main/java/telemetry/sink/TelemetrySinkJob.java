package telemetry.sink;

import java.nio.file.Path;
import java.util.Map;
import java.util.Properties;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import telemetry.sink.config.ApplicationProperties;
import telemetry.sink.config.SinkJobConfig;

/**
 * Entry point. On Managed Flink (no arguments) the properties come from the service and the
 * service owns checkpointing. Locally, {@code --properties FILE} names a JSON file of the same
 * shape and checkpointing is switched on here with Sink.checkpoint.interval.ms.
 */
public final class TelemetrySinkJob {
    private static final Logger LOG = LoggerFactory.getLogger(TelemetrySinkJob.class);
    static final String JOB_NAME = "telemetry-sink";

    private TelemetrySinkJob() {}

    public static void main(String[] args) throws Exception {
        Path propertiesFile = propertiesFile(args);
        boolean local = propertiesFile != null;
        Map<String, Properties> groups = local
                ? ApplicationProperties.fromFile(propertiesFile)
                : ApplicationProperties.fromManagedFlink();
        SinkJobConfig config = SinkJobConfig.from(groups);
        LOG.info("starting {} ({}) with {}", JOB_NAME, local ? "local" : "Managed Flink", config);

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        if (local) {
            // Managed Flink rejects checkpoint settings made in code (2.2 throws on them).
            env.enableCheckpointing(config.checkpointIntervalMs);
        }
        TelemetryPipeline.attach(env, config);
        env.execute(JOB_NAME);
    }

    /** The file after --properties, or null when the job runs on Managed Flink. */
    static Path propertiesFile(String[] args) {
        for (int i = 0; i < args.length; i++) {
            if ("--properties".equals(args[i])) {
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException("--properties needs a FILE argument");
                }
                return Path.of(args[i + 1]);
            }
            if (args[i].startsWith("--properties=")) {
                return Path.of(args[i].substring("--properties=".length()));
            }
        }
        return null;
    }
}

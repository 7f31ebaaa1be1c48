package telemetry.sink.testing;

import java.nio.file.Path;
import java.time.Duration;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import telemetry.sink.TelemetrySinkJob;

/**
 * Runs the shipped job's own entry point, {@code TelemetrySinkJob.main}, the way Managed Flink
 * runs it, on one machine: the service owns the environment (parallelism and checkpointing, from
 * the application's FlinkApplicationConfiguration), the job only attaches its graph. Here that
 * environment is a local MiniCluster made with the application's settings, given to the job as
 * the context environment, which {@code StreamExecutionEnvironment.getExecutionEnvironment()}
 * returns when one is set (flink-runtime 2.2.0); the job's classes come from the jar on the class
 * path (devtools/demo.py puts flink/target/telemetry-sink.jar first and checks the line printed
 * below). Runs until killed. For `make demo`.
 *
 * <p>Usage: {@code ManagedFlinkStandIn --parallelism N --min-pause-ms MS --checkpoints DIR
 * --properties FILE}. The checkpoint interval is the properties' Sink.checkpoint.interval.ms, which
 * the job itself sets on a local run.
 *
 * <p>Not as the service does it: checkpoints go to a local folder (the service keeps them in
 * storage of its own); the state backend is Flink's default, where the service always uses RocksDB
 * with incremental snapshots (Managed Service for Apache Flink, "Apache Flink settings":
 * "Calling setStateBackend ... has no effect"), which changes how long a checkpoint takes, not what
 * it commits; the job takes its local code path (checkpointing set from its properties, where on
 * the service the application's CheckpointConfiguration sets it); and a failed job is not restarted
 * (the service restarts it), so a failure ends the run where someone sees it.
 */
public final class ManagedFlinkStandIn extends StreamExecutionEnvironment {
    private ManagedFlinkStandIn() {}

    public static void main(String[] args) throws Exception {
        int parallelism = Integer.parseInt(argument(args, "--parallelism"));
        Duration minPause = Duration.ofMillis(Long.parseLong(argument(args, "--min-pause-ms")));
        Path checkpoints = Path.of(argument(args, "--checkpoints")).toAbsolutePath();
        String properties = argument(args, "--properties");

        Configuration conf = new Configuration();
        conf.set(CheckpointingOptions.MIN_PAUSE_BETWEEN_CHECKPOINTS, minPause);
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints.toUri().toString());
        conf.set(CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
                ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "disable");
        // Made before it is installed: a LocalStreamEnvironment refuses to be made while a context
        // environment is set (LocalStreamEnvironment.validateAndGetConfiguration).
        StreamExecutionEnvironment service = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        initializeContextEnvironment(jobConf -> service);
        System.out.println("job classes from " + TelemetrySinkJob.class.getProtectionDomain().getCodeSource().getLocation());
        System.out.flush();
        TelemetrySinkJob.main(new String[] {"--properties", properties});
    }

    private static String argument(String[] args, String name) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        throw new IllegalArgumentException("usage: ManagedFlinkStandIn --parallelism N --min-pause-ms MS "
                + "--checkpoints DIR --properties FILE; " + name + " is missing");
    }
}

package telemetry.sink.testing;

import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Metric;
import org.apache.flink.metrics.MetricConfig;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;

/**
 * An in-process metric reporter that keeps every counter registered under a metric group named
 * "kinesisanalytics" (the group Managed Flink publishes to CloudWatch), by name, one entry per
 * subtask that registered it: what a test needs to see how many series each would make.
 * Enabled with {@code metrics.reporter.<name>.factory.class} = {@link Factory}.
 */
public final class JobCounters implements MetricReporter {
    private static final Map<String, List<Counter>> COUNTERS = new ConcurrentHashMap<>();

    public static void reset() {
        COUNTERS.clear();
    }

    /** The counters registered under this name, one per subtask. */
    public static List<Counter> named(String name) {
        return COUNTERS.getOrDefault(name, List.of());
    }

    @Override
    public void open(MetricConfig config) {}

    @Override
    public void close() {}

    @Override
    public void notifyOfAddedMetric(Metric metric, String metricName, MetricGroup group) {
        if (metric instanceof Counter counter && group.getMetricIdentifier(metricName).contains(".kinesisanalytics.")) {
            COUNTERS.computeIfAbsent(metricName, k -> new CopyOnWriteArrayList<>()).add(counter);
        }
    }

    @Override
    public void notifyOfRemovedMetric(Metric metric, String metricName, MetricGroup group) {
        // Kept: the final count stays readable after the job has stopped.
    }

    public static final class Factory implements MetricReporterFactory {
        @Override
        public MetricReporter createMetricReporter(Properties properties) {
            return new JobCounters();
        }
    }
}

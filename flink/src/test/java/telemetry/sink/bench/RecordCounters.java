package telemetry.sink.bench;

import java.util.List;
import java.util.Properties;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Metric;
import org.apache.flink.metrics.MetricConfig;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;

/**
 * An in-process metric reporter that keeps the {@code numRecordsIn} counters of one operator, so
 * the benchmark can read them at any instant. The MiniCluster runs in the benchmark's JVM, so the
 * counters are the live objects the operator increments.
 *
 * <p>Enabled with {@code metrics.reporter.<name>.factory.class} set to {@link Factory}; Flink finds
 * the factory through META-INF/services (ReporterSetupBuilder loads reporter factories with
 * ServiceLoader and matches the configured class name). The operator is chosen by the metric
 * group's {@code <operator_name>} variable.
 */
public final class RecordCounters implements MetricReporter {
    /** The numRecordsIn of the operator named {@link #operatorName}, one per subtask. */
    static final List<Counter> COUNTERS = new CopyOnWriteArrayList<>();
    static volatile String operatorName = "";

    @Override
    public void open(MetricConfig config) {}

    @Override
    public void close() {}

    @Override
    public void notifyOfAddedMetric(Metric metric, String metricName, MetricGroup group) {
        if ("numRecordsIn".equals(metricName) && metric instanceof Counter counter
                && operatorName.equals(group.getAllVariables().get("<operator_name>"))) {
            COUNTERS.add(counter);
        }
    }

    @Override
    public void notifyOfRemovedMetric(Metric metric, String metricName, MetricGroup group) {
        // Kept: the final count stays readable after the job has finished.
    }

    /** The sum over subtasks. */
    static long total() {
        long sum = 0;
        for (Counter counter : COUNTERS) {
            sum += counter.getCount();
        }
        return sum;
    }

    public static final class Factory implements MetricReporterFactory {
        @Override
        public MetricReporter createMetricReporter(Properties properties) {
            return new RecordCounters();
        }
    }
}

package telemetry.sink;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.metrics.Counter;

/**
 * Counts what passes through it in a counter of the "kinesisanalytics" metric group, and passes it
 * on. The pipeline runs it with parallelism 1, so the one counter is the job's total.
 *
 * <p>Why one task: Managed Flink publishes a custom metric "at the Application level by default"
 * with dimensions added "based on the application's monitoring level" (Managed Service for Apache
 * Flink Developer Guide, "Use custom metrics"), and no page says how the counters of several
 * subtasks become one CloudWatch series at that level. A statistic over several cumulative
 * counters (Maximum, Sum) does not count what any one of them added; a single counter does,
 * whatever the service does with several.
 */
public class CountedInOneTask<T> extends RichMapFunction<T, T> {
    private static final long serialVersionUID = 1L;

    private final String metricName;
    private transient Counter counter;

    public CountedInOneTask(String metricName) {
        this.metricName = metricName;
    }

    @Override
    public void open(OpenContext openContext) {
        counter = getRuntimeContext().getMetricGroup().addGroup(ParseTelemetry.METRIC_GROUP).counter(metricName);
    }

    @Override
    public T map(T value) {
        counter.inc();
        return value;
    }
}

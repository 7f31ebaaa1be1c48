package telemetry.sink;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.metrics.Counter;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;
import telemetry.sink.parse.DeadLetter;
import telemetry.sink.parse.InvalidTelemetryException;
import telemetry.sink.parse.KafkaMessage;
import telemetry.sink.parse.TelemetryParser;
import telemetry.sink.parse.TelemetryRecord;

/** Parses each message; one that does not parse goes to the dead-letter output and is counted. */
public class ParseTelemetry extends ProcessFunction<KafkaMessage, TelemetryRecord> {
    private static final long serialVersionUID = 1L;

    /** JSON lines describing messages that did not parse. */
    public static final OutputTag<String> DEAD_LETTERS = new OutputTag<>("dead-letters") {};

    /**
     * Managed Flink publishes metrics registered under a group named "kinesisanalytics" to
     * CloudWatch (namespace AWS/KinesisAnalytics, dimension Application).
     */
    public static final String METRIC_GROUP = "kinesisanalytics";
    public static final String DEAD_LETTER_METRIC = "DeadLetterRecords";

    private transient Counter deadLetters;

    @Override
    public void open(OpenContext openContext) {
        deadLetters = getRuntimeContext().getMetricGroup().addGroup(METRIC_GROUP).counter(DEAD_LETTER_METRIC);
    }

    @Override
    public void processElement(KafkaMessage message, Context context, Collector<TelemetryRecord> out) {
        TelemetryRecord record;
        try {
            record = TelemetryParser.parse(message);
        } catch (InvalidTelemetryException e) {
            deadLetters.inc();
            context.output(DEAD_LETTERS,
                    DeadLetter.toJsonLine(message, e.getMessage(), context.timerService().currentProcessingTime()));
            return;
        }
        out.collect(record);
    }
}

package telemetry.sink;

import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;
import telemetry.sink.parse.DeadLetter;
import telemetry.sink.parse.DeviceClock;
import telemetry.sink.parse.InvalidTelemetryException;
import telemetry.sink.parse.KafkaMessage;
import telemetry.sink.parse.TelemetryParser;
import telemetry.sink.parse.TelemetryRecord;

/**
 * Parses each message; one that does not parse goes to the dead-letter output. A reading whose
 * device clock the lake cannot file it by is kept, filed by its ingest time, and its device id goes
 * to the clock output. The pipeline counts both outputs in one task each ({@link CountedInOneTask}).
 * With a smoke run prefix, a reading whose run id starts with it goes to the smoke output instead
 * of the table's.
 */
public class ParseTelemetry extends ProcessFunction<KafkaMessage, TelemetryRecord> {
    private static final long serialVersionUID = 1L;

    /** JSON lines describing messages that did not parse. */
    public static final OutputTag<String> DEAD_LETTERS = new OutputTag<>("dead-letters") {};
    /** The device id of each reading filed by ingest time because its clock was out of range. */
    public static final OutputTag<String> CLOCK_OUT_OF_RANGE = new OutputTag<>("clock-out-of-range") {};
    /** Readings of a deployment's smoke runs: written beside the lake, never into its table. */
    public static final OutputTag<TelemetryRecord> SMOKE = new OutputTag<>("smoke") {};

    /**
     * Managed Flink publishes metrics registered under a group named "kinesisanalytics" to
     * CloudWatch (namespace AWS/KinesisAnalytics, dimension Application).
     */
    public static final String METRIC_GROUP = "kinesisanalytics";
    public static final String DEAD_LETTER_METRIC = "DeadLetterRecords";
    public static final String CLOCK_OUT_OF_RANGE_METRIC = "ClockOutOfRangeRecords";

    private final DeviceClock clock;
    private final String smokeRunPrefix;

    /** smokeRunPrefix: null files smoke runs' readings with every other. */
    public ParseTelemetry(DeviceClock clock, String smokeRunPrefix) {
        this.clock = clock;
        this.smokeRunPrefix = smokeRunPrefix;
    }

    @Override
    public void processElement(KafkaMessage message, Context context, Collector<TelemetryRecord> out) {
        TelemetryRecord record;
        try {
            record = TelemetryParser.parse(message);
        } catch (InvalidTelemetryException e) {
            context.output(DEAD_LETTERS,
                    DeadLetter.toJsonLine(message, e.getMessage(), context.timerService().currentProcessingTime()));
            return;
        }
        long readMillis = context.timerService().currentProcessingTime();
        record.readTimeMillis = readMillis;
        if (!clock.file(record, readMillis)) {
            context.output(CLOCK_OUT_OF_RANGE, record.deviceId);
        }
        if (smokeRunPrefix != null && record.runId != null && record.runId.startsWith(smokeRunPrefix)) {
            context.output(SMOKE, record);
            return;
        }
        out.collect(record);
    }
}

package telemetry.sink.parse;

import java.io.Serializable;
import java.time.LocalDate;
import java.time.ZoneOffset;

/**
 * Which device clocks the lake can file a reading by.
 *
 * <p>Athena finds a row only in a partition its projection enumerates: days from the table's start
 * date to NOW (stacks/constructs/telemetry_catalog.py). A reading stamped before that day (a device
 * whose clock reset to 1970) would sit in a partition no query reads, and one stamped far ahead of
 * the time it reached Kafka in a partition queries reach only when that day comes. Such a reading
 * is filed by its ingest time instead and keeps its device time in {@code event_time}/{@code sent_ns};
 * the job counts it (ParseTelemetry.CLOCK_OUT_OF_RANGE_METRIC).
 *
 * <p>The ingest time is the Kafka timestamp, which on a CreateTime topic is the producer's clock: for
 * a direct producer the same host clock as the device time, so both can run ahead together. A
 * Kafka timestamp more than the allowed skew beyond the time the sink read the record (which can
 * only come after the record was written) is not believed either: the read time replaces it, and
 * the device time is judged against that.
 */
public final class DeviceClock implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final long MILLIS_PER_SECOND = 1_000L;

    private final long earliestMillis;
    private final long maxAheadMillis;

    /**
     * @param earliestDay the first day the table enumerates (UTC)
     * @param maxAheadSeconds how far a device clock may run ahead of the ingest time, and a Kafka
     *     timestamp ahead of the read time
     */
    public DeviceClock(LocalDate earliestDay, long maxAheadSeconds) {
        this.earliestMillis = earliestDay.atStartOfDay(ZoneOffset.UTC).toInstant().toEpochMilli();
        this.maxAheadMillis = maxAheadSeconds * MILLIS_PER_SECOND;
    }

    /** Whether the device's time of this reading can be its partition. */
    public boolean believable(TelemetryRecord record) {
        return record.eventTimeMillis >= earliestMillis
                && record.eventTimeMillis <= record.ingestTimeMillis + maxAheadMillis;
    }

    /**
     * Sets the record's ingest time (its Kafka timestamp, or readMillis when it has none, one before
     * the table's first day, or one more than the allowed skew ahead of readMillis) and its
     * partition time; returns whether the device time was kept.
     */
    public boolean file(TelemetryRecord record, long readMillis) {
        if (record.ingestTimeMillis < earliestMillis || record.ingestTimeMillis > readMillis + maxAheadMillis) {
            record.ingestTimeMillis = readMillis;
        }
        boolean believable = believable(record);
        record.partitionTimeMillis = believable ? record.eventTimeMillis : record.ingestTimeMillis;
        return believable;
    }
}

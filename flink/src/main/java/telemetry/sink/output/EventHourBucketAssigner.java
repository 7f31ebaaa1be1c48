package telemetry.sink.output;

import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.streaming.api.functions.sink.filesystem.BucketAssigner;
import org.apache.flink.streaming.api.functions.sink.filesystem.bucketassigners.SimpleVersionedStringSerializer;
import telemetry.sink.parse.TelemetryRecord;

/**
 * Puts each record into the UTC hour of its partition time: its event time (sent_ns) when the
 * device's clock is believable, its ingest time otherwise (telemetry.sink.parse.DeviceClock).
 */
public class EventHourBucketAssigner implements BucketAssigner<TelemetryRecord, String> {
    private static final long serialVersionUID = 1L;

    // Consecutive records nearly always share an hour: build the path string once per hour.
    private transient long cachedHourStart = Long.MIN_VALUE;
    private transient String cachedPath;

    @Override
    public String getBucketId(TelemetryRecord record, Context context) {
        long hourStart = HourPartition.hourStart(record.partitionTimeMillis);
        if (hourStart != cachedHourStart || cachedPath == null) {
            cachedPath = HourPartition.of(hourStart);
            cachedHourStart = hourStart;
        }
        return cachedPath;
    }

    @Override
    public SimpleVersionedSerializer<String> getSerializer() {
        return SimpleVersionedStringSerializer.INSTANCE;
    }
}

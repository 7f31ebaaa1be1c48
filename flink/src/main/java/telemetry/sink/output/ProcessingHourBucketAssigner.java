package telemetry.sink.output;

import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.streaming.api.functions.sink.filesystem.BucketAssigner;
import org.apache.flink.streaming.api.functions.sink.filesystem.bucketassigners.SimpleVersionedStringSerializer;

/**
 * Puts dead letters into the UTC hour in which they were written: a message that failed to
 * parse may have no usable event time at all.
 */
public class ProcessingHourBucketAssigner<T> implements BucketAssigner<T, String> {
    private static final long serialVersionUID = 1L;

    @Override
    public String getBucketId(T element, Context context) {
        return HourPartition.of(context.currentProcessingTime());
    }

    @Override
    public SimpleVersionedSerializer<String> getSerializer() {
        return SimpleVersionedStringSerializer.INSTANCE;
    }
}

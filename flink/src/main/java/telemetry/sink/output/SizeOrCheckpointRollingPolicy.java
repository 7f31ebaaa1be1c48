package telemetry.sink.output;

import org.apache.flink.streaming.api.functions.sink.filesystem.PartFileInfo;
import org.apache.flink.streaming.api.functions.sink.filesystem.rollingpolicies.CheckpointRollingPolicy;

/**
 * Rolls a part file on every checkpoint (bulk formats must, for exactly once) and also as soon as
 * it reaches a size limit, so a high rate or a long checkpoint interval never makes huge files.
 * The size a Parquet part reports grows in row-group steps, so a part can exceed the limit by
 * up to one row group.
 */
public class SizeOrCheckpointRollingPolicy<IN> extends CheckpointRollingPolicy<IN, String> {
    private static final long serialVersionUID = 1L;

    private final long maxPartBytes;

    public SizeOrCheckpointRollingPolicy(long maxPartBytes) {
        if (maxPartBytes <= 0) {
            throw new IllegalArgumentException("maxPartBytes must be positive, got " + maxPartBytes);
        }
        this.maxPartBytes = maxPartBytes;
    }

    @Override
    public boolean shouldRollOnEvent(PartFileInfo<String> partFile, IN element) throws java.io.IOException {
        return partFile.getSize() >= maxPartBytes;
    }

    @Override
    public boolean shouldRollOnProcessingTime(PartFileInfo<String> partFile, long currentTime) {
        return false;
    }
}

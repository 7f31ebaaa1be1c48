package telemetry.sink.output;

import java.io.IOException;
import org.apache.flink.streaming.api.functions.sink.filesystem.PartFileInfo;
import org.apache.flink.streaming.api.functions.sink.filesystem.rollingpolicies.CheckpointRollingPolicy;

/**
 * Rolls a part file on every checkpoint and also when it reaches a size limit, without leaving a
 * small remainder for the checkpoint to commit.
 *
 * <p>Bulk formats must roll on every checkpoint: FileSink's bulk builder only takes a
 * {@link CheckpointRollingPolicy}; FileWriterBucket.prepareCommit closes the in-progress part when
 * shouldRollOnCheckpoint says so, and otherwise FileWriterBucket.snapshotState calls
 * InProgressFileWriter.persist, which BulkPartWriter.persist refuses with
 * UnsupportedOperationException (flink-connector-files and flink-file-sink-common 2.2.0). So this
 * policy still answers true there; it only uses the call to learn when checkpoints happen.
 *
 * <p>A part that reaches the size limit is rolled only when the part that follows can be expected
 * to grow to at least {@link #minPartBytes} before the next checkpoint commits it: expected
 * bytes = this part's write rate (its size over its age) times the time left until the next
 * checkpoint (the last one seen plus the interval seen between the last two). Otherwise it stays
 * open until the checkpoint, ending up to minPartBytes (plus one row group, below) over the
 * limit. A part is always rolled at twice the limit, so a stalled checkpoint cannot make an
 * unbounded file. Before two checkpoints have been seen the limit alone decides, as before.
 *
 * <p>A Parquet part reports its size as the position of its output stream
 * (OutputStreamBasedPartFileWriter.getSize), which moves only when a row group is flushed, so the
 * size seen here grows in row-group steps and the decision is taken at those steps.
 *
 * <p>State (the checkpoint times) is per subtask: each subtask deserializes its own copy of the
 * policy, and FileWriter shares it between that subtask's buckets; every call comes from the task
 * thread. It is not checkpointed: after a restore the first two checkpoints are learnt again.
 */
public class SizeOrCheckpointRollingPolicy<IN> extends CheckpointRollingPolicy<IN, String> {
    private static final long serialVersionUID = 2L;

    /** The smallest file a size roll may leave behind for the next checkpoint. */
    public static final long DEFAULT_MIN_PART_BYTES = 1L << 20;

    /**
     * Calls closer together than this belong to one checkpoint: FileWriter.prepareCommit asks every
     * bucket with an open part in turn, and closing a large part takes a while.
     */
    static final long SAME_CHECKPOINT_MS = 1_000;

    private final long maxPartBytes;
    private final long minPartBytes;

    // Transient fields start at false / 0 on deserialization (field initializers do not run
    // there, java.io.Serializable), which is how the job receives the policy: no initializers, so
    // a constructed and a deserialized policy start alike.
    private transient boolean checkpointSeen;
    private transient long lastCheckpointMs;
    private transient long checkpointIntervalMs; // 0 until two checkpoints were seen

    public SizeOrCheckpointRollingPolicy(long maxPartBytes) {
        this(maxPartBytes, DEFAULT_MIN_PART_BYTES);
    }

    public SizeOrCheckpointRollingPolicy(long maxPartBytes, long minPartBytes) {
        if (maxPartBytes <= 0) {
            throw new IllegalArgumentException("maxPartBytes must be positive, got " + maxPartBytes);
        }
        if (minPartBytes < 0 || minPartBytes >= maxPartBytes) {
            throw new IllegalArgumentException("minPartBytes must be in [0, " + maxPartBytes + "), got " + minPartBytes);
        }
        this.maxPartBytes = maxPartBytes;
        this.minPartBytes = minPartBytes;
    }

    @Override
    public boolean shouldRollOnCheckpoint(PartFileInfo<String> partFile) {
        // The last write before the barrier stands for the checkpoint's time; a bucket that was
        // idle (the hour that just ended) reports an older one, hence the max.
        long seen = partFile.getLastUpdateTime();
        if (!checkpointSeen) {
            checkpointSeen = true;
            lastCheckpointMs = seen;
        } else if (seen - lastCheckpointMs >= SAME_CHECKPOINT_MS) {
            checkpointIntervalMs = seen - lastCheckpointMs;
            lastCheckpointMs = seen;
        }
        return true; // required for bulk formats, see the class comment
    }

    @Override
    public boolean shouldRollOnEvent(PartFileInfo<String> partFile, IN element) throws IOException {
        long size = partFile.getSize();
        if (size < maxPartBytes) {
            return false;
        }
        if (size >= 2 * maxPartBytes || checkpointIntervalMs <= 0) {
            return true;
        }
        long now = partFile.getLastUpdateTime();
        long nextCheckpoint = lastCheckpointMs + checkpointIntervalMs;
        if (nextCheckpoint <= now) {
            return false; // the checkpoint is due: let it commit this part whole
        }
        double bytesPerMs = (double) size / Math.max(1, now - partFile.getCreationTime());
        return bytesPerMs * (nextCheckpoint - now) >= minPartBytes;
    }

    @Override
    public boolean shouldRollOnProcessingTime(PartFileInfo<String> partFile, long currentTime) {
        return false;
    }
}

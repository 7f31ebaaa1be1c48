package telemetry.sink.output;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.ArrayList;
import java.util.List;
import org.apache.flink.streaming.api.functions.sink.filesystem.PartFileInfo;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Drives the policy the way FileWriterBucket does (shouldRollOnEvent before each write,
 * shouldRollOnCheckpoint at each checkpoint) for one writer at a steady rate, on a simulated clock,
 * and checks the sizes of the parts it would commit.
 */
class SizeOrCheckpointRollingPolicyTest {
    private static final long MIB = 1L << 20;
    private static final long MAX = 64 * MIB;
    private static final long MIN = MIB;
    /** A Parquet part's reported size moves in row-group steps. */
    private static final long ROW_GROUP = 4 * MIB;
    private static final long INTERVAL_MS = 60_000;
    private static final long STEP_MS = 5;
    private static final int CHECKPOINTS = 12;
    /** The first two checkpoints teach the policy the interval; parts before them are not judged. */
    private static final int LEARNING_CHECKPOINTS = 2;

    @ParameterizedTest(name = "{0} MiB per checkpoint interval, first checkpoint at {1} ms")
    @CsvSource({
        // one interval's output stays under the limit: one part per checkpoint
        "1.2, 7000", "32, 13000",
        // just over a whole multiple of the limit: a roll at the multiple would leave a sliver
        "64.9, 7000", "128.5, 31000", "192.2, 59000", "320.1, 1000",
        // well between multiples: rolls on size as before
        "100, 23000", "250, 41000", "700, 17000",
    })
    void noCommittedPartUnderOneMibAndNoneFarOverTheLimit(double mibPerInterval, long firstCheckpointMs) {
        // The job receives the policy serialized, as Flink ships it to each subtask.
        List<Long> parts = simulate(deserialized(new SizeOrCheckpointRollingPolicy<>(MAX, MIN)),
                mibPerInterval * MIB / INTERVAL_MS, firstCheckpointMs);
        assertThat(parts).isNotEmpty();
        assertThat(parts).allSatisfy(size -> assertThat(size).isGreaterThanOrEqualTo(MIN));
        assertThat(parts).allSatisfy(size -> assertThat(size).isLessThanOrEqualTo(MAX + ROW_GROUP + MIN));
    }

    @Test
    void rollsOnSizeWhenTheRemainderWillBeLarge() {
        // 250 MiB a minute: the limit, not the checkpoint, must bound the parts.
        List<Long> parts = simulate(new SizeOrCheckpointRollingPolicy<>(MAX, MIN), 250.0 * MIB / INTERVAL_MS, 5000);
        assertThat(parts.size()).isGreaterThanOrEqualTo(4 * (CHECKPOINTS - LEARNING_CHECKPOINTS - 1));
    }

    @Test
    void aStalledCheckpointStillRollsAtTwiceTheLimit() throws java.io.IOException {
        SizeOrCheckpointRollingPolicy<Object> policy = new SizeOrCheckpointRollingPolicy<>(MAX, MIN);
        policy.shouldRollOnCheckpoint(part(0, 0, 0));
        policy.shouldRollOnCheckpoint(part(0, 60_000, 0));
        // 119 s after the last checkpoint: the next one is overdue, so the part is kept open ...
        assertThat(policy.shouldRollOnEvent(part(60_000, 179_000, MAX), null)).isFalse();
        // ... but not beyond twice the limit.
        assertThat(policy.shouldRollOnEvent(part(60_000, 179_000, 2 * MAX), null)).isTrue();
    }

    @Test
    void alwaysRollsOnCheckpointBecauseBulkPartsCannotBePersisted() {
        SizeOrCheckpointRollingPolicy<Object> policy = new SizeOrCheckpointRollingPolicy<>(MAX, MIN);
        assertThat(policy.shouldRollOnCheckpoint(part(0, 10, 0))).isTrue();
        assertThat(policy.shouldRollOnCheckpoint(part(0, 60_010, 5 * MAX))).isTrue();
    }

    @Test
    void rejectsAMinimumThatIsNotBelowTheLimit() {
        assertThatThrownBy(() -> new SizeOrCheckpointRollingPolicy<>(MIB, MIB)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new SizeOrCheckpointRollingPolicy<>(0)).isInstanceOf(IllegalArgumentException.class);
    }

    @SuppressWarnings("unchecked")
    private static SizeOrCheckpointRollingPolicy<Object> deserialized(SizeOrCheckpointRollingPolicy<Object> policy) {
        try {
            var bytes = new java.io.ByteArrayOutputStream();
            try (var out = new java.io.ObjectOutputStream(bytes)) {
                out.writeObject(policy);
            }
            try (var in = new java.io.ObjectInputStream(new java.io.ByteArrayInputStream(bytes.toByteArray()))) {
                return (SizeOrCheckpointRollingPolicy<Object>) in.readObject();
            }
        } catch (java.io.IOException | ClassNotFoundException e) {
            throw new AssertionError(e);
        }
    }

    /** The sizes of the parts committed after the learning checkpoints, in order. */
    private static List<Long> simulate(SizeOrCheckpointRollingPolicy<Object> policy, double bytesPerMs,
                                       long firstCheckpointMs) {
        List<Long> committed = new ArrayList<>();
        FakePart part = null;
        int checkpoints = 0;
        long nextCheckpoint = firstCheckpointMs;
        double carry = 0;
        for (long now = 0; checkpoints < CHECKPOINTS; now += STEP_MS) {
            if (now >= nextCheckpoint) {
                if (part != null) {
                    assertThat(policy.shouldRollOnCheckpoint(part)).isTrue();
                    if (checkpoints >= LEARNING_CHECKPOINTS) {
                        committed.add(part.written);
                    }
                    part = null;
                }
                checkpoints++;
                nextCheckpoint += INTERVAL_MS;
            }
            if (part == null) {
                part = new FakePart(now);
            } else if (policyRolls(policy, part)) {
                if (checkpoints > LEARNING_CHECKPOINTS) {
                    committed.add(part.written);
                }
                part = new FakePart(now);
            }
            carry += bytesPerMs * STEP_MS;
            long bytes = (long) carry;
            carry -= bytes;
            part.written += bytes;
            part.lastUpdate = now;
        }
        return committed;
    }

    private static boolean policyRolls(SizeOrCheckpointRollingPolicy<Object> policy, FakePart part) {
        try {
            return policy.shouldRollOnEvent(part, null);
        } catch (java.io.IOException e) {
            throw new AssertionError(e);
        }
    }

    private static FakePart part(long created, long lastUpdate, long size) {
        FakePart part = new FakePart(created);
        part.lastUpdate = lastUpdate;
        part.written = size;
        return part;
    }

    /** An in-progress Parquet part: the size it reports is what its row groups have flushed. */
    private static final class FakePart implements PartFileInfo<String> {
        final long created;
        long lastUpdate;
        long written;

        FakePart(long created) {
            this.created = created;
            this.lastUpdate = created;
        }

        @Override
        public String getBucketId() {
            return "dt=2025-11-23/hour=09";
        }

        @Override
        public long getCreationTime() {
            return created;
        }

        @Override
        public long getSize() {
            return written - written % ROW_GROUP;
        }

        @Override
        public long getLastUpdateTime() {
            return lastUpdate;
        }
    }
}

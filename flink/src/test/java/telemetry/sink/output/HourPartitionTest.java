package telemetry.sink.output;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Instant;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import telemetry.sink.parse.TelemetryRecord;

class HourPartitionTest {
    @ParameterizedTest(name = "{0} -> {1}")
    @CsvSource({
        "2025-11-23T00:00:00.000Z, dt=2025-11-23/hour=00",
        "2025-11-23T00:59:59.999Z, dt=2025-11-23/hour=00",
        "2025-11-23T01:00:00.000Z, dt=2025-11-23/hour=01",
        "2025-11-23T09:30:00.000Z, dt=2025-11-23/hour=09",
        "2025-11-23T10:00:00.000Z, dt=2025-11-23/hour=10",
        "2025-11-23T23:59:59.999Z, dt=2025-11-23/hour=23",
        "2025-11-24T00:00:00.000Z, dt=2025-11-24/hour=00",
        "2024-02-29T12:00:00.000Z, dt=2024-02-29/hour=12",
        "1970-01-01T00:00:00.000Z, dt=1970-01-01/hour=00",
        "1969-12-31T23:59:59.999Z, dt=1969-12-31/hour=23"
    })
    void isTheUtcDateAndHour(String instant, String expected) {
        assertThat(HourPartition.of(Instant.parse(instant).toEpochMilli())).isEqualTo(expected);
    }

    @Test
    void theBucketAssignerFollowsThePartitionTimeAcrossHourBoundaries() {
        EventHourBucketAssigner assigner = new EventHourBucketAssigner();
        long lastMilliOfHour = Instant.parse("2025-11-23T09:59:59.999Z").toEpochMilli();

        assertThat(assigner.getBucketId(record(lastMilliOfHour), null)).isEqualTo("dt=2025-11-23/hour=09");
        assertThat(assigner.getBucketId(record(lastMilliOfHour + 1), null)).isEqualTo("dt=2025-11-23/hour=10");
        assertThat(assigner.getBucketId(record(lastMilliOfHour), null)).isEqualTo("dt=2025-11-23/hour=09");
    }

    private static TelemetryRecord record(long partitionTimeMillis) {
        TelemetryRecord record = new TelemetryRecord();
        record.partitionTimeMillis = partitionTimeMillis;
        return record;
    }
}

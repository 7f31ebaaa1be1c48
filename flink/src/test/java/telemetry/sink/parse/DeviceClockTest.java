package telemetry.sink.parse;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import org.junit.jupiter.api.Test;

class DeviceClockTest {
    private static final DeviceClock CLOCK = new DeviceClock(LocalDate.parse("2025-01-01"), 300);
    private static final long INGEST = Instant.parse("2026-11-26T10:15:00Z").toEpochMilli();
    private static final long READ = Instant.parse("2026-11-26T10:15:02Z").toEpochMilli();

    @Test
    void aBelievableClockIsFiledByItsOwnTime() {
        TelemetryRecord record = record(Instant.parse("2026-11-26T10:14:59.250Z").toEpochMilli(), INGEST);

        assertThat(CLOCK.file(record, READ)).isTrue();
        assertThat(record.partitionTimeMillis).isEqualTo(record.eventTimeMillis);
        assertThat(record.ingestTimeMillis).isEqualTo(INGEST);
    }

    @Test
    void aClockResetTo1970IsFiledByIngestTime() {
        TelemetryRecord record = record(1_000L, INGEST);

        assertThat(CLOCK.file(record, READ)).isFalse();
        assertThat(record.partitionTimeMillis).isEqualTo(INGEST);
        assertThat(record.eventTimeMillis).isEqualTo(1_000L);
    }

    @Test
    void theBoundsAreTheTablesFirstDayAndTheAllowedSkewInclusive() {
        long firstDay = Instant.parse("2025-01-01T00:00:00Z").toEpochMilli();

        assertThat(CLOCK.file(record(firstDay, INGEST), READ)).isTrue();
        assertThat(CLOCK.file(record(firstDay - 1, INGEST), READ)).isFalse();
        assertThat(CLOCK.file(record(INGEST + 300_000, INGEST), READ)).isTrue();
        assertThat(CLOCK.file(record(INGEST + 300_001, INGEST), READ)).isFalse();
    }

    @Test
    void aFutureClockIsFiledByIngestTime() {
        TelemetryRecord record = record(Instant.parse("2031-06-01T00:00:00Z").toEpochMilli(), INGEST);

        assertThat(CLOCK.file(record, READ)).isFalse();
        assertThat(record.partitionTimeMillis).isEqualTo(INGEST);
    }

    @Test
    void aDirectProducerWhoseHostClockRunsAheadIsFiledByReadTime() {
        // A direct producer stamps CreateTime and sent_ns from the same clock: both 400 days ahead.
        long ahead = READ + Duration.ofDays(400).toMillis();
        TelemetryRecord record = record(ahead - 1_000, ahead);

        assertThat(CLOCK.file(record, READ)).isFalse();
        assertThat(record.partitionTimeMillis).isEqualTo(READ);
        assertThat(record.ingestTimeMillis).isEqualTo(READ);
        assertThat(record.eventTimeMillis).isEqualTo(ahead - 1_000);
    }

    @Test
    void aHostClockAMinuteAheadKeepsItsDeviceTime() {
        long ahead = READ + 60_000;
        TelemetryRecord record = record(ahead, ahead);

        assertThat(CLOCK.file(record, READ)).isTrue();
        assertThat(record.partitionTimeMillis).isEqualTo(ahead);
        assertThat(record.ingestTimeMillis).isEqualTo(ahead);
    }

    @Test
    void aKafkaTimestampIsBelievedUpToTheAllowedSkewAheadOfTheReadTimeInclusive() {
        TelemetryRecord atTheBound = record(READ + 300_000, READ + 300_000);
        TelemetryRecord pastTheBound = record(READ + 300_001, READ + 300_001);

        assertThat(CLOCK.file(atTheBound, READ)).isTrue();
        assertThat(atTheBound.ingestTimeMillis).isEqualTo(READ + 300_000);
        assertThat(CLOCK.file(pastTheBound, READ)).isFalse();
        assertThat(pastTheBound.ingestTimeMillis).isEqualTo(READ);
        assertThat(pastTheBound.partitionTimeMillis).isEqualTo(READ);
    }

    @Test
    void aRecordWithoutAUsableKafkaTimestampIsFiledByTheTimeTheSinkReadIt() {
        TelemetryRecord noTimestamp = record(1_000L, -1L);
        TelemetryRecord zeroTimestamp = record(Instant.parse("2026-11-26T10:14:00Z").toEpochMilli(), 0L);

        assertThat(CLOCK.file(noTimestamp, READ)).isFalse();
        assertThat(noTimestamp.partitionTimeMillis).isEqualTo(READ);
        assertThat(noTimestamp.ingestTimeMillis).isEqualTo(READ);
        assertThat(CLOCK.file(zeroTimestamp, READ)).isTrue();
        assertThat(zeroTimestamp.ingestTimeMillis).isEqualTo(READ);
    }

    private static TelemetryRecord record(long eventTimeMillis, long ingestTimeMillis) {
        TelemetryRecord record = new TelemetryRecord();
        record.eventTimeMillis = eventTimeMillis;
        record.ingestTimeMillis = ingestTimeMillis;
        return record;
    }
}

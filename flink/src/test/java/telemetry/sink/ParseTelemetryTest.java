package telemetry.sink;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.streaming.util.ProcessFunctionTestHarnesses;
import org.junit.jupiter.api.Test;
import telemetry.sink.parse.DeviceClock;
import telemetry.sink.parse.KafkaMessage;
import telemetry.sink.parse.TelemetryRecord;
import telemetry.sink.testing.SimulatorMessages;

class ParseTelemetryTest {
    private static final DeviceClock CLOCK = new DeviceClock(LocalDate.parse("2025-01-01"), 300);
    private static final long READ = Instant.parse("2026-11-26T10:15:02Z").toEpochMilli();
    private static final SimulatorMessages MESSAGES = new SimulatorMessages("run-7", "host-a", 512);

    @Test
    void aReadingFromAHostWhoseClocksBothRunAheadIsFiledByReadTimeAndCounted() throws Exception {
        long ahead = READ + Duration.ofDays(400).toMillis();
        // The side output is what CountedInOneTask counts (TelemetryPipeline): one element, one increment.
        try (OneInputStreamOperatorTestHarness<KafkaMessage, TelemetryRecord> harness =
                ProcessFunctionTestHarnesses.forProcessFunction(new ParseTelemetry(CLOCK, null))) {
            harness.setProcessingTime(READ);
            harness.processElement(message(ahead, ahead), ahead);

            assertThat(harness.getSideOutput(ParseTelemetry.CLOCK_OUT_OF_RANGE))
                    .extracting(StreamRecord::getValue)
                    .containsExactly(MESSAGES.deviceId(42));
            assertThat(harness.extractOutputValues()).singleElement()
                    .satisfies(record -> assertThat(record.partitionTimeMillis).isEqualTo(READ));
        }
    }

    @Test
    void aReadingFromAHostAMinuteAheadIsFiledByItsDeviceTimeAndNotCounted() throws Exception {
        long ahead = READ + 60_000;
        try (OneInputStreamOperatorTestHarness<KafkaMessage, TelemetryRecord> harness =
                ProcessFunctionTestHarnesses.forProcessFunction(new ParseTelemetry(CLOCK, null))) {
            harness.setProcessingTime(READ);
            harness.processElement(message(ahead, ahead), ahead);

            assertThat(harness.getSideOutput(ParseTelemetry.CLOCK_OUT_OF_RANGE)).isNullOrEmpty();
            assertThat(harness.extractOutputValues()).singleElement()
                    .satisfies(record -> assertThat(record.partitionTimeMillis).isEqualTo(ahead));
        }
    }

    private static KafkaMessage message(long sentMillis, long kafkaTimestamp) {
        byte[] value = MESSAGES.render(1, 42, 1L, sentMillis * 1_000_000L);
        return new KafkaMessage("telemetry", 0, 7L, kafkaTimestamp, value);
    }
}

package telemetry.sink.parse;

import java.util.Objects;

/**
 * One telemetry reading as it lands in Parquet: the fields the Glue table declares, in its
 * column order. A public-field POJO so Flink serializes it with its own PojoSerializer, not Kryo.
 */
public class TelemetryRecord {
    public String runId;
    public String producerId;
    public String deviceId;
    public long seq;
    public long sentNs;
    /** Milliseconds since the epoch (UTC), derived from {@link #sentNs}. */
    public long eventTimeMillis;
    public double temperatureC;
    public double humidityPct;
    public double batteryPct;
    public double lat;
    public double lon;
    public String status;
    public int kafkaPartition;
    public long kafkaOffset;
    /**
     * The Kafka record's timestamp in ms since the epoch (the writing client's clock: the IoT rules
     * engine for device messages), or the time the sink read it when the record has none.
     */
    public long ingestTimeMillis;
    /**
     * When the sink read the record: the task's processing time (the JVM's clock, ms since the
     * epoch) as the record is parsed, in the task that reads it from Kafka (the parser is chained
     * to the source), after the Kafka source's fetcher handed it over. With {@link #ingestTimeMillis},
     * the record's Kafka timestamp: the wait in Kafka on a LogAppendTime topic; on a CreateTime topic
     * the producer's clock, so the difference also holds batching, retries and clock skew.
     */
    public long readTimeMillis;

    /**
     * Not a column: the time whose UTC hour the record is filed under, {@link #eventTimeMillis} when
     * the device's clock is believable and {@link #ingestTimeMillis} otherwise (see DeviceClock).
     */
    public long partitionTimeMillis;

    public TelemetryRecord() {}

    @Override
    public boolean equals(Object other) {
        if (this == other) {
            return true;
        }
        if (!(other instanceof TelemetryRecord)) {
            return false;
        }
        TelemetryRecord that = (TelemetryRecord) other;
        return seq == that.seq
                && sentNs == that.sentNs
                && eventTimeMillis == that.eventTimeMillis
                && Double.compare(temperatureC, that.temperatureC) == 0
                && Double.compare(humidityPct, that.humidityPct) == 0
                && Double.compare(batteryPct, that.batteryPct) == 0
                && Double.compare(lat, that.lat) == 0
                && Double.compare(lon, that.lon) == 0
                && kafkaPartition == that.kafkaPartition
                && kafkaOffset == that.kafkaOffset
                && ingestTimeMillis == that.ingestTimeMillis
                && readTimeMillis == that.readTimeMillis
                && partitionTimeMillis == that.partitionTimeMillis
                && Objects.equals(runId, that.runId)
                && Objects.equals(producerId, that.producerId)
                && Objects.equals(deviceId, that.deviceId)
                && Objects.equals(status, that.status);
    }

    @Override
    public int hashCode() {
        return Objects.hash(producerId, deviceId, seq, kafkaPartition, kafkaOffset);
    }

    @Override
    public String toString() {
        return "TelemetryRecord{" + producerId + " " + deviceId + " seq=" + seq + " sent_ns=" + sentNs
                + " partition=" + kafkaPartition + " offset=" + kafkaOffset + "}";
    }
}

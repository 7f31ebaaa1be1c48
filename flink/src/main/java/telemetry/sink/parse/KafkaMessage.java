package telemetry.sink.parse;

/**
 * A Kafka record as it was read, before parsing: what a dead letter needs to point back at it.
 * A public-field POJO for Flink's PojoSerializer.
 */
public class KafkaMessage {
    public String topic;
    public int partition;
    public long offset;
    /** The record's Kafka timestamp in ms since the epoch (-1 when the record has none). */
    public long timestamp;
    /** The record's value; null for a tombstone. */
    public byte[] value;

    public KafkaMessage() {}

    public KafkaMessage(String topic, int partition, long offset, long timestamp, byte[] value) {
        this.topic = topic;
        this.partition = partition;
        this.offset = offset;
        this.timestamp = timestamp;
        this.value = value;
    }
}

package telemetry.sink.parse;

/**
 * A Kafka record as it was read, before parsing: what a dead letter needs to point back at it.
 * A public-field POJO for Flink's PojoSerializer.
 */
public class KafkaMessage {
    /**
     * The header the AWS IoT rule's Kafka action puts the device's thing name in (the topic's second
     * level, {@code ${topic(2)}}; stacks/constructs/kafka_topic_rule.py). The device policy ties
     * that topic level to the certificate the device connected with, so on the IoT path it is the
     * authoritative device id; the payload's own {@code device_id} is only the device's claim.
     */
    public static final String THING_NAME_HEADER = "iot_thing_name";

    public String topic;
    public int partition;
    public long offset;
    /** The record's Kafka timestamp in ms since the epoch (-1 when the record has none). */
    public long timestamp;
    /** The record's value; null for a tombstone. */
    public byte[] value;
    /** The {@link #THING_NAME_HEADER} header as UTF-8 text; null when the record has none. */
    public String thingName;

    public KafkaMessage() {}

    public KafkaMessage(String topic, int partition, long offset, long timestamp, byte[] value) {
        this(topic, partition, offset, timestamp, value, null);
    }

    public KafkaMessage(String topic, int partition, long offset, long timestamp, byte[] value, String thingName) {
        this.topic = topic;
        this.partition = partition;
        this.offset = offset;
        this.timestamp = timestamp;
        this.value = value;
        this.thingName = thingName;
    }
}

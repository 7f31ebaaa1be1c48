package telemetry.sink;

import java.nio.charset.StandardCharsets;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import telemetry.sink.parse.KafkaMessage;

/**
 * Keeps the raw value with its Kafka coordinates, timestamp and the IoT rule's thing-name header.
 * Parsing happens in {@link ParseTelemetry}, where a failure becomes a dead letter instead of an
 * exception that would fail the source.
 */
public class KafkaMessageDeserializer implements KafkaRecordDeserializationSchema<KafkaMessage> {
    private static final long serialVersionUID = 1L;

    @Override
    public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<KafkaMessage> out) {
        Header thing = record.headers().lastHeader(KafkaMessage.THING_NAME_HEADER);
        String thingName = thing == null || thing.value() == null
                ? null
                : new String(thing.value(), StandardCharsets.UTF_8);
        out.collect(new KafkaMessage(
                record.topic(), record.partition(), record.offset(), record.timestamp(), record.value(), thingName));
    }

    @Override
    public TypeInformation<KafkaMessage> getProducedType() {
        return TypeInformation.of(KafkaMessage.class);
    }
}

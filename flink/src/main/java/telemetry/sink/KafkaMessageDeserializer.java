package telemetry.sink;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import telemetry.sink.parse.KafkaMessage;

/**
 * Keeps the raw value with its Kafka coordinates. Parsing happens in {@link ParseTelemetry}, where
 * a failure becomes a dead letter instead of an exception that would fail the source.
 */
public class KafkaMessageDeserializer implements KafkaRecordDeserializationSchema<KafkaMessage> {
    private static final long serialVersionUID = 1L;

    @Override
    public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<KafkaMessage> out) {
        out.collect(new KafkaMessage(record.topic(), record.partition(), record.offset(), record.timestamp(), record.value()));
    }

    @Override
    public TypeInformation<KafkaMessage> getProducedType() {
        return TypeInformation.of(KafkaMessage.class);
    }
}

package telemetry.sink.parse;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import org.junit.jupiter.api.Test;

class DeadLetterTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long WRITTEN_AT = 1_763_862_000_000L; // 2025-11-23T01:40:00Z

    @Test
    void carriesReasonCoordinatesAndTheValueAsText() throws Exception {
        KafkaMessage message = new KafkaMessage("telemetry", 4, 77L, 1_763_861_999_000L,
                "{\"seq\": \"line\nbreak\"}".getBytes(StandardCharsets.UTF_8));

        String line = DeadLetter.toJsonLine(message, "missing field: run_id", WRITTEN_AT);
        JsonNode node = JSON.readTree(line);

        assertThat(line).doesNotContain("\n");
        assertThat(node.get("reason").asText()).isEqualTo("missing field: run_id");
        assertThat(node.get("topic").asText()).isEqualTo("telemetry");
        assertThat(node.get("partition").asInt()).isEqualTo(4);
        assertThat(node.get("offset").asLong()).isEqualTo(77L);
        assertThat(node.get("kafka_timestamp").asText()).isEqualTo("2025-11-23T01:39:59Z");
        assertThat(node.get("dead_letter_time").asText()).isEqualTo("2025-11-23T01:40:00Z");
        assertThat(node.get("value_encoding").asText()).isEqualTo("utf-8");
        assertThat(node.get("value").asText()).isEqualTo("{\"seq\": \"line\nbreak\"}");
    }

    @Test
    void encodesAValueThatIsNotUtf8AsBase64() throws Exception {
        byte[] value = {(byte) 0xff, (byte) 0xfe, 0x41, 0x00};
        KafkaMessage message = new KafkaMessage("telemetry", 0, 1L, 5L, value);

        JsonNode node = JSON.readTree(DeadLetter.toJsonLine(message, "malformed JSON: x", WRITTEN_AT));

        assertThat(node.get("value_encoding").asText()).isEqualTo("base64");
        assertThat(Base64.getDecoder().decode(node.get("value").asText())).isEqualTo(value);
    }

    @Test
    void recordsATombstoneAndAMissingTimestampAsNull() throws Exception {
        KafkaMessage message = new KafkaMessage("telemetry", 0, 1L, -1L, null);

        JsonNode node = JSON.readTree(DeadLetter.toJsonLine(message, "empty value", WRITTEN_AT));

        assertThat(node.get("value_encoding").asText()).isEqualTo("none");
        assertThat(node.get("value").isNull()).isTrue();
        assertThat(node.get("kafka_timestamp").isNull()).isTrue();
    }
}

package telemetry.sink.parse;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import java.io.IOException;
import java.io.StringWriter;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Base64;

/**
 * The JSON line written for a message that could not be parsed: why, where it came from, and
 * the value itself (UTF-8 text when it is valid UTF-8, base64 otherwise), so it can be replayed.
 */
public final class DeadLetter {
    private static final JsonFactory JSON = new JsonFactory();

    private DeadLetter() {}

    /**
     * One line of JSON, without the trailing newline:
     * {@code {"reason", "topic", "partition", "offset", "kafka_timestamp", "dead_letter_time",
     * "value_encoding", "value"}}; kafka_timestamp and dead_letter_time are ISO-8601 UTC.
     */
    public static String toJsonLine(KafkaMessage message, String reason, long deadLetterTimeMillis) {
        StringWriter out = new StringWriter(256 + (message.value == null ? 0 : message.value.length * 2));
        try (JsonGenerator json = JSON.createGenerator(out)) {
            json.writeStartObject();
            json.writeStringField("reason", reason);
            json.writeStringField("topic", message.topic);
            json.writeNumberField("partition", message.partition);
            json.writeNumberField("offset", message.offset);
            if (message.timestamp >= 0) {
                json.writeStringField("kafka_timestamp", Instant.ofEpochMilli(message.timestamp).toString());
            } else {
                json.writeNullField("kafka_timestamp");
            }
            json.writeStringField("dead_letter_time", Instant.ofEpochMilli(deadLetterTimeMillis).toString());
            if (message.value == null) {
                json.writeStringField("value_encoding", "none");
                json.writeNullField("value");
            } else {
                String text = utf8OrNull(message.value);
                json.writeStringField("value_encoding", text != null ? "utf-8" : "base64");
                json.writeStringField(
                        "value", text != null ? text : Base64.getEncoder().encodeToString(message.value));
            }
            json.writeEndObject();
        } catch (IOException e) {
            throw new UncheckedIOException("writing JSON to a StringWriter failed", e);
        }
        return out.toString();
    }

    /** The value decoded as UTF-8, or null when it is not valid UTF-8. */
    static String utf8OrNull(byte[] value) {
        try {
            return StandardCharsets.UTF_8
                    .newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(value))
                    .toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }
}

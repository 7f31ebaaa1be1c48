package telemetry.sink.parse;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.io.IOException;

/**
 * Reads the simulator's telemetry JSON (see simulator/payload.py) into a {@link TelemetryRecord}.
 *
 * <p>A streaming parser, not a data binder: one pass over the bytes, no intermediate tree, and
 * every rejection names the field and what was wrong with it, which becomes the dead letter's
 * reason. Unknown fields (such as {@code pad}) are skipped; space padding is ordinary JSON
 * whitespace.
 *
 * <p>The device id is the IoT rule's thing-name header when the record has one (the device policy
 * ties it to the device's certificate), and the payload's {@code device_id} otherwise (the
 * simulator's Kafka producers, which sign in to MSK with IAM). On the IoT path a payload without
 * {@code device_id}, or with a different one, is filed under the thing name.
 */
public final class TelemetryParser {
    private static final JsonFactory JSON =
            JsonFactory.builder()
                    .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
                    // FastDoubleParser (Jackson 2.14+) returns the same correctly rounded double as
                    // Double.parseDouble, in less time.
                    .enable(StreamReadFeature.USE_FAST_DOUBLE_PARSER)
                    .build();
    private static final long NANOS_PER_MILLI = 1_000_000L;

    // One bit per required field, so "which one is missing" needs no set.
    private static final int RUN_ID = 1;
    private static final int PRODUCER_ID = 1 << 1;
    private static final int DEVICE_ID = 1 << 2;
    private static final int SEQ = 1 << 3;
    private static final int SENT_NS = 1 << 4;
    private static final int TEMPERATURE = 1 << 5;
    private static final int HUMIDITY = 1 << 6;
    private static final int BATTERY = 1 << 7;
    private static final int LAT = 1 << 8;
    private static final int LON = 1 << 9;
    private static final int STATUS = 1 << 10;
    private static final int ALL = (1 << 11) - 1;
    private static final String[] FIELD_NAMES = {
        "run_id", "producer_id", "device_id", "seq", "sent_ns", "readings.temperature_c",
        "readings.humidity_pct", "readings.battery_pct", "readings.location.lat",
        "readings.location.lon", "readings.status"
    };

    private TelemetryParser() {}

    /**
     * Parses one message; the Kafka coordinates and timestamp are copied into the record, and the
     * thing-name header, when present, is its device id.
     */
    public static TelemetryRecord parse(KafkaMessage message) throws InvalidTelemetryException {
        TelemetryRecord record = parse(message.value, message.thingName);
        record.kafkaPartition = message.partition;
        record.kafkaOffset = message.offset;
        record.ingestTimeMillis = message.timestamp;
        return record;
    }

    /** Parses a message value with no thing name; the Kafka fields of the result are left at zero. */
    public static TelemetryRecord parse(byte[] value) throws InvalidTelemetryException {
        return parse(value, null);
    }

    private static TelemetryRecord parse(byte[] value, String thingName) throws InvalidTelemetryException {
        if (value == null || isBlank(value)) {
            throw new InvalidTelemetryException("empty value");
        }
        if (thingName != null && thingName.isBlank()) {
            throw new InvalidTelemetryException("header " + KafkaMessage.THING_NAME_HEADER + " is empty");
        }
        if (thingName != null && thingName.contains("${")) {
            // A rules engine that wrote the template instead of its value: no device is named so.
            throw new InvalidTelemetryException(
                    "header " + KafkaMessage.THING_NAME_HEADER + " is an unsubstituted template: " + thingName);
        }
        TelemetryRecord record = new TelemetryRecord();
        try (JsonParser json = JSON.createParser(value)) {
            if (json.nextToken() != JsonToken.START_OBJECT) {
                throw new InvalidTelemetryException("not a JSON object");
            }
            int seen = readTopLevel(json, record, thingName == null);
            if (thingName != null) {
                record.deviceId = thingName;
                seen |= DEVICE_ID;
            }
            if (json.nextToken() != null) {
                throw new InvalidTelemetryException("trailing content after the JSON object");
            }
            if (seen != ALL) {
                throw new InvalidTelemetryException("missing field: " + firstMissing(seen));
            }
        } catch (JsonProcessingException e) {
            throw new InvalidTelemetryException("malformed JSON: " + e.getOriginalMessage());
        } catch (IOException e) {
            // A byte-array source has no I/O of its own; anything here is a parse failure.
            throw new InvalidTelemetryException("malformed JSON: " + e.getMessage());
        }
        record.eventTimeMillis = Math.floorDiv(record.sentNs, NANOS_PER_MILLI);
        return record;
    }

    private static int readTopLevel(JsonParser json, TelemetryRecord record, boolean deviceIdFromPayload)
            throws IOException, InvalidTelemetryException {
        int seen = 0;
        while (json.nextToken() == JsonToken.FIELD_NAME) {
            String name = json.currentName();
            JsonToken token = json.nextToken();
            switch (name) {
                case "run_id":
                    record.runId = text(json, token, "run_id");
                    seen |= RUN_ID;
                    break;
                case "producer_id":
                    record.producerId = text(json, token, "producer_id");
                    seen |= PRODUCER_ID;
                    break;
                case "device_id":
                    if (!deviceIdFromPayload) {
                        json.skipChildren();  // the thing name decides, whatever the device claims
                        break;
                    }
                    record.deviceId = text(json, token, "device_id");
                    seen |= DEVICE_ID;
                    break;
                case "seq":
                    record.seq = integer(json, token, "seq");
                    if (record.seq < 0) {
                        throw invalid("seq", record.seq + " is negative");
                    }
                    seen |= SEQ;
                    break;
                case "sent_ns":
                    record.sentNs = integer(json, token, "sent_ns");
                    if (record.sentNs <= 0) {
                        throw invalid("sent_ns", record.sentNs + " is not after the epoch");
                    }
                    seen |= SENT_NS;
                    break;
                case "readings":
                    expectObject(token, "readings");
                    seen |= readReadings(json, record);
                    break;
                default:
                    json.skipChildren();
            }
        }
        return seen;
    }

    private static int readReadings(JsonParser json, TelemetryRecord record)
            throws IOException, InvalidTelemetryException {
        int seen = 0;
        while (json.nextToken() == JsonToken.FIELD_NAME) {
            String name = json.currentName();
            JsonToken token = json.nextToken();
            switch (name) {
                case "temperature_c":
                    record.temperatureC = number(json, token, "readings.temperature_c");
                    seen |= TEMPERATURE;
                    break;
                case "humidity_pct":
                    record.humidityPct = number(json, token, "readings.humidity_pct");
                    seen |= HUMIDITY;
                    break;
                case "battery_pct":
                    record.batteryPct = number(json, token, "readings.battery_pct");
                    seen |= BATTERY;
                    break;
                case "status":
                    record.status = text(json, token, "readings.status");
                    seen |= STATUS;
                    break;
                case "location":
                    expectObject(token, "readings.location");
                    seen |= readLocation(json, record);
                    break;
                default:
                    json.skipChildren();
            }
        }
        return seen;
    }

    private static int readLocation(JsonParser json, TelemetryRecord record)
            throws IOException, InvalidTelemetryException {
        int seen = 0;
        while (json.nextToken() == JsonToken.FIELD_NAME) {
            String name = json.currentName();
            JsonToken token = json.nextToken();
            switch (name) {
                case "lat":
                    record.lat = number(json, token, "readings.location.lat");
                    if (record.lat < -90.0 || record.lat > 90.0) {
                        throw invalid("readings.location.lat", record.lat + " is outside [-90, 90]");
                    }
                    seen |= LAT;
                    break;
                case "lon":
                    record.lon = number(json, token, "readings.location.lon");
                    if (record.lon < -180.0 || record.lon > 180.0) {
                        throw invalid("readings.location.lon", record.lon + " is outside [-180, 180]");
                    }
                    seen |= LON;
                    break;
                default:
                    json.skipChildren();
            }
        }
        return seen;
    }

    private static String text(JsonParser json, JsonToken token, String field)
            throws IOException, InvalidTelemetryException {
        if (token != JsonToken.VALUE_STRING) {
            throw invalid(field, "expected a string, got " + describe(token));
        }
        String text = json.getText();
        if (text.isBlank()) {
            throw invalid(field, "is empty");
        }
        return text;
    }

    private static long integer(JsonParser json, JsonToken token, String field)
            throws IOException, InvalidTelemetryException {
        if (token != JsonToken.VALUE_NUMBER_INT) {
            throw invalid(field, "expected an integer, got " + describe(token));
        }
        JsonParser.NumberType type = json.getNumberType();
        if (type != JsonParser.NumberType.INT && type != JsonParser.NumberType.LONG) {
            throw invalid(field, json.getText() + " does not fit in 64 bits");
        }
        return json.getLongValue();
    }

    private static double number(JsonParser json, JsonToken token, String field)
            throws IOException, InvalidTelemetryException {
        if (token != JsonToken.VALUE_NUMBER_INT && token != JsonToken.VALUE_NUMBER_FLOAT) {
            throw invalid(field, "expected a number, got " + describe(token));
        }
        return json.getDoubleValue();
    }

    private static void expectObject(JsonToken token, String field) throws InvalidTelemetryException {
        if (token != JsonToken.START_OBJECT) {
            throw invalid(field, "expected an object, got " + describe(token));
        }
    }

    private static InvalidTelemetryException invalid(String field, String problem) {
        return new InvalidTelemetryException("invalid field " + field + ": " + problem);
    }

    private static String describe(JsonToken token) {
        if (token == null) {
            return "end of input";
        }
        switch (token) {
            case VALUE_STRING:
                return "a string";
            case VALUE_NUMBER_INT:
            case VALUE_NUMBER_FLOAT:
                return "a number";
            case VALUE_TRUE:
            case VALUE_FALSE:
                return "a boolean";
            case VALUE_NULL:
                return "null";
            case START_OBJECT:
                return "an object";
            case START_ARRAY:
                return "an array";
            default:
                return token.asString() == null ? token.name() : token.asString();
        }
    }

    private static String firstMissing(int seen) {
        for (int bit = 0; bit < FIELD_NAMES.length; bit++) {
            if ((seen & (1 << bit)) == 0) {
                return FIELD_NAMES[bit];
            }
        }
        throw new IllegalStateException("no field is missing");
    }

    private static boolean isBlank(byte[] value) {
        for (byte b : value) {
            if (b != ' ' && b != '\t' && b != '\n' && b != '\r') {
                return false;
            }
        }
        return true;
    }
}

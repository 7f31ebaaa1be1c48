package telemetry.sink.parse;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.charset.StandardCharsets;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import telemetry.sink.testing.SimulatorMessages;

class TelemetryParserTest {
    private static final String GOOD =
            "{\"run_id\":\"R\",\"producer_id\":\"HOST/p01\",\"device_id\":\"HOST-d000042\",\"seq\":        17,"
                    + "\"sent_ns\":1763862000123456789,\"readings\":{\"temperature_c\":21.03,\"humidity_pct\":45.2,"
                    + "\"battery_pct\":99,\"location\":{\"lat\":47.61234,\"lon\":-122.31234},\"status\":\"ok\"}   ,"
                    + "\"pad\":\"xxxx\"}";

    @Test
    void parsesTheSimulatorsPaddedMessage() throws Exception {
        TelemetryRecord record = TelemetryParser.parse(new KafkaMessage("t", 3, 1234L, 99L, bytes(GOOD)));

        assertThat(record.runId).isEqualTo("R");
        assertThat(record.producerId).isEqualTo("HOST/p01");
        assertThat(record.deviceId).isEqualTo("HOST-d000042");
        assertThat(record.seq).isEqualTo(17L);
        assertThat(record.sentNs).isEqualTo(1763862000123456789L);
        assertThat(record.eventTimeMillis).isEqualTo(1763862000123L);
        assertThat(record.temperatureC).isEqualTo(21.03);
        assertThat(record.humidityPct).isEqualTo(45.2);
        assertThat(record.batteryPct).isEqualTo(99.0);
        assertThat(record.lat).isEqualTo(47.61234);
        assertThat(record.lon).isEqualTo(-122.31234);
        assertThat(record.status).isEqualTo("ok");
        assertThat(record.kafkaPartition).isEqualTo(3);
        assertThat(record.kafkaOffset).isEqualTo(1234L);
    }

    @Test
    void parsesWhatTheSimulatorTemplateRenders() throws Exception {
        SimulatorMessages messages = new SimulatorMessages("run-7", "host-a", 512);
        byte[] value = messages.render(2, 42, 5L, 1_700_000_000_000_000_000L);

        TelemetryRecord record = TelemetryParser.parse(value);

        assertThat(value).hasSize(512);
        assertThat(record.producerId).isEqualTo("host-a/p02");
        assertThat(record.deviceId).isEqualTo("host-a-d000042");
        assertThat(record.seq).isEqualTo(5L);
        assertThat(record.eventTimeMillis).isEqualTo(1_700_000_000_000L);
    }

    @Test
    void onTheIotPathTheThingNameHeaderIsTheDeviceIdWhateverThePayloadClaims() throws Exception {
        // The rule's Kafka action sets the header from ${topic(2)}, which the device policy ties
        // to the certificate; the payload's device_id is the device's own claim.
        KafkaMessage claimed = new KafkaMessage("t", 0, 1L, 99L, bytes(GOOD), "thing-7");
        KafkaMessage withoutClaim = new KafkaMessage(
                "t", 0, 2L, 99L, bytes(GOOD.replace("\"device_id\":\"HOST-d000042\",", "")), "thing-7");
        KafkaMessage oddClaim = new KafkaMessage(
                "t", 0, 3L, 99L, bytes(GOOD.replace("\"HOST-d000042\"", "{\"serial\":5}")), "thing-7");

        assertThat(TelemetryParser.parse(claimed).deviceId).isEqualTo("thing-7");
        assertThat(TelemetryParser.parse(withoutClaim).deviceId).isEqualTo("thing-7");
        assertThat(TelemetryParser.parse(oddClaim).deviceId).isEqualTo("thing-7");
        assertThat(TelemetryParser.parse(claimed).ingestTimeMillis).isEqualTo(99L);
    }

    @Test
    void aDuplicateDeviceIdIsRejectedWhereverItComesFrom() {
        // What the old rule (SELECT *, topic(2) AS device_id) could have produced: no document
        // says which key IoT keeps, so the sink refuses to guess.
        String twice = GOOD.replace("\"device_id\":\"HOST-d000042\",",
                "\"device_id\":\"HOST-d000042\",\"device_id\":\"thing-7\",");

        assertThatThrownBy(() -> TelemetryParser.parse(new KafkaMessage("t", 0, 1L, 99L, bytes(twice), "thing-7")))
                .isInstanceOf(InvalidTelemetryException.class)
                .hasMessageStartingWith("malformed JSON: Duplicate field 'device_id'");
    }

    @Test
    void aThingNameHeaderTheRulesEngineDidNotSubstituteIsRejected() {
        assertThatThrownBy(() -> TelemetryParser.parse(new KafkaMessage("t", 0, 1L, 99L, bytes(GOOD), "${topic(2)}")))
                .isInstanceOf(InvalidTelemetryException.class)
                .hasMessage("header iot_thing_name is an unsubstituted template: ${topic(2)}");
    }

    @Test
    void anEmptyThingNameHeaderIsRejected() {
        assertThatThrownBy(() -> TelemetryParser.parse(new KafkaMessage("t", 0, 1L, 99L, bytes(GOOD), " ")))
                .isInstanceOf(InvalidTelemetryException.class)
                .hasMessage("header iot_thing_name is empty");
    }

    @Test
    void ignoresUnknownFieldsAndTheirNesting() throws Exception {
        String withExtras = GOOD.replace("\"pad\":\"xxxx\"", "\"pad\":\"xxxx\",\"extra\":{\"a\":[1,{\"b\":2}]}");

        assertThat(TelemetryParser.parse(bytes(withExtras)).seq).isEqualTo(17L);
    }

    static Stream<Arguments> malformed() {
        return Stream.of(
                Arguments.of("not JSON", "hello", "malformed JSON"),
                Arguments.of("truncated", GOOD.substring(0, 60), "malformed JSON"),
                Arguments.of("array", "[1,2]", "not a JSON object"),
                Arguments.of("blank", "   ", "empty value"),
                Arguments.of("trailing content", GOOD + " {}", "trailing content after the JSON object"),
                Arguments.of("missing run_id", GOOD.replace("\"run_id\":\"R\",", ""), "missing field: run_id"),
                Arguments.of("missing status", GOOD.replace(",\"status\":\"ok\"", ""), "missing field: readings.status"),
                Arguments.of("missing lat", GOOD.replace("\"lat\":47.61234,", ""), "missing field: readings.location.lat"),
                Arguments.of("missing readings", GOOD.replaceAll(",\"readings\":\\{.*\"ok\"\\}   ", ""),
                        "missing field: readings.temperature_c"),
                Arguments.of("seq as string", GOOD.replace("\"seq\":        17", "\"seq\":\"17\""),
                        "invalid field seq: expected an integer, got a string"),
                Arguments.of("seq fractional", GOOD.replace("\"seq\":        17", "\"seq\":17.5"),
                        "invalid field seq: expected an integer, got a number"),
                Arguments.of("seq too large", GOOD.replace("\"seq\":        17", "\"seq\":99999999999999999999"),
                        "invalid field seq: 99999999999999999999 does not fit in 64 bits"),
                Arguments.of("seq negative", GOOD.replace("\"seq\":        17", "\"seq\":-1"), "invalid field seq: -1 is negative"),
                Arguments.of("sent_ns zero", GOOD.replace("1763862000123456789", "0"),
                        "invalid field sent_ns: 0 is not after the epoch"),
                Arguments.of("temperature null", GOOD.replace("21.03", "null"),
                        "invalid field readings.temperature_c: expected a number, got null"),
                Arguments.of("status number", GOOD.replace("\"status\":\"ok\"", "\"status\":1"),
                        "invalid field readings.status: expected a string, got a number"),
                Arguments.of("empty device", GOOD.replace("HOST-d000042", ""), "invalid field device_id: is empty"),
                Arguments.of("readings array", GOOD.replaceAll("\"readings\":\\{.*\"ok\"\\}   ", "\"readings\":[]"),
                        "invalid field readings: expected an object, got an array"),
                Arguments.of("lat out of range", GOOD.replace("47.61234", "91.5"),
                        "invalid field readings.location.lat: 91.5 is outside [-90, 90]"),
                Arguments.of("duplicate field", GOOD.replace("\"seq\":        17,", "\"seq\":1,\"seq\":2,"),
                        "malformed JSON: Duplicate field 'seq'"));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("malformed")
    void rejectsWithAReasonThatNamesTheProblem(String name, String value, String reason) {
        assertThatThrownBy(() -> TelemetryParser.parse(bytes(value)))
                .isInstanceOf(InvalidTelemetryException.class)
                .hasMessageStartingWith(reason);
    }

    @Test
    void rejectsANullValue() {
        assertThatThrownBy(() -> TelemetryParser.parse((byte[]) null)).hasMessage("empty value");
    }

    @Test
    void rejectsInvalidUtf8() {
        byte[] value = bytes(GOOD);
        value[15] = (byte) 0xC3; // a lead byte followed by an ASCII byte: not UTF-8
        value[16] = (byte) 0x28;

        assertThatThrownBy(() -> TelemetryParser.parse(value))
                .isInstanceOf(InvalidTelemetryException.class)
                .hasMessageContaining("UTF-8");
    }

    @Test
    void readsEveryNumberAsDoubleParseDoubleDoes() throws Exception {
        // The parser uses Jackson's fast double parser; it must give the same bits as the JDK.
        java.util.Random random = new java.util.Random(42);
        for (int i = 0; i < 20_000; i++) {
            String[] texts = {
                String.format(java.util.Locale.ROOT, "%.2f", random.nextDouble() * 125 - 40),
                String.format(java.util.Locale.ROOT, "%.5f", random.nextDouble() * 180 - 90),
                Double.toString(random.nextDouble() * 360 - 180),
                Double.toString(Double.longBitsToDouble(random.nextLong() & 0x7fefffffffffffffL)),
            };
            for (String text : texts) {
                TelemetryRecord record = TelemetryParser.parse(bytes(GOOD.replace("21.03", text)));
                assertThat(Double.doubleToRawLongBits(record.temperatureC))
                        .as(text).isEqualTo(Double.doubleToRawLongBits(Double.parseDouble(text)));
            }
        }
    }

    private static byte[] bytes(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }
}

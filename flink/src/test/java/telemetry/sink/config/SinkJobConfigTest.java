package telemetry.sink.config;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class SinkJobConfigTest {

    @Test
    void appliesDefaultsToAMinimalConfiguration() {
        SinkJobConfig config = SinkJobConfig.from(groups(new String[0][]));

        assertThat(config.bootstrapServers).isEqualTo("b-1.msk:9098,b-2.msk:9098");
        assertThat(config.securityProtocol).isEqualTo(SecurityProtocol.SASL_SSL);
        assertThat(config.startingOffsets).isEqualTo(StartingOffsets.COMMITTED_EARLIEST);
        assertThat(config.maxPartSizeMb).isEqualTo(SinkJobConfig.DEFAULT_MAX_PART_SIZE_MB);
        assertThat(config.checkpointIntervalMs).isEqualTo(SinkJobConfig.DEFAULT_LOCAL_CHECKPOINT_INTERVAL_MS);
        assertThat(config.outputPath).isEqualTo("s3://bucket/telemetry");
        assertThat(config.smokePath).isNull(); // smoke runs' records filed with the others
        assertThat(config.kafkaClientProperties())
                .containsEntry("security.protocol", "SASL_SSL")
                .containsEntry("sasl.mechanism", "AWS_MSK_IAM")
                .containsEntry("sasl.jaas.config", "software.amazon.msk.auth.iam.IAMLoginModule required;")
                .containsEntry("sasl.client.callback.handler.class",
                        "software.amazon.msk.auth.iam.IAMClientCallbackHandler");
    }

    @Test
    void readsEveryOptionalKey() {
        SinkJobConfig config = SinkJobConfig.from(groups(new String[][] {
            {"KafkaSource", "security.protocol", "plaintext"},
            {"KafkaSource", "starting.offsets", "latest"},
            {"Sink", "max.part.size.mb", "64"},
            {"Sink", "checkpoint.interval.ms", "2500"},
            {"Sink", "output.path", "file:///tmp/out/"},
            {"Sink", "smoke.path", "file:///tmp/smoke/"},
        }));

        assertThat(config.smokePath).isEqualTo("file:///tmp/smoke");
        assertThat(config.toString()).contains("smoke.path=file:///tmp/smoke");

        assertThat(config.securityProtocol).isEqualTo(SecurityProtocol.PLAINTEXT);
        assertThat(config.kafkaClientProperties()).containsOnlyKeys("security.protocol");
        assertThat(config.startingOffsets).isEqualTo(StartingOffsets.LATEST);
        assertThat(config.maxPartSizeBytes()).isEqualTo(64L * 1024 * 1024);
        assertThat(config.checkpointIntervalMs).isEqualTo(2500L);
        assertThat(config.outputPath).isEqualTo("file:///tmp/out");
    }

    @ParameterizedTest(name = "{0}.{1}={2}")
    @CsvSource(delimiter = '|', value = {
        "KafkaSource|bootstrap.servers|<absent>|property KafkaSource.bootstrap.servers is required but missing; expected HOST:PORT[,HOST:PORT...]",
        "KafkaSource|bootstrap.servers|'  '|property KafkaSource.bootstrap.servers is required but empty; expected HOST:PORT[,HOST:PORT...]",
        "KafkaSource|bootstrap.servers|b-1.msk|property KafkaSource.bootstrap.servers is \"b-1.msk\"; expected HOST:PORT[,HOST:PORT...]",
        "KafkaSource|topic|<absent>|property KafkaSource.topic is required but missing; expected a Kafka topic name",
        "KafkaSource|topic|a topic|property KafkaSource.topic is \"a topic\"; expected a Kafka topic name ([A-Za-z0-9._-], 1-249 characters)",
        "KafkaSource|group.id|<absent>|property KafkaSource.group.id is required but missing; expected a Kafka consumer group id",
        "KafkaSource|security.protocol|SSL|property KafkaSource.security.protocol is \"SSL\"; expected one of SASL_SSL, PLAINTEXT, SASL_PLAINTEXT",
        "KafkaSource|starting.offsets|committed|property KafkaSource.starting.offsets is \"committed\"; expected one of committed-earliest, earliest, latest",
        "Sink|output.path|<absent>|property Sink.output.path is required but missing; expected a URI such as s3://bucket/prefix or file:///tmp/telemetry (schemes: s3, s3a, file)",
        "Sink|output.path|/tmp/out|property Sink.output.path is \"/tmp/out\"; expected a URI such as s3://bucket/prefix or file:///tmp/telemetry (schemes: s3, s3a, file)",
        "Sink|output.path|gs://bucket/x|property Sink.output.path is \"gs://bucket/x\"; expected a URI such as s3://bucket/prefix or file:///tmp/telemetry (schemes: s3, s3a, file)",
        "Sink|dead.letter.path|s3:///no-bucket|property Sink.dead.letter.path is \"s3:///no-bucket\"; expected a URI such as s3://bucket/prefix or file:///tmp/telemetry (schemes: s3, s3a, file)",
        "Sink|dead.letter.path|s3://bucket/telemetry/dead|property Sink.dead.letter.path (s3://bucket/telemetry/dead) and Sink.output.path (s3://bucket/telemetry) must not contain one another: the telemetry table reads everything under output.path",
        "Sink|smoke.path|s3://bucket/telemetry/smoke|property Sink.smoke.path (s3://bucket/telemetry/smoke) must not contain or be inside Sink.output.path (s3://bucket/telemetry) or Sink.dead.letter.path (s3://bucket/dead-letters): smoke records are kept out of the telemetry table",
        "Sink|smoke.path|s3://bucket|property Sink.smoke.path (s3://bucket) must not contain or be inside Sink.output.path (s3://bucket/telemetry) or Sink.dead.letter.path (s3://bucket/dead-letters): smoke records are kept out of the telemetry table",
        "Sink|smoke.path|smoke/|property Sink.smoke.path is \"smoke/\"; expected a URI such as s3://bucket/prefix or file:///tmp/telemetry (schemes: s3, s3a, file)",
        "Sink|max.part.size.mb|0|property Sink.max.part.size.mb is \"0\"; expected an integer from 1 to 4096",
        "Sink|max.part.size.mb|1.5|property Sink.max.part.size.mb is \"1.5\"; expected an integer from 1 to 4096",
        "Sink|checkpoint.interval.ms|10|property Sink.checkpoint.interval.ms is \"10\"; expected an integer >= 100",
    })
    void failsWithOneMessageNamingTheProperty(String group, String key, String value, String message) {
        Map<String, Properties> groups = groups(new String[0][]);
        if ("<absent>".equals(value)) {
            groups.get(group).remove(key);
        } else {
            groups.get(group).setProperty(key, value);
        }

        assertThatThrownBy(() -> SinkJobConfig.from(groups))
                .isInstanceOf(InvalidPropertyException.class)
                .hasMessage(message);
    }

    @Test
    void readsALocalBrokersSaslPlainUser() {
        SinkJobConfig config = SinkJobConfig.from(groups(new String[][] {
            {"KafkaSource", "security.protocol", "sasl_plaintext"},
            {"KafkaSource", "sasl.username", "identity-1"},
            {"KafkaSource", "sasl.password", "pa\"ss\\word"},
        }));

        assertThat(config.securityProtocol).isEqualTo(SecurityProtocol.SASL_PLAINTEXT);
        assertThat(config.saslUsername).isEqualTo("identity-1");
        assertThat(config.kafkaClientProperties())
                .containsOnlyKeys("security.protocol", "sasl.mechanism", "sasl.jaas.config")
                .containsEntry("security.protocol", "SASL_PLAINTEXT")
                .containsEntry("sasl.mechanism", "PLAIN")
                .containsEntry("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required"
                        + " username=\"identity-1\" password=\"pa\\\"ss\\\\word\";");
        assertThat(config.toString()).contains("sasl.username=identity-1").doesNotContain("word");
    }

    @ParameterizedTest(name = "without {0}")
    @CsvSource(delimiter = '|', value = {
        "sasl.username|property KafkaSource.sasl.username is required but missing; expected a SASL/PLAIN user of a local broker (SASL_PLAINTEXT is for local brokers only; on AWS the job signs in with its IAM role over SASL_SSL)",
        "sasl.password|property KafkaSource.sasl.password is required but missing; expected the password of a SASL/PLAIN user of a local broker (SASL_PLAINTEXT is for local brokers only; on AWS the job signs in with its IAM role over SASL_SSL)",
    })
    void saslPlaintextNeedsAUsernameAndAPassword(String absent, String message) {
        Map<String, Properties> groups = groups(new String[][] {
            {"KafkaSource", "security.protocol", "SASL_PLAINTEXT"},
            {"KafkaSource", "sasl.username", "identity-1"},
            {"KafkaSource", "sasl.password", "secret"},
        });
        groups.get("KafkaSource").remove(absent);

        assertThatThrownBy(() -> SinkJobConfig.from(groups))
                .isInstanceOf(InvalidPropertyException.class)
                .hasMessage(message);
    }

    @Test
    void refusesSaslPlainCredentialsWithIamAuthentication() {
        assertThatThrownBy(() -> SinkJobConfig.from(groups(new String[][] {{"KafkaSource", "sasl.password", "secret"}})))
                .isInstanceOf(InvalidPropertyException.class)
                .hasMessage("property KafkaSource.sasl.password is set but KafkaSource.security.protocol is SASL_SSL;"
                        + " SASL/PLAIN credentials are used only with SASL_PLAINTEXT (local brokers)");
    }

    @Test
    void failsWhenAGroupIsMissing() {
        Map<String, Properties> groups = groups(new String[0][]);
        groups.remove("Sink");

        assertThatThrownBy(() -> SinkJobConfig.from(groups))
                .hasMessage("property group Sink is missing; groups present: KafkaSource");
    }

    @Test
    void readsTheAwsShapedJsonFile(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("properties.json");
        Files.writeString(file, "[{\"PropertyGroupId\": \"KafkaSource\", \"PropertyMap\": {\"bootstrap.servers\": \"127.0.0.1:9092\","
                + " \"topic\": \"telemetry\", \"group.id\": \"sink\", \"security.protocol\": \"PLAINTEXT\"}},"
                + " {\"PropertyGroupId\": \"Sink\", \"PropertyMap\": {\"output.path\": \"file:///tmp/t\","
                + " \"dead.letter.path\": \"file:///tmp/d\", \"checkpoint.interval.ms\": \"1000\"}}]");

        SinkJobConfig config = SinkJobConfig.from(ApplicationProperties.fromFile(file));

        assertThat(config.topic).isEqualTo("telemetry");
        assertThat(config.securityProtocol).isEqualTo(SecurityProtocol.PLAINTEXT);
        assertThat(config.checkpointIntervalMs).isEqualTo(1000L);
    }

    @Test
    void namesAPropertiesFileThatIsNotValidJson(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("properties.json");
        Files.writeString(file, "{not json");

        assertThatThrownBy(() -> ApplicationProperties.fromFile(file))
                .isInstanceOf(InvalidPropertyException.class)
                .hasMessageStartingWith("properties file " + file + " is not a JSON list");
    }

    @Test
    void namesAPropertiesFileThatDoesNotExist(@TempDir Path dir) {
        Path file = dir.resolve("absent.json");

        assertThatThrownBy(() -> ApplicationProperties.fromFile(file))
                .hasMessage("properties file " + file + " does not exist");
    }

    /** A valid configuration, with overrides as {group, key, value} rows. */
    private static Map<String, Properties> groups(String[][] overrides) {
        Properties kafka = new Properties();
        kafka.setProperty("bootstrap.servers", "b-1.msk:9098,b-2.msk:9098");
        kafka.setProperty("topic", "telemetry");
        kafka.setProperty("group.id", "telemetry-sink");
        Properties sink = new Properties();
        sink.setProperty("output.path", "s3://bucket/telemetry");
        sink.setProperty("dead.letter.path", "s3://bucket/dead-letters");
        Map<String, Properties> groups = new HashMap<>();
        groups.put("KafkaSource", kafka);
        groups.put("Sink", sink);
        for (String[] row : overrides) {
            groups.get(row[0]).setProperty(row[1], row[2]);
        }
        return groups;
    }
}

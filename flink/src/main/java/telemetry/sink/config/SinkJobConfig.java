package telemetry.sink.config;

import java.io.Serializable;
import java.net.URI;
import java.net.URISyntaxException;
import java.time.LocalDate;
import java.time.format.DateTimeParseException;
import java.util.Arrays;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Collectors;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import telemetry.sink.parse.DeviceClock;

/**
 * Everything the job reads from its runtime properties, validated once at start-up so a bad
 * deployment fails before it touches Kafka or S3, with one message naming the property.
 */
public final class SinkJobConfig implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(SinkJobConfig.class);

    public static final String KAFKA_GROUP = "KafkaSource";
    public static final String SINK_GROUP = "Sink";
    static final Set<String> KAFKA_KEYS =
            Set.of("bootstrap.servers", "topic", "group.id", "security.protocol", "starting.offsets",
                    "sasl.username", "sasl.password");
    static final Set<String> SINK_KEYS =
            Set.of("output.path", "dead.letter.path", "smoke.path", "max.part.size.mb", "checkpoint.interval.ms",
                    "earliest.event.date", "max.clock.ahead.seconds");
    /**
     * The run id prefix of the deployment's smoke runs (`telemetry deploy`'s smoke step names its
     * runs smoke-YYYYmmdd-HHMMSS): their records go to smoke.path, never into the table.
     */
    public static final String SMOKE_RUN_PREFIX = "smoke-";
    static final Set<String> PATH_SCHEMES = Set.of("s3", "s3a", "file");

    public static final int DEFAULT_MAX_PART_SIZE_MB = 128;
    static final int MAX_MAX_PART_SIZE_MB = 4096;
    public static final long DEFAULT_LOCAL_CHECKPOINT_INTERVAL_MS = 10_000;
    static final long MIN_CHECKPOINT_INTERVAL_MS = 100;
    /** Without a table start date every reading after the epoch is filed by its device time. */
    public static final LocalDate DEFAULT_EARLIEST_EVENT_DATE = LocalDate.EPOCH;
    public static final long DEFAULT_MAX_CLOCK_AHEAD_SECONDS = 300;
    static final long MAX_MAX_CLOCK_AHEAD_SECONDS = 86_400;

    public final String bootstrapServers;
    public final String topic;
    public final String groupId;
    public final SecurityProtocol securityProtocol;
    /** SASL_PLAINTEXT only (a local broker's SASL/PLAIN user); null otherwise. */
    public final String saslUsername;
    private final String saslPassword;
    public final StartingOffsets startingOffsets;
    public final String outputPath;
    public final String deadLetterPath;
    /**
     * Where records of smoke runs ({@link #SMOKE_RUN_PREFIX}) go, outside output.path; null: no
     * such separation, they are filed with every other record.
     */
    public final String smokePath;
    public final int maxPartSizeMb;
    /** Used only when the job runs locally; Managed Flink configures checkpointing itself. */
    public final long checkpointIntervalMs;
    /** The first day the telemetry table's partition projection enumerates (UTC). */
    public final LocalDate earliestEventDate;
    /** How far a device clock may run ahead of a reading's ingest time and still file it. */
    public final long maxClockAheadSeconds;

    private SinkJobConfig(Map<String, Properties> groups) {
        Properties kafka = group(groups, KAFKA_GROUP);
        Properties sink = group(groups, SINK_GROUP);
        warnAboutUnknownKeys(KAFKA_GROUP, kafka, KAFKA_KEYS);
        warnAboutUnknownKeys(SINK_GROUP, sink, SINK_KEYS);

        bootstrapServers = required(KAFKA_GROUP, kafka, "bootstrap.servers", "HOST:PORT[,HOST:PORT...]");
        for (String server : bootstrapServers.split(",")) {
            if (!server.trim().matches("[^:\\s]+:\\d{1,5}")) {
                throw invalid(KAFKA_GROUP, "bootstrap.servers", bootstrapServers, "HOST:PORT[,HOST:PORT...]");
            }
        }
        topic = required(KAFKA_GROUP, kafka, "topic", "a Kafka topic name");
        if (!topic.matches("[A-Za-z0-9._-]{1,249}")) {
            throw invalid(KAFKA_GROUP, "topic", topic, "a Kafka topic name ([A-Za-z0-9._-], 1-249 characters)");
        }
        groupId = required(KAFKA_GROUP, kafka, "group.id", "a Kafka consumer group id");
        securityProtocol = choice(KAFKA_GROUP, kafka, "security.protocol", SecurityProtocol.SASL_SSL);
        if (securityProtocol == SecurityProtocol.SASL_PLAINTEXT) {
            String allowed = "a SASL/PLAIN user of a local broker (SASL_PLAINTEXT is for local brokers only;"
                    + " on AWS the job signs in with its IAM role over SASL_SSL)";
            saslUsername = required(KAFKA_GROUP, kafka, "sasl.username", allowed);
            saslPassword = required(KAFKA_GROUP, kafka, "sasl.password", "the password of " + allowed);
        } else {
            // A password among Managed Flink's properties would be a mistake, and an ignored one.
            for (String key : new String[] {"sasl.username", "sasl.password"}) {
                if (kafka.getProperty(key) != null) {
                    throw new InvalidPropertyException(
                            "property " + KAFKA_GROUP + "." + key + " is set but " + KAFKA_GROUP
                                    + ".security.protocol is " + securityProtocol
                                    + "; SASL/PLAIN credentials are used only with SASL_PLAINTEXT (local brokers)");
                }
            }
            saslUsername = null;
            saslPassword = null;
        }
        startingOffsets = startingOffsets(kafka);

        outputPath = path(sink, "output.path");
        deadLetterPath = path(sink, "dead.letter.path");
        if (nested(outputPath, deadLetterPath)) {
            throw new InvalidPropertyException(
                    "property Sink.dead.letter.path (" + deadLetterPath + ") and Sink.output.path ("
                            + outputPath + ") must not contain one another: the telemetry table reads"
                            + " everything under output.path");
        }
        String smoke = sink.getProperty("smoke.path");
        smokePath = smoke == null || smoke.isBlank() ? null : path(sink, "smoke.path");
        if (smokePath != null && (nested(outputPath, smokePath) || nested(deadLetterPath, smokePath))) {
            throw new InvalidPropertyException(
                    "property Sink.smoke.path (" + smokePath + ") must not contain or be inside Sink.output.path ("
                            + outputPath + ") or Sink.dead.letter.path (" + deadLetterPath
                            + "): smoke records are kept out of the telemetry table");
        }
        maxPartSizeMb = (int) integer(SINK_GROUP, sink, "max.part.size.mb", DEFAULT_MAX_PART_SIZE_MB,
                1, MAX_MAX_PART_SIZE_MB);
        checkpointIntervalMs = integer(SINK_GROUP, sink, "checkpoint.interval.ms",
                DEFAULT_LOCAL_CHECKPOINT_INTERVAL_MS, MIN_CHECKPOINT_INTERVAL_MS, Long.MAX_VALUE);
        earliestEventDate = date(sink, "earliest.event.date", DEFAULT_EARLIEST_EVENT_DATE);
        maxClockAheadSeconds = integer(SINK_GROUP, sink, "max.clock.ahead.seconds",
                DEFAULT_MAX_CLOCK_AHEAD_SECONDS, 0, MAX_MAX_CLOCK_AHEAD_SECONDS);
    }

    /** Which device clocks the job files readings by (the rest by their ingest time). */
    public DeviceClock deviceClock() {
        return new DeviceClock(earliestEventDate, maxClockAheadSeconds);
    }

    /** Validates the property groups; throws {@link InvalidPropertyException} on the first problem. */
    public static SinkJobConfig from(Map<String, Properties> groups) {
        return new SinkJobConfig(groups);
    }

    public long maxPartSizeBytes() {
        return maxPartSizeMb * 1024L * 1024L;
    }

    /** The Kafka client properties for the configured security protocol. */
    public Properties kafkaClientProperties() {
        Properties properties = new Properties();
        properties.setProperty("security.protocol", securityProtocol.name());
        if (securityProtocol == SecurityProtocol.SASL_SSL) {
            // MSK IAM authentication (aws-msk-iam-auth): the application role's credentials sign in.
            properties.setProperty("sasl.mechanism", "AWS_MSK_IAM");
            properties.setProperty("sasl.jaas.config", "software.amazon.msk.auth.iam.IAMLoginModule required;");
            properties.setProperty(
                    "sasl.client.callback.handler.class",
                    "software.amazon.msk.auth.iam.IAMClientCallbackHandler");
        } else if (securityProtocol == SecurityProtocol.SASL_PLAINTEXT) {
            properties.setProperty("sasl.mechanism", "PLAIN");
            properties.setProperty("sasl.jaas.config",
                    "org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
                            + jaasQuoted(saslUsername) + "\" password=\"" + jaasQuoted(saslPassword) + "\";");
        }
        return properties;
    }

    private static String jaasQuoted(String value) {
        return value.replace("\\", "\\\\").replace("\"", "\\\"");
    }

    private static Properties group(Map<String, Properties> groups, String name) {
        Properties group = groups.get(name);
        if (group == null) {
            throw new InvalidPropertyException(
                    "property group " + name + " is missing; groups present: "
                            + (groups.isEmpty() ? "none" : String.join(", ", groups.keySet())));
        }
        return group;
    }

    private static String required(String group, Properties properties, String key, String allowed) {
        String value = properties.getProperty(key);
        if (value == null || value.isBlank()) {
            throw new InvalidPropertyException(
                    "property " + group + "." + key + " is required but " + (value == null ? "missing" : "empty")
                            + "; expected " + allowed);
        }
        return value.trim();
    }

    private static SecurityProtocol choice(String group, Properties properties, String key, SecurityProtocol fallback) {
        String value = properties.getProperty(key);
        if (value == null || value.isBlank()) {
            return fallback;
        }
        try {
            return SecurityProtocol.valueOf(value.trim().toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw invalid(group, key, value, "one of " + Arrays.stream(SecurityProtocol.values())
                    .map(Enum::name).collect(Collectors.joining(", ")));
        }
    }

    private static StartingOffsets startingOffsets(Properties kafka) {
        String value = kafka.getProperty("starting.offsets");
        if (value == null || value.isBlank()) {
            return StartingOffsets.COMMITTED_EARLIEST;
        }
        for (StartingOffsets option : StartingOffsets.values()) {
            if (option.propertyValue.equalsIgnoreCase(value.trim())) {
                return option;
            }
        }
        throw invalid(KAFKA_GROUP, "starting.offsets", value, "one of " + Arrays.stream(StartingOffsets.values())
                .map(o -> o.propertyValue).collect(Collectors.joining(", ")));
    }

    private static String path(Properties sink, String key) {
        String allowed = "a URI such as s3://bucket/prefix or file:///tmp/telemetry (schemes: s3, s3a, file)";
        String value = required(SINK_GROUP, sink, key, allowed);
        try {
            URI uri = new URI(value);
            String scheme = uri.getScheme();
            if (scheme == null || !PATH_SCHEMES.contains(scheme.toLowerCase(Locale.ROOT))
                    || uri.getPath() == null
                    || (!"file".equalsIgnoreCase(scheme) && (uri.getHost() == null || uri.getHost().isEmpty()))) {
                throw invalid(SINK_GROUP, key, value, allowed);
            }
        } catch (URISyntaxException e) {
            throw invalid(SINK_GROUP, key, value, allowed);
        }
        // One spelling for prefixes: the sink adds the partition directories after a slash.
        return value.endsWith("/") ? value.substring(0, value.length() - 1) : value;
    }

    private static LocalDate date(Properties sink, String key, LocalDate fallback) {
        String value = sink.getProperty(key);
        if (value == null || value.isBlank()) {
            return fallback;
        }
        try {
            return LocalDate.parse(value.trim());
        } catch (DateTimeParseException e) {
            throw invalid(SINK_GROUP, key, value, "a calendar date yyyy-MM-dd (the table's first projected day)");
        }
    }

    private static boolean nested(String a, String b) {
        return a.equals(b) || a.startsWith(b + "/") || b.startsWith(a + "/");
    }

    private static long integer(String group, Properties properties, String key, long fallback, long min, long max) {
        String value = properties.getProperty(key);
        if (value == null || value.isBlank()) {
            return fallback;
        }
        String allowed = max == Long.MAX_VALUE
                ? "an integer >= " + min
                : "an integer from " + min + " to " + max;
        long parsed;
        try {
            parsed = Long.parseLong(value.trim());
        } catch (NumberFormatException e) {
            throw invalid(group, key, value, allowed);
        }
        if (parsed < min || parsed > max) {
            throw invalid(group, key, value, allowed);
        }
        return parsed;
    }

    private static InvalidPropertyException invalid(String group, String key, String value, String allowed) {
        return new InvalidPropertyException(
                "property " + group + "." + key + " is \"" + value + "\"; expected " + allowed);
    }

    private static void warnAboutUnknownKeys(String group, Properties properties, Set<String> known) {
        for (String key : properties.stringPropertyNames()) {
            if (!known.contains(key)) {
                LOG.warn("ignoring unknown property {}.{}; known keys: {}", group, key, String.join(", ", known));
            }
        }
    }

    @Override
    public String toString() {
        return "SinkJobConfig{bootstrap.servers=" + bootstrapServers + ", topic=" + topic + ", group.id=" + groupId
                + ", security.protocol=" + securityProtocol
                + (saslUsername == null ? "" : ", sasl.username=" + saslUsername)
                + ", starting.offsets=" + startingOffsets.propertyValue
                + ", output.path=" + outputPath + ", dead.letter.path=" + deadLetterPath
                + (smokePath == null ? "" : ", smoke.path=" + smokePath)
                + ", max.part.size.mb=" + maxPartSizeMb + ", checkpoint.interval.ms=" + checkpointIntervalMs
                + ", earliest.event.date=" + earliestEventDate + ", max.clock.ahead.seconds=" + maxClockAheadSeconds + "}";
    }
}

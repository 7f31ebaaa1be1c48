package telemetry.sink.config;

/** How the job talks to Kafka: MSK IAM auth on AWS, plain text against a local broker. */
public enum SecurityProtocol {
    SASL_SSL,
    PLAINTEXT
}

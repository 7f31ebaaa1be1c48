package telemetry.sink.config;

/**
 * How the job talks to Kafka: MSK IAM auth on AWS, plain text against a local broker, or
 * SASL/PLAIN against a local broker that enforces ACLs (the tests run the job as an IAM role's
 * stand-in that way). MSK offers no SASL/PLAIN: SASL_PLAINTEXT is for local brokers only.
 */
public enum SecurityProtocol {
    SASL_SSL,
    PLAINTEXT,
    /** Local brokers only: a SASL/PLAIN user, its password sent in the clear. */
    SASL_PLAINTEXT
}

package telemetry.sink.parse;

/** A message that is not a valid telemetry reading; the message is the dead letter's reason. */
public class InvalidTelemetryException extends Exception {
    private static final long serialVersionUID = 1L;

    public InvalidTelemetryException(String reason) {
        // No stack trace: these are expected, possibly at a high rate, and only the reason is kept.
        super(reason, null, false, false);
    }
}

package telemetry.sink.config;

/** A runtime property that is missing or malformed; the message names the group and key. */
public class InvalidPropertyException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public InvalidPropertyException(String message) {
        super(message);
    }

    public InvalidPropertyException(String message, Throwable cause) {
        super(message, cause);
    }
}

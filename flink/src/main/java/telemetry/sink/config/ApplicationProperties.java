package telemetry.sink.config;

import com.amazonaws.services.kinesisanalytics.runtime.KinesisAnalyticsRuntime;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Properties;

/**
 * Where the runtime property groups come from: Managed Flink's application properties on AWS, or
 * a local JSON file in the same shape ({@code [{"PropertyGroupId": ..., "PropertyMap": {...}}]}),
 * read by the same AWS library so the two cannot drift apart.
 */
public final class ApplicationProperties {
    private ApplicationProperties() {}

    /** The property groups Managed Flink hands the application. */
    public static Map<String, Properties> fromManagedFlink() {
        try {
            return KinesisAnalyticsRuntime.getApplicationProperties();
        } catch (IOException e) {
            throw new InvalidPropertyException("cannot read the Managed Flink application properties: " + e.getMessage(), e);
        }
    }

    /** The property groups in a local JSON file. */
    public static Map<String, Properties> fromFile(Path file) {
        if (!Files.isRegularFile(file)) {
            throw new InvalidPropertyException("properties file " + file + " does not exist");
        }
        try {
            return KinesisAnalyticsRuntime.getApplicationProperties(file.toString());
        } catch (IOException | RuntimeException e) {
            throw new InvalidPropertyException(
                    "properties file " + file + " is not a JSON list of {\"PropertyGroupId\", \"PropertyMap\"}"
                            + " objects: " + e.getMessage(), e);
        }
    }
}

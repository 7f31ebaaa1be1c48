package telemetry.sink.testing;

import java.nio.charset.StandardCharsets;
import java.util.Locale;

/**
 * Renders messages the way simulator/payload.py does: fixed-width, space-padded seq and sent_ns,
 * readings left-justified to the widest readings, and a pad field up to a fixed message size.
 */
public final class SimulatorMessages {
    private static final String[] STATUSES = {"ok", "ok", "ok", "ok", "ok", "ok", "degraded", "low_battery"};
    private static final int READINGS_WIDTH = readings(-40.0, 100.0, 100.0, -90.0, -180.0, "low_battery").length();

    private final String runId;
    private final String producerId;
    private final int messageBytes;

    /** producerId is the host part; processes are numbered p00.. as in the simulator. */
    public SimulatorMessages(String runId, String producerId, int messageBytes) {
        this.runId = runId;
        this.producerId = producerId;
        this.messageBytes = messageBytes;
    }

    public String processProducerId(int process) {
        return String.format(Locale.ROOT, "%s/p%02d", producerId, process);
    }

    public String deviceId(int device) {
        return String.format(Locale.ROOT, "%s-d%06d", producerId, device);
    }

    /** One message; readings vary deterministically with seq. */
    public byte[] render(int process, int device, long seq, long sentNs) {
        double temperature = 21.0 + (seq % 50) * 0.13 - 3.0;
        double humidity = 45.0 + (seq % 20) * 0.5;
        double battery = 100.0 - (seq % 100);
        double lat = 47.6 + (device % 100) * 0.001;
        double lon = -122.3 - (device % 100) * 0.001;
        String status = STATUSES[(int) (seq % STATUSES.length)];
        String head = "{\"run_id\":\"" + runId + "\",\"producer_id\":\"" + processProducerId(process)
                + "\",\"device_id\":\"" + deviceId(device) + "\",\"seq\":"
                + String.format(Locale.ROOT, "%10d", seq)
                + ",\"sent_ns\":" + String.format(Locale.ROOT, "%19d", sentNs)
                + ",\"readings\":" + pad(readings(temperature, humidity, battery, lat, lon, status), READINGS_WIDTH)
                + ",\"pad\":\"";
        int padLength = Math.max(0, messageBytes - head.length() - 2);
        return (head + "x".repeat(padLength) + "\"}").getBytes(StandardCharsets.UTF_8);
    }

    static String readings(double temperature, double humidity, double battery, double lat, double lon, String status) {
        return String.format(Locale.ROOT,
                "{\"temperature_c\":%.2f,\"humidity_pct\":%.1f,\"battery_pct\":%.0f,\"location\":{\"lat\":%.5f,\"lon\":%.5f},\"status\":\"%s\"}",
                temperature, humidity, battery, lat, lon, status);
    }

    private static String pad(String text, int width) {
        return text.length() >= width ? text : text + " ".repeat(width - text.length());
    }
}

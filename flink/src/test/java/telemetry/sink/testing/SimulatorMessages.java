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

    /** One message; readings vary deterministically with seq (1,024 pre-rendered variants). */
    public byte[] render(int process, int device, long seq, long sentNs) {
        String head = "{\"run_id\":\"" + runId + "\",\"producer_id\":\"" + processProducerId(process)
                + "\",\"device_id\":\"" + deviceId(device) + "\",\"seq\":" + padLeft(seq, 10)
                + ",\"sent_ns\":" + padLeft(sentNs, 19)
                + ",\"readings\":" + READINGS[(int) (seq & (READINGS.length - 1))]
                + ",\"pad\":\"";
        int padLength = Math.max(0, messageBytes - head.length() - 2);
        return (head + "x".repeat(padLength) + "\"}").getBytes(StandardCharsets.UTF_8);
    }

    private static final String[] READINGS = new String[1024];

    static {
        for (int v = 0; v < READINGS.length; v++) {
            READINGS[v] = pad(readings(21.0 + (v % 50) * 0.13 - 3.0, 45.0 + (v % 20) * 0.5, 100.0 - (v % 100),
                    47.6 + (v % 100) * 0.001, -122.3 - (v % 100) * 0.001, STATUSES[v % STATUSES.length]), READINGS_WIDTH);
        }
    }

    private static String padLeft(long value, int width) {
        String digits = Long.toString(value);
        return digits.length() >= width ? digits : " ".repeat(width - digits.length()) + digits;
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

package telemetry.sink.output;

import java.time.LocalDate;

/** The Hive-style partition a timestamp belongs to: {@code dt=YYYY-MM-DD/hour=HH}, in UTC. */
public final class HourPartition {
    static final long MILLIS_PER_HOUR = 3_600_000L;
    private static final long MILLIS_PER_DAY = 24 * MILLIS_PER_HOUR;

    private HourPartition() {}

    /** The partition path of a time in milliseconds since the epoch. */
    public static String of(long epochMillis) {
        long day = Math.floorDiv(epochMillis, MILLIS_PER_DAY);
        long hour = Math.floorMod(epochMillis, MILLIS_PER_DAY) / MILLIS_PER_HOUR;
        // LocalDate.toString is ISO yyyy-MM-dd for years 0000-9999.
        return "dt=" + LocalDate.ofEpochDay(day) + (hour < 10 ? "/hour=0" : "/hour=") + hour;
    }

    /** The first millisecond of the hour that contains epochMillis. */
    static long hourStart(long epochMillis) {
        return epochMillis - Math.floorMod(epochMillis, MILLIS_PER_HOUR);
    }
}

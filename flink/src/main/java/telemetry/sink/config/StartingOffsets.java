package telemetry.sink.config;

/** Where a job without checkpointed offsets starts reading (restored jobs use their state). */
public enum StartingOffsets {
    /** The consumer group's committed offsets; earliest where the group has none. */
    COMMITTED_EARLIEST("committed-earliest"),
    EARLIEST("earliest"),
    LATEST("latest");

    public final String propertyValue;

    StartingOffsets(String propertyValue) {
        this.propertyValue = propertyValue;
    }
}

package telemetry.sink.testing;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.ParquetReader;
import org.apache.parquet.hadoop.api.ReadSupport;
import org.apache.parquet.hadoop.example.GroupReadSupport;
import org.apache.parquet.io.LocalInputFile;
import org.apache.parquet.schema.MessageType;

/**
 * Reads what the job committed under an output directory. FileSink keeps in-progress and pending
 * parts as hidden files (leading dot), so only visible files are committed output.
 */
public final class SinkOutput {
    private static final ObjectMapper JSON = new ObjectMapper();

    private SinkOutput() {}

    /** A committed row with the partition directory it was found in. */
    public record Row(String partition, String producerId, String deviceId, long seq, long sentNs,
                      long eventTimeMillis, double temperatureC, double humidityPct, double batteryPct,
                      double lat, double lon, String status, String runId, int kafkaPartition, long kafkaOffset,
                      long ingestTimeMillis, long readTimeMillis) {
        public String key() {
            return producerId + "|" + deviceId + "|" + seq;
        }
    }

    public static List<Path> committedFiles(Path root, String suffix) {
        // A running job renames its hidden in-progress parts as it commits them: a walk that meets
        // one gone since the directory was listed (NoSuchFileException, Files.walk's attribute
        // read) looks again, since the walk only lists, and a new listing no longer holds it.
        for (int attempt = 1; ; attempt++) {
            try {
                return walkCommitted(root, suffix);
            } catch (UncheckedIOException e) {
                if (!(e.getCause() instanceof java.nio.file.NoSuchFileException) || attempt >= 20) {
                    throw e;
                }
            }
        }
    }

    private static List<Path> walkCommitted(Path root, String suffix) {
        if (!Files.isDirectory(root)) {
            return List.of();
        }
        try (Stream<Path> files = Files.walk(root)) {
            return files.filter(Files::isRegularFile)
                    .filter(f -> !f.getFileName().toString().startsWith("."))
                    .filter(f -> f.getFileName().toString().endsWith(suffix))
                    .sorted()
                    .toList();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Row count from the footers only: cheap enough to poll. */
    public static long committedRowCount(Path root) {
        long rows = 0;
        for (Path file : committedFiles(root, ".parquet")) {
            try (ParquetFileReader reader = ParquetFileReader.open(new LocalInputFile(file))) {
                rows += reader.getRecordCount();
            } catch (IOException e) {
                throw new UncheckedIOException("reading the footer of " + file, e);
            }
        }
        return rows;
    }

    public static MessageType schema(Path file) throws IOException {
        try (ParquetFileReader reader = ParquetFileReader.open(new LocalInputFile(file))) {
            return reader.getFooter().getFileMetaData().getSchema();
        }
    }

    public static List<Row> readRows(Path root) throws IOException {
        List<Row> rows = new ArrayList<>();
        for (Path file : committedFiles(root, ".parquet")) {
            String partition = root.relativize(file.getParent()).toString();
            try (ParquetReader<Group> reader = new GroupReaderBuilder(file).build()) {
                for (Group g = reader.read(); g != null; g = reader.read()) {
                    rows.add(new Row(partition, g.getString("producer_id", 0), g.getString("device_id", 0),
                            g.getLong("seq", 0), g.getLong("sent_ns", 0), g.getLong("event_time", 0),
                            g.getDouble("temperature_c", 0), g.getDouble("humidity_pct", 0),
                            g.getDouble("battery_pct", 0), g.getDouble("lat", 0), g.getDouble("lon", 0),
                            g.getString("status", 0), g.getString("run_id", 0),
                            g.getInteger("kafka_partition", 0), g.getLong("kafka_offset", 0),
                            g.getLong("ingest_time", 0), g.getLong("read_time", 0)));
                }
            }
        }
        return rows;
    }

    /** Every committed dead letter, with the partition directory it was found in as "partition". */
    public static List<JsonNode> readDeadLetters(Path root) throws IOException {
        List<JsonNode> letters = new ArrayList<>();
        for (Path file : committedFiles(root, ".jsonl")) {
            String partition = root.relativize(file.getParent()).toString();
            for (String line : Files.readAllLines(file)) {
                if (!line.isBlank()) {
                    letters.add(((com.fasterxml.jackson.databind.node.ObjectNode) JSON.readTree(line))
                            .put("partition_dir", partition));
                }
            }
        }
        return letters;
    }

    private static final class GroupReaderBuilder extends ParquetReader.Builder<Group> {
        GroupReaderBuilder(Path file) {
            super(new LocalInputFile(file));
        }

        @Override
        protected ReadSupport<Group> getReadSupport() {
            return new GroupReadSupport();
        }
    }
}

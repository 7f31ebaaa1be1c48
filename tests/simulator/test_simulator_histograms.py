import numpy as np
import pytest

from simulator import histograms


@pytest.fixture
def latencies_us():
    rng = np.random.default_rng(42)
    return np.concatenate(
        [
            rng.integers(0, 3000, 20_000),
            rng.lognormal(7, 2, 20_000).astype(np.int64),
            np.array([0, 1, 2047, 2048, 2049, histograms.HIGHEST_US]),
        ]
    )


def one_by_one(values):
    histogram = histograms.new_histogram()
    for value in values.tolist():
        histogram.record_value(min(value, histograms.HIGHEST_US))
    return histogram


def test_bulk_recording_equals_recording_value_by_value(latencies_us):
    bulk = histograms.new_histogram()
    histograms.record_microseconds(bulk, latencies_us)
    reference = one_by_one(latencies_us)
    assert list(bulk.counts) == list(reference.counts)
    assert histograms.summary_ms(bulk) == histograms.summary_ms(reference)


def test_percentiles_equal_the_librarys_own(latencies_us):
    histogram = one_by_one(latencies_us)
    levels = [0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0]
    assert histograms.values_at_percentiles(histogram, levels) == [
        histogram.get_value_at_percentile(level) for level in levels
    ]


def test_bulk_recording_keeps_total_min_and_max_like_record_value(latencies_us):
    bulk = histograms.new_histogram()
    histograms.record_microseconds(bulk, latencies_us[:1000])
    histograms.record_microseconds(bulk, latencies_us[1000:])
    reference = one_by_one(latencies_us)
    assert bulk.get_total_count() == reference.get_total_count()
    assert (bulk.get_min_value(), bulk.get_max_value()) == (
        reference.get_min_value(),
        reference.get_max_value(),
    )
    assert histograms.encode(bulk) == histograms.encode(reference)


def test_weights_count_each_value_that_many_times():
    weighted = histograms.new_histogram()
    histograms.record_microseconds(weighted, np.array([5, 5000, 70, 9]), np.array([3, 1, 2, 0]))
    reference = one_by_one(np.array([5, 5, 5, 5000, 70, 70]))
    assert list(weighted.counts) == list(reference.counts)
    assert weighted.get_total_count() == 6 and weighted.get_min_value() == 5


def test_values_over_a_minute_are_clamped_and_counted_never_dropped():
    histogram = histograms.new_histogram()
    clamped = histograms.record_microseconds(histogram, np.array([10, 90_000_000, -5]))
    assert clamped == 1
    assert histogram.get_total_count() == 3


def test_merging_encoded_parts_equals_one_histogram_of_all_values(latencies_us):
    parts = np.array_split(latencies_us, 4)
    encoded = []
    for part in parts:
        histogram = histograms.new_histogram()
        histograms.record_microseconds(histogram, part)
        encoded.append(histograms.encode(histogram))
    merged = histograms.merge(encoded)
    assert list(merged.counts) == list(one_by_one(latencies_us).counts)
    assert histograms.summary_ms(merged) == histograms.summary_ms(one_by_one(latencies_us))


def test_merged_percentiles_are_not_averages_of_the_parts():
    fast, slow = histograms.new_histogram(), histograms.new_histogram()
    histograms.record_microseconds(fast, np.full(990, 1000))  # 1 ms
    histograms.record_microseconds(slow, np.full(10, 500_000))  # 500 ms
    merged = histograms.summary_ms(
        histograms.merge([histograms.encode(fast), histograms.encode(slow)])
    )
    assert merged["p99"] == pytest.approx(1.0, rel=1e-3)
    assert merged["p999"] == pytest.approx(500.0, rel=1e-3)
    assert merged["min"] == pytest.approx(1.0, rel=1e-3)
    assert merged["count"] == 1000


def test_recorder_takes_nanoseconds_or_seconds_and_can_start_over():
    nanos = histograms.LatencyRecorder("q", scale_to_us=1e-3)
    append = nanos.pending.append
    for value in (1_000_000, 2_000_000):
        append(value)
    nanos.flush()
    append(3_000_000)  # the bound append still feeds the recorder after a flush
    nanos.flush()
    assert histograms.summary_ms(nanos.histogram)["max"] == pytest.approx(3.0, rel=1e-3)
    assert nanos.observed == 3
    nanos.start_over()
    assert nanos.histogram.get_total_count() == 0 and nanos.observed == 3

    seconds = histograms.LatencyRecorder("d", scale_to_us=1e6)
    seconds.pending.append(0.004)
    seconds.flush()
    assert histograms.summary_ms(seconds.histogram)["p50"] == pytest.approx(4.0, rel=1e-3)


def test_an_empty_histogram_summarises_to_none():
    summary = histograms.summary_ms(histograms.new_histogram())
    assert summary["count"] == 0 and summary["p99"] is None and summary["max"] is None


def test_publish_delays_are_each_message_s_own_from_its_intended_time():
    from simulator.schedule import SendSchedule

    # Process 1 of 2 at 1,000 msg/s for the host: its i-th message is intended at
    # start + (2i + 1) ms.
    schedule = SendSchedule(rate=1000, processes=2, process_index=1, start_ns=10**12,
                            warmup_s=0, duration_s=1)
    delays = histograms.PublishDelays(schedule)
    # A burst of three sent 5.5 ms after start: messages 0, 1, 2 were due at 1, 3 and 5 ms.
    delays.burst(10**12 + 5_500_000, 0, 3)
    # One message sent exactly on time, then one sent before it was due (recorded as 0).
    delays.burst(schedule.intended_ns(3), 3, 1)
    delays.burst(schedule.intended_ns(4) - 1000, 4, 1)
    delays.flush()
    assert delays.histogram.get_total_count() == 5
    expected_us = [4500, 2500, 500, 0, 0]
    assert histograms.summary_ms(delays.histogram)["max"] == pytest.approx(4.5, rel=1e-3)
    assert histograms.encode(delays.histogram) == histograms.encode(one_by_one(np.array(expected_us)))
    assert not delays.counts  # flushed bursts are forgotten

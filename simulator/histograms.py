"""Latency histograms in microseconds: recorded in bulk, encoded for reports, merged, never averaged.

Hot loops append raw nanosecond (or second) values to an array; `flush()` adds a batch to the
HdrHistogram's counters with numpy, so recording costs an array append per message instead of a
Python-level record_value call, and reading percentiles never stalls the consumer.
"""

from __future__ import annotations

import array

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 60_000_000  # one minute; slower values are clamped (and counted), never dropped
SIGNIFICANT_FIGURES = 3
REPORTED_PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9, "p9999": 99.99}


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)


def _counts_indices(histogram: HdrHistogram, values: np.ndarray) -> np.ndarray:
    """HdrHistogram's own bucket arithmetic (_counts_index_for), for many values at once."""
    masked = (values | histogram.sub_bucket_mask).astype(np.float64)
    bit_length = np.frexp(masked)[1].astype(np.int64)  # exact below 2**53
    bucket = bit_length - histogram.unit_magnitude - (histogram.sub_bucket_half_count_magnitude + 1)
    sub_bucket = values >> (bucket + histogram.unit_magnitude)
    return (
        ((bucket + 1) << histogram.sub_bucket_half_count_magnitude)
        + sub_bucket
        - histogram.sub_bucket_half_count
    )


def record_microseconds(
    histogram: HdrHistogram, values_us: np.ndarray, weights: np.ndarray | None = None
) -> int:
    """Record many values (with optional per-value counts) exactly as record_value would, in
    one numpy pass; returns how many were clamped to HIGHEST_US."""
    values = np.asarray(values_us, dtype=np.int64)
    if weights is not None:
        weights = np.asarray(weights, dtype=np.int64)
        values, weights = values[weights > 0], weights[weights > 0]
    if values.size == 0:
        return 0
    clamped = int(np.count_nonzero(values > HIGHEST_US))
    values = np.clip(values, 0, HIGHEST_US)
    counts = np.ctypeslib.as_array(histogram.counts)  # the histogram's own counters, in place
    counts += np.bincount(
        _counts_indices(histogram, values),
        minlength=counts.size,
        weights=None if weights is None else weights.astype(np.float64),
    ).astype(np.uint64)
    histogram.total_count += int(values.size if weights is None else weights.sum())
    histogram.min_value = min(histogram.min_value, int(values.min()))
    histogram.max_value = max(histogram.max_value, int(values.max()))
    return clamped


def values_at_percentiles(histogram: HdrHistogram, percentiles: list[float]) -> list[int]:
    """get_value_at_percentile for several percentiles from one cumulative sum (the library's
    own loop walks every bucket in Python: milliseconds that would stall the consumer)."""
    cumulative = np.cumsum(np.ctypeslib.as_array(histogram.counts))
    results = []
    for percentile in percentiles:
        target = histogram.get_target_count_at_percentile(percentile)
        value = histogram.get_value_from_index(int(np.searchsorted(cumulative, target)))
        results.append(
            histogram.get_highest_equivalent_value(value)
            if percentile
            else histogram.get_lowest_equivalent_value(value)
        )
    return results


class LatencyRecorder:
    """Collects latencies cheaply in a hot loop and records them into one histogram.

    Hot loops may bind `recorder.pending.append` once: the array is emptied in place, never
    replaced.
    """

    def __init__(self, typecode: str = "q", scale_to_us: float = 1e-3):
        # typecode "q" holds nanoseconds (scale 1e-3); "d" holds seconds (scale 1e6).
        self.histogram = new_histogram()
        self.pending = array.array(typecode)
        self.clamped = 0
        self.settled = 0  # values recorded or discarded so far
        self._dtype = np.int64 if typecode == "q" else np.float64
        self._scale = scale_to_us

    @property
    def observed(self) -> int:
        return self.settled + len(self.pending)

    def flush(self) -> None:
        if not self.pending:
            return
        raw = np.frombuffer(self.pending.tobytes(), dtype=self._dtype)
        self.settled += len(self.pending)
        del self.pending[:]
        self.clamped += record_microseconds(self.histogram, (raw * self._scale).astype(np.int64))

    def start_over(self) -> None:
        """Forget what was recorded so far (the warmup); keep counting what was observed."""
        self.settled += len(self.pending)
        del self.pending[:]
        self.histogram = new_histogram()
        self.clamped = 0


class PublishDelays:
    """Publish delay: from a message's intended send time to the moment the send loop had handed
    it to the client (the instrument's own share of every end-to-end figure, as the OpenMessaging
    Benchmark reports it).

    The loop sends what is due in bursts; it records one (time, first index, count) per burst and
    every message's own delay is computed from the schedule later, with numpy, so the hot loop
    pays three array appends per burst, not a histogram update per message.
    """

    def __init__(self, schedule):
        self.schedule = schedule
        self.histogram = new_histogram()
        self.times, self.firsts, self.counts = array.array("q"), array.array("q"), array.array("q")

    def burst(self, sent_ns: int, first: int, count: int) -> None:
        self.times.append(sent_ns)
        self.firsts.append(first)
        self.counts.append(count)

    def flush(self) -> None:
        if not self.counts:
            return
        counts = np.frombuffer(self.counts.tobytes(), dtype=np.int64)
        starts = np.cumsum(counts) - counts
        offsets = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)
        indices = np.repeat(np.frombuffer(self.firsts.tobytes(), dtype=np.int64), counts) + offsets
        schedule = self.schedule
        # schedule.intended_ns(i), for every index at once (the same float arithmetic).
        intended = schedule.start_ns + (
            (indices * schedule.processes + schedule.process_index) * schedule.ns_per_message
        ).astype(np.int64)
        sent = np.repeat(np.frombuffer(self.times.tobytes(), dtype=np.int64), counts)
        record_microseconds(self.histogram, np.maximum(sent - intended, 0) // 1000)
        for values in (self.times, self.firsts, self.counts):
            del values[:]


def encode(histogram: HdrHistogram) -> str:
    return histogram.encode().decode("ascii")


def merge(encoded_histograms: list[str]) -> HdrHistogram:
    merged = new_histogram()
    for encoded in encoded_histograms:
        merged.add(HdrHistogram.decode(encoded.encode("ascii")))
    return merged


def summary_ms(histogram: HdrHistogram) -> dict:
    """Count and percentiles in milliseconds; percentiles are None when nothing was recorded."""
    count = histogram.get_total_count()
    if count == 0:
        return {
            "count": 0,
            "min": None,
            **{name: None for name in REPORTED_PERCENTILES},
            "max": None,
        }
    # Percentile 0 gives the minimum; get_min_value() reads 0 after add() into an empty one.
    minimum, *values = values_at_percentiles(histogram, [0.0, *REPORTED_PERCENTILES.values()])
    result = {"count": count, "min": minimum / 1000.0}
    result.update({name: value / 1000.0 for name, value in zip(REPORTED_PERCENTILES, values)})
    result["max"] = histogram.get_max_value() / 1000.0
    return result

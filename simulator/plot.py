"""A percentile-distribution plot of a report's latency histograms (PNG, no display needed)."""

from __future__ import annotations

from pathlib import Path

from simulator import histograms

TICKS_PER_HALF_DISTANCE = 5
CURVES = (("e2e", "end-to-end"), ("ack", "ack"), ("publish_delay", "publish delay"))


def _percentile_curve(encoded: str) -> tuple[list[float], list[float]]:
    """x = 1 / (1 - percentile), so 90%, 99%, 99.9% ... are evenly spaced on a log axis."""
    histogram = histograms.merge([encoded])
    xs, ys = [], []
    for item in histogram.get_percentile_iterator(TICKS_PER_HALF_DISTANCE):
        fraction = item.percentile_level_iterated_to / 100.0
        if fraction >= 1.0:
            break
        xs.append(1.0 / (1.0 - fraction))
        ys.append(item.value_iterated_to / 1000.0)
    return xs, ys


def write_percentile_plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 5), dpi=110)
    for name, label in CURVES:
        encoded = report["histograms"].get(name)
        if encoded:
            xs, ys = _percentile_curve(encoded)
            axes.plot(xs, ys, label=label, linewidth=1.6)
    thresholds = report["slo"]["thresholds"]
    axes.axhline(
        thresholds["max_p99_ms"],
        color="tab:gray",
        linestyle="--",
        linewidth=1,
        label=f"SLO p99 {thresholds['max_p99_ms']:g} ms",
    )
    axes.axhline(
        thresholds["max_latency_ms"],
        color="tab:red",
        linestyle=":",
        linewidth=1,
        label=f"SLO max {thresholds['max_latency_ms']:g} ms",
    )
    axes.set_xscale("log")
    ticks = [1, 2, 10, 100, 1000, 10_000, 100_000]
    axes.set_xticks(ticks, ["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%"])
    axes.set_xlim(1, 100_000)
    axes.set_yscale("log")
    axes.set_xlabel("percentile")
    axes.set_ylabel("latency (ms)")
    rate = report["config"]["rate"]
    axes.set_title(
        f"Latency by percentile, run {report['run_id']}: "
        f"{report['throughput_msgs_per_s']:,.0f} msg/s measured"
        + ("" if rate == 0 else f" ({rate:,.0f} msg/s intended)")
    )
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="upper left")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)

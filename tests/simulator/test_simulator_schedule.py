import itertools

import pytest

from simulator.schedule import NS_PER_S, SendSchedule


def schedules(rate=1000.0, processes=3, warmup_s=1.0, duration_s=2.0, start_ns=10**18):
    return [
        SendSchedule(
            rate=rate,
            processes=processes,
            process_index=k,
            start_ns=start_ns,
            warmup_s=warmup_s,
            duration_s=duration_s,
        )
        for k in range(processes)
    ]


def test_processes_interleave_into_one_evenly_spaced_host_schedule():
    all_times = sorted(s.intended_ns(i) for s in schedules() for i in range(s.messages))
    assert len(all_times) == 3000
    gaps = {b - a for a, b in itertools.pairwise(all_times)}
    assert gaps <= {NS_PER_S // 1000, NS_PER_S // 1000 + 1, NS_PER_S // 1000 - 1}
    assert all_times[0] == 10**18
    assert all_times[-1] < 10**18 + 3 * NS_PER_S


@pytest.mark.parametrize("rate,processes", [(5000, 2), (333.3, 4), (7, 3), (1, 2)])
def test_process_shares_add_up_to_the_host_total(rate, processes):
    shares = schedules(rate=rate, processes=processes)
    assert sum(s.messages for s in shares) == shares[0].host_messages == round(rate * 3)


def test_warmup_messages_are_the_first_of_the_host_schedule():
    for s in schedules():
        first = s.first_measured
        assert s.intended_ns(first) >= s.measure_start_ns
        if first > 0:
            assert s.intended_ns(first - 1) < s.measure_start_ns
    assert sum(s.first_measured for s in schedules()) == 1000


def test_due_counts_the_messages_whose_intended_time_has_come():
    s = schedules()[1]
    assert s.due(s.start_ns - 1) == 0
    for i in (0, 1, 10, 999):
        assert s.due(s.intended_ns(i) + 1) == i + 1
        assert s.due(s.intended_ns(i) - 1) == i
    assert s.due(s.start_ns + 100 * NS_PER_S) == s.messages

"""Which partition each device writes to, and the runs a burst of messages splits into."""
from collections import Counter

import pytest

from simulator.accounting import devices_of_process
from simulator.producer import partition_runs, partitions_of_devices


@pytest.mark.parametrize(
    "devices,processes,own",
    [(1000, 1, (0, 1, 2, 3, 4, 5)), (6, 2, (0, 1, 2, 3, 4, 5)), (100, 3, (1, 4, 7)), (7, 2, (2, 5))],
)
def test_every_own_partition_gets_a_balanced_block_of_devices(devices, processes, own):
    by_device = {}
    for k in range(processes):
        mine = devices_of_process(devices, processes, k)
        partitions = partitions_of_devices(mine, devices, own)
        by_device.update(zip(mine, partitions))
        # Taken in the order the process sends, its devices only ever step forward.
        assert partitions == sorted(partitions, key=own.index)
    assert sorted(by_device) == list(range(devices))
    per_partition = Counter(by_device.values())
    assert set(per_partition) == set(own)
    assert max(per_partition.values()) - min(per_partition.values()) <= 1


def test_without_own_partitions_the_partitioner_picks_by_key():
    assert partitions_of_devices([0, 1, 2], 3, None) == [-1, -1, -1]


@pytest.mark.parametrize(
    "partitions", [[0, 0, 1, 1, 1, 2], [5], [-1, -1, -1], [0, 3, 3, 0], [2, 2, 2, 4]]
)
def test_each_position_knows_where_its_run_ends(partitions):
    ends = partition_runs(partitions)
    for j, end in enumerate(ends):
        assert all(p == partitions[j] for p in partitions[j:end])
        assert end == len(partitions) or partitions[end] != partitions[j]

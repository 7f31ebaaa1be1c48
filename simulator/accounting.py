"""Message accounting from sequence numbers: received, duplicates, out of order, lost.

Devices are dealt to producer processes round robin (device d belongs to process d % n), and a
process cycles through its devices, so its i-th message is (local device i % devices_k,
seq i // devices_k). The reverse mapping turns every received (device, seq) into one slot of a
per-process byte array: memory is one byte per message and one int per device, and merging the
processes is exact because no two processes share a device.
"""

from __future__ import annotations

import array
import dataclasses


def devices_of_process(devices: int, processes: int, process_index: int) -> list[int]:
    return list(range(process_index, devices, processes))


@dataclasses.dataclass(frozen=True)
class DeliveryOutcome:
    """What one producer process learned from its delivery reports."""

    sent: int
    acked: int
    failed_indices: tuple[int, ...]  # message indices whose delivery failed (never acked)


@dataclasses.dataclass(frozen=True)
class Accounting:
    sent: int
    acked: int
    delivery_errors: int
    received: int
    lost: int
    duplicates: int
    out_of_order: int


class SequenceLedger:
    """What the host's consumer received of its own producers' messages."""

    def __init__(self, devices: int, processes: int, expected_per_process: list[int] | None = None):
        self.processes = processes
        self.devices_per_process = [
            len(devices_of_process(devices, processes, k)) for k in range(processes)
        ]
        sizes = expected_per_process or [0] * processes
        self.copies = [bytearray(size) for size in sizes]  # copies received, saturating at 255
        self.highest_seq = array.array("q", [-1]) * devices
        self.received = 0
        self.duplicates = 0
        self.out_of_order = 0

    def message_index(self, device: int, seq: int) -> tuple[int, int]:
        """(process, index within that process) of a device's seq-th message."""
        process = device % self.processes
        return process, seq * self.devices_per_process[process] + device // self.processes

    def record(self, device: int, seq: int) -> bool:
        """Count one received message; True when it is the first copy."""
        process, index = self.message_index(device, seq)
        copies = self.copies[process]
        if index >= len(copies):
            copies.extend(bytes(max(index + 1 - len(copies), len(copies))))
        seen = copies[index]
        if seen:
            self.duplicates += 1
            if seen < 255:
                copies[index] = seen + 1
            return False
        copies[index] = 1
        self.received += 1
        if seq < self.highest_seq[device]:
            self.out_of_order += 1
        else:
            self.highest_seq[device] = seq
        return True

    def account(self, outcomes: list[DeliveryOutcome]) -> Accounting:
        """Lost = acked by the broker but never received; a failed delivery is not a loss."""
        lost = 0
        for process, outcome in enumerate(outcomes):
            copies = self.copies[process]
            if len(copies) < outcome.sent:
                copies.extend(bytes(outcome.sent - len(copies)))
            missing = copies.count(0, 0, outcome.sent)
            failed_and_missing = sum(
                1
                for index in set(outcome.failed_indices)
                if index < outcome.sent and copies[index] == 0
            )
            lost += missing - failed_and_missing
        return Accounting(
            sent=sum(o.sent for o in outcomes),
            acked=sum(o.acked for o in outcomes),
            delivery_errors=sum(len(o.failed_indices) for o in outcomes),
            received=self.received,
            lost=lost,
            duplicates=self.duplicates,
            out_of_order=self.out_of_order,
        )

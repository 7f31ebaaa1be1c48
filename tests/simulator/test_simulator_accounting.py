from simulator.accounting import DeliveryOutcome, SequenceLedger, devices_of_process


def messages_of(process, devices, processes, count):
    """(device, seq) of a producer process's first `count` messages, in send order."""
    own = devices_of_process(devices, processes, process)
    return [(own[i % len(own)], i // len(own)) for i in range(count)]


def all_acked(sent):
    return DeliveryOutcome(sent=sent, acked=sent, failed_indices=())


def test_a_complete_in_order_stream_has_nothing_lost_duplicated_or_out_of_order():
    ledger = SequenceLedger(devices=10, processes=2, expected_per_process=[100, 100])
    for process in (0, 1):
        for device, seq in messages_of(process, 10, 2, 100):
            assert ledger.record(device, seq)
    accounting = ledger.account([all_acked(100), all_acked(100)])
    assert (accounting.sent, accounting.acked, accounting.received) == (200, 200, 200)
    assert (accounting.lost, accounting.duplicates, accounting.out_of_order) == (0, 0, 0)


def test_acked_messages_never_received_are_lost():
    ledger = SequenceLedger(devices=4, processes=1, expected_per_process=[40])
    stream = messages_of(0, 4, 1, 40)
    for device, seq in stream[:10] + stream[13:]:
        ledger.record(device, seq)
    accounting = ledger.account([all_acked(40)])
    assert accounting.received == 37
    assert accounting.lost == 3


def test_a_failed_delivery_is_an_error_not_a_loss():
    ledger = SequenceLedger(devices=4, processes=1, expected_per_process=[20])
    stream = messages_of(0, 4, 1, 20)
    for device, seq in stream:
        if (device, seq) not in {stream[5], stream[6]}:
            ledger.record(device, seq)
    # message 5 failed and never arrived; message 6 was acked and never arrived
    accounting = ledger.account([DeliveryOutcome(sent=20, acked=19, failed_indices=(5,))])
    assert accounting.delivery_errors == 1
    assert accounting.lost == 1


def test_a_failed_delivery_that_arrived_anyway_is_received_not_lost():
    ledger = SequenceLedger(devices=2, processes=1, expected_per_process=[10])
    for device, seq in messages_of(0, 2, 1, 10):
        ledger.record(device, seq)
    accounting = ledger.account([DeliveryOutcome(sent=10, acked=9, failed_indices=(3,))])
    assert (accounting.received, accounting.lost, accounting.delivery_errors) == (10, 0, 1)


def test_duplicates_are_counted_once_per_extra_copy_and_not_as_received():
    ledger = SequenceLedger(devices=3, processes=1, expected_per_process=[30])
    stream = messages_of(0, 3, 1, 30)
    for device, seq in stream + stream[:5] + stream[:2]:
        ledger.record(device, seq)
    accounting = ledger.account([all_acked(30)])
    assert (accounting.received, accounting.duplicates, accounting.lost) == (30, 7, 0)
    assert accounting.out_of_order == 0


def test_a_lower_seq_after_a_higher_one_of_the_same_device_is_out_of_order():
    ledger = SequenceLedger(devices=2, processes=1, expected_per_process=[20])
    for seq in (0, 1, 3, 2, 4, 6, 5):  # device 0: 2 and 5 arrive late
        ledger.record(0, seq)
    for seq in range(7):  # device 1: in order
        ledger.record(1, seq)
    accounting = ledger.account([DeliveryOutcome(sent=14, acked=14, failed_indices=())])
    assert accounting.out_of_order == 2
    assert accounting.lost == 0


def test_processes_never_share_a_slot_so_merged_accounting_is_exact():
    devices, processes = 7, 3
    ledger = SequenceLedger(devices=devices, processes=processes)
    slots = set()
    for process in range(processes):
        for device, seq in messages_of(process, devices, processes, 50):
            slots.add(ledger.message_index(device, seq))
    assert slots == {(p, i) for p in range(processes) for i in range(50)}


def test_arrays_grow_when_the_message_count_is_not_known_in_advance():
    ledger = SequenceLedger(devices=5, processes=1)  # --rate 0: no planned count
    stream = messages_of(0, 5, 1, 10_000)
    for device, seq in stream[:-1]:
        ledger.record(device, seq)
    accounting = ledger.account([all_acked(10_000)])
    assert (accounting.received, accounting.lost) == (9_999, 1)

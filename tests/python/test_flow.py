"""ferry.flow from Python across real processes: zero-copy loans, counted
copies of foreign batches, ordering, timeouts and a publisher that goes away."""

import json
import os
import subprocess
import sys
import threading
import uuid

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import ferry
from ferry.flow import Publisher, Subscriber

PEER = os.path.join(os.path.dirname(__file__), "flow_peer.py")


def channel():
    return "test-" + uuid.uuid4().hex[:12]


def start_peer(publisher, name, count, timeout=10.0):
    """Starts a subscriber process; the publisher accepts it (a publisher
    accepts subscribers inside its calls: send, poll, wait_for_subscribers)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    peer = subprocess.Popen([sys.executable, PEER, name, str(count), str(timeout)],
                            stdout=subprocess.PIPE, text=True, env=env)
    publisher.wait_for_subscribers(1, timeout=20)
    assert json.loads(peer.stdout.readline()) == {"connected": True}
    return peer


def lines(peer):
    out, _ = peer.communicate(timeout=30)
    assert peer.returncode == 0
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_loaned_payload_arrives_in_shared_memory_without_a_copy():
    name = channel()
    ferry.reset_telemetry()
    with Publisher(name) as publisher:
        peer = start_peer(publisher, name, 1)
        loan = publisher.loan(4096, "uint8")
        np.asarray(loan)[:] = np.arange(4096) % 251
        publisher.send_loans({"payload": loan}, metadata={"frame": 7})
        (got,) = lines(peer)
        stats = publisher.stats()
    assert got["values"] == list(range(8))
    assert got["metadata"] == {"frame": 7}  # typed, as a node's metadata is
    assert got["copied"] == 0                       # the subscriber copied nothing
    assert got["region"]["path"].startswith("/memfd:")
    assert got["region"]["perms"].startswith("r-")  # mapped read-only
    assert stats["bytes_copied"] == 0
    assert ferry.telemetry()["bytes_copied_host"] == 0


def test_foreign_batches_are_copied_once_and_counted():
    name = channel()
    batch = pa.record_batch({"x": pa.array(range(100), pa.int64())})
    frame = pl.DataFrame({"y": [1.5, 2.5]})
    with Publisher(name) as publisher:
        peer = start_peer(publisher, name, 2)
        ferry.reset_telemetry()
        publisher.send(batch)
        publisher.send(frame.to_arrow().to_batches()[0])
        first, second = lines(peer)
        copied = publisher.stats()["bytes_copied"]
    assert first["values"] == list(range(8)) and first["rows"] == 100
    assert second["columns"] == ["y"] and second["values"] == [1.5, 2.5]
    assert copied == 100 * 8 + 2 * 8
    assert ferry.telemetry()["bytes_copied_host"] == copied


def test_messages_arrive_in_order():
    name = channel()
    with Publisher(name, queue_capacity=4) as publisher:
        peer = start_peer(publisher, name, 50)
        for index in range(50):
            loan = publisher.loan(1, "int64")
            np.asarray(loan)[0] = index
            publisher.send_loans({"i": loan})
        got = lines(peer)
    assert [g["values"][0] for g in got] == list(range(50))
    assert [g["sequence"] for g in got] == list(range(1, 51))


def test_publisher_gone_ends_the_stream():
    name = channel()
    publisher = Publisher(name)
    peer = start_peer(publisher, name, 3)
    publisher.send(pa.record_batch({"a": [1]}))
    publisher.close()
    got = lines(peer)
    assert got[0]["values"] == [1]
    assert "eof" in got[1]


def test_receive_times_out():
    name = channel()
    with Publisher(name) as publisher:
        accept = threading.Thread(target=publisher.wait_for_subscribers, args=(1, 10.0))
        accept.start()
        subscriber = Subscriber(name)
        accept.join()
        with subscriber:
            with pytest.raises(TimeoutError):
                subscriber.receive(timeout=0.05)
            assert subscriber.try_receive() is None


def test_bad_arguments():
    with pytest.raises(ValueError):
        Publisher(channel(), overflow="sometimes")
    with Publisher(channel()) as publisher:
        with pytest.raises(ValueError):
            publisher.loan(10, "utf8")
        with pytest.raises(ValueError):
            publisher.loan(-1)
        with pytest.raises(TypeError):
            publisher.send(42)
    with pytest.raises(Exception):
        Subscriber("no-such-channel-" + uuid.uuid4().hex, connect_timeout=0.05)


def connect_here(publisher, name, count, **options):
    """Connects a Subscriber in this process while a thread lets the
    publisher accept it."""
    accept = threading.Thread(target=publisher.wait_for_subscribers, args=(count, 10.0))
    accept.start()
    try:
        return Subscriber(name, **options)
    finally:
        accept.join()


def drain(subscriber):
    sequences = []
    while (message := subscriber.try_receive()) is not None:
        sequences.append(message.sequence)
    return sequences


def test_each_subscriber_chooses_its_queue():
    name = channel()
    with Publisher(name, queue_capacity=16, overflow="block") as publisher:
        oldest = connect_here(publisher, name, 1, queue_capacity=2, overflow="drop_oldest")
        newest = connect_here(publisher, name, 2, queue_capacity=3, overflow="drop_newest")
        default = connect_here(publisher, name, 3)
        for index in range(6):
            publisher.send(pa.record_batch({"i": [index]}))
        stats = publisher.stats()
        assert drain(oldest) == [5, 6]
        assert drain(newest) == [1, 2, 3]
        assert drain(default) == [1, 2, 3, 4, 5, 6]
    assert stats["dropped_oldest"] == 4
    assert stats["dropped_newest"] == 3
    assert stats["delivered"] == 6 + 3 + 6


def test_bad_queue_options():
    with pytest.raises(ValueError, match="unknown overflow policy"):
        Subscriber(channel(), overflow="sometimes", connect_timeout=0.05)
    with pytest.raises(ValueError, match="queue_capacity"):
        Subscriber(channel(), queue_capacity=1 << 21, connect_timeout=0.05)
    with pytest.raises(TypeError):
        Subscriber(channel(), queue_capacity=-1, connect_timeout=0.05)
    with pytest.raises(TypeError):
        Subscriber(channel(), overflow=1, connect_timeout=0.05)


def test_publisher_fileno_drives_an_event_loop():
    import selectors

    name = channel()
    with Publisher(name) as publisher:
        selector = selectors.DefaultSelector()
        selector.register(publisher, selectors.EVENT_READ)
        assert selector.select(timeout=0) == []
        connected = []
        connector = threading.Thread(target=lambda: connected.append(Subscriber(name)))
        connector.start()
        for _ in range(200):  # bounded: at most ~20 s
            if publisher.stats()["subscribers"] == 1:
                break
            if selector.select(timeout=0.1):
                publisher.poll()
        connector.join(timeout=10)
        assert publisher.stats()["subscribers"] == 1
        assert selector.select(timeout=0) == []
        (subscriber,) = connected
        publisher.send(pa.record_batch({"x": [1, 2]}))
        message = subscriber.receive(timeout=5)
        del message  # returns the drop token: the fd wakes, poll reclaims
        assert selector.select(timeout=5)
        publisher.poll()
        assert publisher.stats()["memory_in_use"] == 0
        subscriber.close()
        selector.close()

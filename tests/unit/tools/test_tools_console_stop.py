"""The console consumer's stop signal: a record that reached stdout is counted and committed.

SIGTERM arriving between the write of a record and its bookkeeping once made the tool report
"Processed a total of 0 messages" for a record it had printed (seen with an unbuffered stdout).
"""

import os
import signal
import threading

import pytest
from kafka import TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from tools.console import FORMATTER_PROPERTIES, RecordFormatter, parse_properties
from tools.console_consumer import _Session, _Stop

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signal handlers are installed in the main thread only")


@pytest.fixture
def stop():
    """A console-consumer stop signal with its handlers installed, put back after the test."""
    installed = _Stop()
    installed.install()
    yield installed
    installed.restore()


def test_a_signal_while_held_is_kept_until_the_block_ends(stop):
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with stop.held():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("after the signal")
    assert steps == ["after the signal"]
    stop.restore()
    assert signal.getsignal(signal.SIGTERM) != stop._on_signal


def test_a_second_signal_while_held_raises_at_once(stop):
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with stop.held():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("first kept")
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("not reached")
    assert steps == ["first kept"]


def test_outside_held_a_signal_raises_at_once(stop):
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the signal did not interrupt")


class _OneRecordConsumer:
    """Just enough of a KafkaConsumer for _Session.run: one record, then nothing."""

    def __init__(self, tp, record):
        self.batches = [{tp: [record]}]
        self.tp = tp

    def poll(self, timeout_ms, max_records):
        return self.batches.pop(0) if self.batches else {}

    def assignment(self):
        return {self.tp}


class _SignallingStdout:
    """stdout whose write sends SIGTERM to this process, as a reader that stops the tool on its first line."""

    def __init__(self):
        self.data = b""

    def write(self, data):
        self.data += data
        os.kill(os.getpid(), signal.SIGTERM)

    def flush(self):
        pass


def test_a_record_written_when_sigterm_arrives_is_counted(stop):
    tp = TopicPartition("t", 0)
    record = ConsumerRecord(topic="t", partition=0, leader_epoch=0, offset=7, timestamp=1000, timestamp_type=0,
                            key=None, value=b"first", headers=[], checksum=None, serialized_key_size=-1,
                            serialized_value_size=5, serialized_header_size=-1)
    formatter = RecordFormatter(parse_properties([], FORMATTER_PROPERTIES, "--property"))
    session = _Session(_OneRecordConsumer(tp, record), formatter, stop, group=None, until_ms=None,
                       max_messages=None, idle_timeout_ms=None, timeout_ms=1000)
    session._out = _SignallingStdout()
    with pytest.raises(KeyboardInterrupt):
        session.run()
    assert session._out.data == b"first\n"
    assert session.count == 1 and session.printed == {tp: 8}

"""Per-message cost of Sundial's hand-written data-plane codecs vs kafka-python 3.

Run from the repository root:

    .venv/bin/python benchmarks/codec_bench.py [--quick]

For Produce, Fetch and ListOffsets at the versions clients use, with empty and
1 MiB record payloads, it times what a broker does per message:

* request decode: Sundial ``parse_request_header`` + ``decode_request`` on a frame
  vs kafka-python ``<Request>.decode(frame, version=v, header=True)``;
* response encode: Sundial ``encode_response`` of the handler's dict (record
  payloads stay views / payload objects) vs kafka-python building its response
  object and ``encode(header=True, framed=True)`` (which copies the payload).

Each figure is the best of many short timeit runs of process CPU time (so other
processes on a busy machine inflate it less), in microseconds per message.
A 1 MiB copy (``bytes(memoryview)``) is printed as the reference for "one copy".
It also measures FrameDecoder assembling a 16 MiB frame from 64 KiB reads (MB/s).
"""

from __future__ import annotations

import argparse
import os
import platform
import struct
import sys
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse  # noqa: E402
from kafka.protocol.producer import ProduceRequest, ProduceResponse  # noqa: E402

from sundial.protocol import FrameDecoder, decode_request, encode_response, parse_request_header  # noqa: E402
from sundial.protocol.api_keys import ApiKey  # noqa: E402
from sundial.protocol.header import RequestHeader  # noqa: E402

MIB = 1 << 20


class FileSliceStandIn:
    """What storage hands the encoder for a fetch: an fd, a position and a size."""

    __slots__ = ("fd", "position", "size")

    def __init__(self, size: int) -> None:
        self.fd, self.position, self.size = -1, 0, size


def best_us(fn, number: int, repeat: int) -> float:
    """Best per-call CPU time over ``repeat`` short runs (robust to a busy machine)."""
    runs = max(repeat, 5) * 5
    batch = max(1, number // 10)
    return min(timeit.repeat(fn, number=batch, repeat=runs, timer=time.process_time)) / batch * 1e6


def frame_of(kp_request) -> memoryview:
    kp_request.with_header(correlation_id=1, client_id="bench")
    wire = bytes(kp_request.encode(header=True, framed=True))
    return memoryview(wire)[4:]


# -- Produce ------------------------------------------------------------------------------

def produce_request(version: int, records: bytes):
    T = ProduceRequest.TopicProduceData
    P = T.PartitionProduceData
    return ProduceRequest[version](transactional_id=None, acks=-1, timeout_ms=30000,
                                   topic_data=[T(name="bench-topic", partition_data=[P(index=0, records=records)])])


def produce_response_dict():
    return {"responses": [{"name": "bench-topic", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 123456, "log_append_time_ms": -1, "log_start_offset": 0,
         "record_errors": [], "error_message": None}]}], "throttle_time_ms": 0}


def kp_produce_response(version: int):
    T = ProduceResponse.TopicProduceResponse
    P = T.PartitionProduceResponse
    r = ProduceResponse[version](responses=[T(name="bench-topic", partition_responses=[
        P(index=0, error_code=0, base_offset=123456, log_append_time_ms=-1, log_start_offset=0,
          record_errors=[], error_message=None)])], throttle_time_ms=0)
    r.with_header(correlation_id=1)
    return r.encode(header=True, framed=True)


# -- Fetch ---------------------------------------------------------------------------------

def fetch_request(version: int):
    T = FetchRequest.FetchTopic
    P = T.FetchPartition
    return FetchRequest[version](replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=0,
                                 session_id=0, session_epoch=-1, topics=[T(topic="bench-topic", partitions=[
                                     P(partition=0, current_leader_epoch=-1, fetch_offset=1000, last_fetched_epoch=-1,
                                       log_start_offset=-1, partition_max_bytes=MIB)])],
                                 forgotten_topics_data=[], rack_id="")


def fetch_response_dict(records):
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "bench-topic", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 5000, "last_stable_offset": 5000,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": records}]}]}


def kp_fetch_response(version: int, records):
    T = FetchResponse.FetchableTopicResponse
    P = T.PartitionData
    r = FetchResponse[version](throttle_time_ms=0, error_code=0, session_id=0, responses=[T(topic="bench-topic", partitions=[
        P(partition_index=0, error_code=0, high_watermark=5000, last_stable_offset=5000, log_start_offset=0,
          aborted_transactions=None, preferred_read_replica=-1, records=records)])])
    r.with_header(correlation_id=1)
    return r.encode(header=True, framed=True)


# -- ListOffsets ----------------------------------------------------------------------------

def list_offsets_request(version: int):
    T = ListOffsetsRequest.ListOffsetsTopic
    P = T.ListOffsetsPartition
    return ListOffsetsRequest[version](replica_id=-1, isolation_level=0, topics=[T(name="bench-topic", partitions=[
        P(partition_index=0, current_leader_epoch=-1, timestamp=1_700_000_000_000)])])


def list_offsets_response_dict():
    return {"throttle_time_ms": 0, "topics": [{"name": "bench-topic", "partitions": [
        {"partition_index": 0, "error_code": 0, "old_style_offsets": [], "timestamp": 1_700_000_000_123,
         "offset": 4242, "leader_epoch": 0}]}]}


def kp_list_offsets_response(version: int):
    T = ListOffsetsResponse.ListOffsetsTopicResponse
    P = T.ListOffsetsPartitionResponse
    r = ListOffsetsResponse[version](throttle_time_ms=0, topics=[T(name="bench-topic", partitions=[
        P(partition_index=0, error_code=0, timestamp=1_700_000_000_123, offset=4242, leader_epoch=0)])])
    r.with_header(correlation_id=1)
    return r.encode(header=True, framed=True)


def sundial_decode(frame):
    return decode_request(parse_request_header(frame), frame)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0
    repeat = 3 if args.quick else args.repeat
    small_n = max(50, int(5000 * scale))
    big_n = max(5, int(200 * scale))

    payload = bytes(range(256)) * (MIB // 256)
    small = b""
    rows = []

    def row(name, ours_fn, theirs_fn, n):
        ours = best_us(ours_fn, n, repeat)
        theirs = best_us(theirs_fn, n, repeat)
        rows.append((name, ours, theirs))

    def response_row(name, api_key, v, resp, theirs_fn, n):
        """Time encoding ``resp`` (checked equal to kafka-python's bytes first) against ``theirs_fn``;
        the request header it answers."""
        header = RequestHeader(api_key, v, 1, "bench", 0)
        assert b"".join(bytes(b) for b in encode_response(header, resp)) == bytes(theirs_fn())
        row(name, lambda: encode_response(header, resp), theirs_fn, n)
        return header

    print(f"command: {os.path.relpath(sys.executable)} {' '.join(sys.argv)}")
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
          f"best of {max(repeat, 5) * 5} short runs of process CPU time")

    for v in (3, 7, 9):
        for label, records, n in (("empty", small, small_n), ("1MiB", payload, big_n)):
            frame = frame_of(produce_request(v, records))
            assert bytes(sundial_decode(frame).topic_data[0].partition_data[0].records) == records
            row(f"Produce v{v} decode request ({label})", lambda f=frame: sundial_decode(f),
                lambda f=frame, v=v: ProduceRequest.decode(f, version=v, header=True), n)
        response_row(f"Produce v{v} encode response", ApiKey.PRODUCE, v, produce_response_dict(),
                     lambda v=v: kp_produce_response(v), small_n)

    for v in (4, 11, 12):
        frame = frame_of(fetch_request(v))
        row(f"Fetch v{v} decode request", lambda f=frame: sundial_decode(f),
            lambda f=frame, v=v: FetchRequest.decode(f, version=v, header=True), small_n)
        for label, records, n in (("empty", small, small_n), ("1MiB", payload, big_n)):
            header = response_row(f"Fetch v{v} encode response ({label})", ApiKey.FETCH, v,
                                  fetch_response_dict(records), lambda v=v, rec=records: kp_fetch_response(v, rec), n)
        slice_resp = fetch_response_dict(FileSliceStandIn(MIB))
        rows.append((f"Fetch v{v} encode response (1MiB file slice)",
                     best_us(lambda h=header, r=slice_resp: encode_response(h, r), small_n, repeat), None))

    for v in (1, 7, 9):
        frame = frame_of(list_offsets_request(v))
        row(f"ListOffsets v{v} decode request", lambda f=frame: sundial_decode(f),
            lambda f=frame, v=v: ListOffsetsRequest.decode(f, version=v, header=True), small_n)
        resp = list_offsets_response_dict()
        header = response_row(f"ListOffsets v{v} encode response", ApiKey.LIST_OFFSETS, v, resp,
                              lambda v=v: kp_list_offsets_response(v), small_n)
        row(f"ListOffsets v{v} decode + encode", lambda f=frame, h=header, r=resp: (sundial_decode(f),
                                                                                 encode_response(h, r)),
            lambda f=frame, v=v: (ListOffsetsRequest.decode(f, version=v, header=True),
                                  kp_list_offsets_response(v)), small_n)

    view = memoryview(payload)
    rows.append(("reference: copy 1 MiB (bytes(memoryview))", best_us(lambda: bytes(view), big_n, repeat), None))

    width = max(len(r[0]) for r in rows)
    print(f"\n{'operation':<{width}}  {'sundial µs':>11}  {'kafka-python µs':>15}  {'speed-up':>8}")
    for name, ours, theirs in rows:
        if theirs is None:
            print(f"{name:<{width}}  {ours:>11.2f}  {'':>15}  {'':>8}")
        else:
            print(f"{name:<{width}}  {ours:>11.2f}  {theirs:>15.2f}  {theirs / ours:>7.1f}x")

    # Framing: one 16 MiB frame arriving in 64 KiB reads.
    body = b"\x00" * (16 * MIB)
    wire = struct.pack(">i", len(body)) + body
    chunks = [wire[i:i + 65536] for i in range(0, len(wire), 65536)]

    def assemble():
        decoder = FrameDecoder(32 * MIB)
        out = []
        for c in chunks:
            out += decoder.feed(c)
        assert len(out) == 1

    seconds = min(timeit.repeat(assemble, number=1, repeat=repeat, timer=time.process_time))
    print(f"\nFrameDecoder: 16 MiB frame from {len(chunks)} reads of 64 KiB: {seconds * 1e3:.1f} ms "
          f"({16 / seconds:,.0f} MiB/s)")


if __name__ == "__main__":
    main()

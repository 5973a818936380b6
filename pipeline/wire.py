"""A small blocking Kafka client for executors: ApiVersions, Metadata, ListOffsets, Fetch.

Why not KafkaConsumer in tasks: the consumer decodes every record into Python objects
(the ceiling of a Spark read, see :mod:`pipeline.records`); this client hands the raw
``records`` bytes of a Fetch response to the column decoder, and keeps one Fetch in
flight while the previous response is decoded. Message encoding and decoding use
kafka-python's schema classes (``kafka.protocol``); only the socket I/O and the
response-header parsing are here.

Framing (Kafka's): ``[size int32][header][body]``. Request header v1
(api_key, api_version, correlation_id, client_id) or v2 (v1 + tagged fields) for
flexible versions; response header v0 (correlation_id) or v1 (+ tagged fields) for
flexible versions, except ApiVersions which always answers with v0.

Versions: ApiVersions v0 first; then the highest version both sides support, capped
where this client stops (Fetch 12: topic names, not ids; Metadata 8; ListOffsets 7).
Fetch needs v4+ (v2 record batches, isolation level, last stable offset).

PLAINTEXT only: SSL and SASL listeners are read through KafkaConsumer
(``sundial.fetcher=consumer``, chosen automatically from ``kafka.security.protocol``).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from .errors import FetchError

_INT32 = struct.Struct(">i")

FETCH_MAX_VERSION = 12
METADATA_MAX_VERSION = 8
LIST_OFFSETS_MAX_VERSION = 7

# Kafka error codes this client acts on
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
REPLICA_NOT_AVAILABLE = 9
NETWORK_EXCEPTION = 13
COORDINATOR_LOAD_IN_PROGRESS = 14
KAFKA_STORAGE_ERROR = 56
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
OFFSET_NOT_AVAILABLE = 78
UNKNOWN_TOPIC_ID = 100

RETRIABLE = {UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
             REPLICA_NOT_AVAILABLE, NETWORK_EXCEPTION, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH,
             UNKNOWN_LEADER_EPOCH, OFFSET_NOT_AVAILABLE, UNKNOWN_TOPIC_ID}


def error_name(code: int) -> str:
    try:
        from kafka.errors import for_code

        return for_code(code).__name__
    except Exception:  # unknown code: the number is still useful
        return f"error {code}"


class BrokerUnavailable(FetchError):
    """The connection failed or closed; callers reconnect until their deadline."""


@dataclass
class PartitionFetch:
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[tuple[int, int]] | None     # (producer_id, first_offset)
    records: bytes


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for entry in servers.split(","):
        entry = entry.strip()
        if not entry:
            continue
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        host, _, port = entry.rpartition(":")
        if not host or not port.isdigit():
            raise FetchError(f"bootstrap server '{entry}' is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise FetchError("no bootstrap servers")
    return out


class BrokerConnection:
    """One blocking TCP connection with request pipelining (responses arrive in order)."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float,
                 receive_buffer_bytes: int | None = None) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._correlation_id = 0
        self._in_flight: list[tuple[int, type, int]] = []
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise BrokerUnavailable(f"cannot connect to {host}:{port}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if receive_buffer_bytes:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()

    # --- versions ------------------------------------------------------------------------

    def _negotiate(self) -> None:
        from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

        response = self.request(ApiVersionsRequest(), ApiVersionsResponse, 0)
        if response.error_code != NONE:
            raise FetchError(f"ApiVersions to {self.host}:{self.port} failed: {error_name(response.error_code)}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def version_for(self, request_cls, cap: int, minimum: int = 0) -> int:
        broker = self.versions.get(request_cls.API_KEY)
        if broker is None:
            raise FetchError(f"broker {self.host}:{self.port} does not support {request_cls.__name__}")
        lo, hi = max(broker[0], request_cls.min_version, minimum), min(broker[1], request_cls.max_version, cap)
        if lo > hi:
            raise FetchError(
                f"no common {request_cls.__name__} version with {self.host}:{self.port} "
                f"(broker {broker[0]}..{broker[1]}, client needs {minimum}..{cap})")
        return hi

    # --- I/O -------------------------------------------------------------------------------

    def send(self, request, response_cls, version: int) -> None:
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        request.with_header(correlation_id=self._correlation_id, client_id=self.client_id)
        data = request.encode(version=version, header=True, framed=True)
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.close()
            raise BrokerUnavailable(f"send to {self.host}:{self.port} failed: {exc}") from None
        self._in_flight.append((self._correlation_id, response_cls, version))

    def receive(self):
        correlation_id, response_cls, version = self._in_flight.pop(0)
        frame = self._read_frame()
        (got,) = _INT32.unpack_from(frame, 0)
        if got != correlation_id:
            self.close()
            raise FetchError(f"{self.host}:{self.port} answered correlation id {got}, expected {correlation_id}")
        pos = 4
        if response_cls.flexible_version_q(version) and response_cls.API_KEY != 18:
            pos = _skip_tagged_fields(frame, pos)
        return response_cls.decode(memoryview(frame)[pos:], version=version)

    def request(self, request, response_cls, version: int):
        self.send(request, response_cls, version)
        return self.receive()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def _read_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        try:
            while got < n:
                r = self.sock.recv_into(view[got:], n - got)
                if r == 0:
                    raise OSError("connection closed by the broker")
                got += r
        except OSError as exc:
            self.close()
            raise BrokerUnavailable(f"read from {self.host}:{self.port} failed: {exc}") from None
        return buf

    def _read_frame(self) -> bytearray:
        (size,) = _INT32.unpack(self._read_exact(4))
        if size < 4:
            self.close()
            raise FetchError(f"{self.host}:{self.port} sent an invalid frame size {size}")
        return self._read_exact(size)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        self._in_flight.clear()

    # --- requests --------------------------------------------------------------------------

    def leader_for(self, topic: str, partition: int) -> tuple[int, tuple[str, int] | None]:
        """(error_code, (host, port) of the partition leader or None)."""
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse

        version = self.version_for(MetadataRequest, METADATA_MAX_VERSION, minimum=1)
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                  allow_auto_topic_creation=False)
        response = self.request(request, MetadataResponse, version)
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        for t in response.topics:
            if t.name != topic:
                continue
            if t.error_code != NONE:
                return t.error_code, None
            for p in t.partitions:
                if p.partition_index == partition:
                    if p.error_code not in (NONE, REPLICA_NOT_AVAILABLE):
                        return p.error_code, None
                    return NONE, brokers.get(p.leader_id)
            return UNKNOWN_TOPIC_OR_PARTITION, None
        return UNKNOWN_TOPIC_OR_PARTITION, None

    def list_offset(self, topic: str, partition: int, timestamp: int, *, read_committed: bool) -> tuple[int, int]:
        """(error_code, offset) for ListOffsets with ``timestamp`` (-2 earliest, -1 latest)."""
        from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

        version = self.version_for(ListOffsetsRequest, LIST_OFFSETS_MAX_VERSION, minimum=2 if read_committed else 1)
        request = ListOffsetsRequest(
            replica_id=-1, isolation_level=1 if read_committed else 0,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])])
        response = self.request(request, ListOffsetsResponse, version)
        for t in response.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition:
                    return p.error_code, p.offset
        return UNKNOWN_TOPIC_OR_PARTITION, -1

    def send_fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int, max_wait_ms: int,
                   read_committed: bool) -> None:
        from kafka.protocol.consumer import FetchRequest, FetchResponse

        version = self.version_for(FetchRequest, FETCH_MAX_VERSION, minimum=4)
        request = FetchRequest(
            replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max(max_bytes, 1),
            isolation_level=1 if read_committed else 0, session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=max_bytes)])],
            forgotten_topics_data=[], rack_id="")
        self.send(request, FetchResponse, version)

    def receive_fetch(self, topic: str, partition: int) -> PartitionFetch:
        response = self.receive()
        if getattr(response, "error_code", NONE) not in (NONE, None):
            return PartitionFetch(response.error_code, -1, -1, -1, None, b"")
        for t in response.responses:
            if t.topic != topic:
                continue
            for p in t.partitions:
                if p.partition_index != partition:
                    continue
                aborted = None
                if p.aborted_transactions:
                    aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
                records = p.records if p.records is not None else b""
                return PartitionFetch(p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
                                      aborted, records)
        return PartitionFetch(UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, None, b"")


def _skip_tagged_fields(buf, pos: int) -> int:
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
    return pos


def _read_uvarint(buf, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7

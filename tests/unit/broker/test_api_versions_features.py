"""ApiVersions' feature fields (KIP-584): ``group.version`` as a Kafka 4 broker reports it.

The answer is encoded by the handler and decoded with the protocol package, as a client
reads it: v3 carries the finalized level only, v4 the supported range too; a client that
announces librdkafka older than 2.2.0 gets no tagged fields (it misreads them); with the
consumer protocol off (``group.coordinator.rebalance.protocols``) the level is 0, which is
not listed.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sundial.broker.dispatch import Dispatcher
from sundial.broker.handlers.api_versions import handle_api_versions
from sundial.config import BrokerConfig
from sundial.protocol.api_keys import ApiKey
from sundial.protocol.codec import decode_request, decode_response, encode_request
from sundial.protocol.header import encode_response_header, parse_request_header

pytestmark = pytest.mark.asyncio


@dataclass
class FakeBroker:
    config: BrokerConfig
    dispatcher: Dispatcher


@dataclass
class Ctx:
    broker: FakeBroker
    api_version: int
    connection: object = None
    client_host: str = "127.0.0.1"


async def ask(version: int, *, name: str = "confluent-kafka-python", software: str = "2.16.1-rdkafka-2.16.0",
              protocols: str = "classic,consumer"):
    broker = FakeBroker(BrokerConfig({"group.coordinator.rebalance.protocols": protocols}), Dispatcher())
    frame = encode_request(ApiKey.API_VERSIONS, version, 9, "c", {"client_software_name": name,
                                                                 "client_software_version": software})
    body = memoryview(frame)[4:]
    request = decode_request(parse_request_header(body), body)
    answer = await handle_api_versions(Ctx(broker, version), request)
    wire = encode_response_header(ApiKey.API_VERSIONS, version, 9) + bytes(answer)
    _, decoded = decode_response(ApiKey.API_VERSIONS, version, len(wire).to_bytes(4, "big") + wire)
    return decoded


def _finalized(resp):
    return {(f.name, f.min_version_level, f.max_version_level) for f in (resp.finalized_features or [])}


def _supported(resp):
    return {(f.name, f.min_version, f.max_version) for f in (resp.supported_features or [])}


async def test_v3_finalizes_group_version_1_without_listing_its_zero_minimum():
    resp = await ask(3)
    assert resp.error_code == 0
    # share.version 1 too: ShareFetch is served (broker/handlers/api_versions.py)
    assert _finalized(resp) == {("group.version", 1, 1), ("share.version", 1, 1)}
    assert resp.finalized_features_epoch >= 0
    assert _supported(resp) == set()
    assert {k.api_key for k in resp.api_keys} >= {ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE}


@pytest.mark.parametrize("name,software,tagged", [
    ("librdkafka", "2.0.2", False),                       # Debian's kcat 1.7.1
    ("confluent-kafka-python", "1.9.0-rdkafka-1.9.2", False),
    ("librdkafka", "2.2.0", True),
    ("confluent-kafka-python", "2.16.1-rdkafka-2.16.0", True),
    ("apache-kafka-java", "4.0.0", True),
])
async def test_old_librdkafka_gets_no_tagged_fields(name, software, tagged):
    resp = await ask(3, name=name, software=software)
    assert bool(_finalized(resp)) is tagged


async def test_the_consumer_protocol_switched_off_finalizes_nothing():
    resp = await ask(3, protocols="classic")
    assert _finalized(resp) == {("share.version", 1, 1)}     # share groups do not depend on it


async def test_below_v3_there_are_no_feature_fields():
    resp = await ask(2)
    assert resp.error_code == 0 and not getattr(resp, "finalized_features", None)

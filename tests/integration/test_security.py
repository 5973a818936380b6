"""TLS, SASL and ACLs against the daemon with three real clients: kafka-python, confluent-kafka
(librdkafka 2.16) and kcat 1.7.1 (librdkafka 2.0.2).

One daemon serves four listeners (PLAINTEXT, SSL with required client certificates,
SASL_PLAINTEXT, SASL_SSL) with the ACL authorizer on. Certificates are made by the
test with ``openssl`` (tests/support/pki.py); users are added with the
``sundial credentials`` CLI and rules with ``sundial acls``, both before start and
while the daemon runs (live reload).

Principals and rules:

* ``User:admin`` is a super user (creates topics);
* ``User:alice`` (SASL) and ``User:CN=alice,OU=eng,O=Sundial Test`` (TLS certificate)
  may produce to and consume from topics and groups prefixed ``sec-``;
* ``User:bob`` authenticates but has no rules: every request gets the authorization
  error code Kafka gives (checked on the raw wire) and no data.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import (
    GroupAuthorizationFailedError,
    KafkaError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
)

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from support.pki import make_pki, openssl_available
from support.waiting import wait_for

from .acl_support import sundial_cli
from .clients import RawConnection, read_frame
from .conftest import SundialProcess, free_port

pytestmark = pytest.mark.skipif(not openssl_available(), reason="needs the openssl command")

PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
ALICE_DN = "User:CN=alice,OU=eng,O=Sundial Test"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
HAVE_KCAT = shutil.which("kcat") is not None


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    base = tmp_path_factory.mktemp("secure")
    pki = make_pki(base / "pki")
    ports = {"PLAINTEXT": free_port(), "SSL": free_port(), "SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    proc = SundialProcess(base / "broker", {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.location": pki.server_keystore,
        "ssl.truststore.location": pki.ca,
        "ssl.client.auth": "required",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "group.initial.rebalance.delay.ms": "0",
        # every failed authentication logged: the tests look for the line of each refused client
        # (the per-address limit is tested in test_metrics_security.py)
        "sundial.authentication.failure.log.interval.ms": "0",
    }, port=ports["PLAINTEXT"])
    for user in ("admin", "alice", "bob"):
        sundial_cli(proc.data_dir, "credentials", "add", user, stdin=PASSWORDS[user] + "\n")
    for principal in ("User:alice", ALICE_DN):
        sundial_cli(proc.data_dir, "acls", "add", "--allow-principal", principal, "--operation", "All",
                    "--topic", "sec-", "--group", "sec-", "--resource-pattern-type", "prefixed")
    proc.start()
    proc.ports = ports
    proc.pki = pki
    yield proc
    code = proc.stop()
    assert code == 0, proc.log_text()[-3000:]


def addr(secure, listener: str) -> str:
    return f"127.0.0.1:{secure.ports[listener]}"


def new_topic(secure, partitions: int = 1) -> str:
    name = f"sec-{uuid.uuid4().hex[:8]}"
    a = KafkaAdminClient(**kp_config(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", "admin"))
    try:
        a.create_topics([NewTopic(name, partitions, 1)])
    finally:
        a.close()
    return name


# -- client configurations ---------------------------------------------------------------------------
def kp_config(secure, listener: str, mechanism: str | None = None, user: str = "alice",
              password: str | None = None, cert: bool = True) -> dict:
    cfg = {"bootstrap_servers": addr(secure, listener), "security_protocol": listener,
           "request_timeout_ms": 15000}
    if "SASL" in listener:
        cfg.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                   sasl_plain_password=PASSWORDS.get(user) if password is None else password)
    if "SSL" in listener:
        cfg.update(ssl_cafile=secure.pki.ca, ssl_check_hostname=True)
        if cert:
            cfg.update(ssl_certfile=secure.pki.alice_cert, ssl_keyfile=secure.pki.alice_key)
    return cfg


def rdkafka_config(secure, listener: str, mechanism: str | None = None, user: str = "alice",
                   password: str | None = None) -> dict:
    cfg = {"bootstrap.servers": addr(secure, listener), "security.protocol": listener.lower()}
    if "SASL" in listener:
        cfg.update({"sasl.mechanisms": mechanism, "sasl.username": user,
                    "sasl.password": PASSWORDS.get(user) if password is None else password})
    if "SSL" in listener:
        cfg.update({"ssl.ca.location": secure.pki.ca, "ssl.certificate.location": secure.pki.alice_cert,
                    "ssl.key.location": secure.pki.alice_key})
    return cfg


# -- one produce/consume round trip per client ----------------------------------------------------------
def roundtrip_kafka_python(secure, listener, mechanism, topic, n=20):
    cfg = kp_config(secure, listener, mechanism)
    p = KafkaProducer(acks="all", linger_ms=5, **cfg)
    for i in range(n):
        p.send(topic, value=f"kp-{i}".encode(), partition=0)
    p.flush(timeout=30)
    p.close()
    c = KafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest", group_id=f"sec-{topic}", **cfg)
    c.assign([TopicPartition(topic, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=300).values():
            got.extend(r.value for r in recs)
    c.commit()
    c.close()
    return got


def roundtrip_confluent(secure, listener, mechanism, topic, n=20):
    from confluent_kafka import Consumer, Producer, TopicPartition as CTP

    cfg = rdkafka_config(secure, listener, mechanism)
    errors = []
    p = Producer({**cfg, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=f"ck-{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors, errors
    c = Consumer({**cfg, "group.id": f"sec-{topic}", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([CTP(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


def kcat_args(secure, listener, mechanism=None, user="alice", password=None) -> list[str]:
    args = ["kcat", "-b", addr(secure, listener), "-X", f"security.protocol={listener.lower()}"]
    if "SASL" in listener:
        args += ["-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={user}",
                 "-X", f"sasl.password={PASSWORDS.get(user) if password is None else password}"]
    if "SSL" in listener:
        args += ["-X", f"ssl.ca.location={secure.pki.ca}", "-X", f"ssl.certificate.location={secure.pki.alice_cert}",
                 "-X", f"ssl.key.location={secure.pki.alice_key}"]
    return args


def roundtrip_kcat(secure, listener, mechanism, topic, n=20):
    base = kcat_args(secure, listener, mechanism)
    lines = "".join(f"kc-{i}\n" for i in range(n)).encode()
    out = subprocess.run(base + ["-P", "-t", topic, "-p", "0"], input=lines, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    out = subprocess.run(base + ["-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.split(b"\n") if line]


CLIENTS = {"kafka-python": (roundtrip_kafka_python, b"kp-"), "confluent-kafka": (roundtrip_confluent, b"ck-"),
           "kcat": (roundtrip_kcat, b"kc-")}


def check_roundtrip(secure, client, listener, mechanism):
    if client == "kcat" and not HAVE_KCAT:
        pytest.skip("kcat not installed")
    fn, prefix = CLIENTS[client]
    topic = new_topic(secure)
    got = fn(secure, listener, mechanism, topic)
    assert got == [prefix + str(i).encode() for i in range(20)]


@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_sasl_plaintext(secure, client, mechanism):
    check_roundtrip(secure, client, "SASL_PLAINTEXT", mechanism)


@pytest.mark.parametrize("client", list(CLIENTS))
def test_sasl_ssl_scram_sha_512(secure, client):
    check_roundtrip(secure, client, "SASL_SSL", "SCRAM-SHA-512")


@pytest.mark.parametrize("client", list(CLIENTS))
def test_ssl_with_client_certificate(secure, client):
    check_roundtrip(secure, client, "SSL", None)
    events = [e for e in secure.log_lines() if e.get("event") == "authorization_denied"
              and e.get("principal") == ALICE_DN]
    assert not events, "the certificate principal must be the one the ACL names"


# -- failures -------------------------------------------------------------------------------------------
def _kp_refused(secure, cfg, user: str, *, may_succeed: bool) -> bool:
    """One kafka-python connection attempt: True when it failed and the daemon logged the failed
    authentication of ``user`` meanwhile. kafka-python retries a refused bootstrap until
    ``bootstrap_timeout_ms``, so that is short; on a busy host the attempt may end before the
    exchange and the caller tries again. A successful attempt fails the test unless ``may_succeed``."""
    since = len(secure.log_lines())
    try:
        KafkaProducer(bootstrap_timeout_ms=3000, **cfg).close()
    except (SaslAuthenticationFailedError, KafkaError):
        pass
    else:
        assert may_succeed, f"{user} authenticated with credentials that must be refused"
        return False
    return any(e.get("event") == "authentication_failed" and e.get("user") == user
               for e in secure.log_lines()[since:])


@pytest.mark.parametrize("client,mechanism", [("kafka-python", "PLAIN"), ("confluent-kafka", "SCRAM-SHA-256"),
                                              ("kcat", "SCRAM-SHA-512")])
def test_wrong_password_fails_for_every_client(secure, client, mechanism):
    if client == "kafka-python":
        cfg = kp_config(secure, "SASL_PLAINTEXT", mechanism, password="nope")
        wait_for(lambda: _kp_refused(secure, cfg, "alice", may_succeed=False), 60, "a logged refusal")
    elif client == "confluent-kafka":
        from confluent_kafka import KafkaError as CKError
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        errors = []
        admin = AdminClient({**rdkafka_config(secure, "SASL_PLAINTEXT", mechanism, password="nope"),
                             "error_cb": errors.append, "reconnect.backoff.ms": 1000, "log_level": 0})
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=2)
        deadline = time.monotonic() + 30
        while not errors and time.monotonic() < deadline:
            admin.poll(0.2)
        assert any(e.code() == CKError._AUTHENTICATION and "Authentication failed" in e.str() for e in errors), \
            errors
    else:
        if not HAVE_KCAT:
            pytest.skip("kcat not installed")
        out = subprocess.run(kcat_args(secure, "SASL_PLAINTEXT", mechanism, password="nope") + ["-L", "-m", "2"],
                             capture_output=True, timeout=30)
        assert out.returncode != 0 and b"Authentication failed" in out.stderr
    failures = [e for e in secure.log_lines() if e.get("event") == "authentication_failed"
                and e.get("mechanism") == mechanism and e.get("user") == "alice"]
    assert failures


def test_ssl_listener_refuses_clients_without_a_trusted_certificate(secure):
    ctx = ssl.create_default_context(cafile=secure.pki.ca)
    for cert in (None, (secure.pki.mallory_cert, secure.pki.mallory_key)):
        if cert:
            ctx.load_cert_chain(*cert)
        with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as raw:
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                    s.sendall(encode_request(18, 0, 1, "x", {}))
                    if not s.recv(4):
                        raise ConnectionError("closed")
    # a plaintext client on the TLS port gets nowhere either
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as s:
        s.sendall(encode_request(18, 0, 1, "x", {}))
        s.settimeout(10)
        try:
            data = s.recv(64)
        except ConnectionError:
            data = b""
        assert not data.startswith(struct.pack(">i", 0)[:0] + b"\x00\x00")  # no Kafka frame comes back


# -- the raw wire: exact error codes, nothing stored ------------------------------------------------------
class Wire(RawConnection):
    """A raw SASL_PLAINTEXT connection authenticated with PLAIN through SaslHandshake v1."""

    def __init__(self, secure, user: str, password: str | None = None) -> None:
        super().__init__("127.0.0.1", secure.ports["SASL_PLAINTEXT"], "wire-test", timeout_s=15)
        self.auth = self.authenticate_plain(user, PASSWORDS[user] if password is None else password)

    def closed(self) -> bool:
        self.sock.settimeout(10)
        return super().closed()


def _batch(n=3) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=int(time.time() * 1000), key=None, value=b"secret-%d" % i, headers=[])
    return bytes(b.build())


def test_unauthorized_principal_gets_kafkas_error_codes_and_no_data(secure):
    topic = new_topic(secure)
    alice = Wire(secure, "alice")
    assert alice.auth.error_code == 0
    produce = {"transactional_id": None, "acks": -1, "timeout_ms": 10000,
               "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": _batch()}]}]}
    r = alice.call(ApiKey.PRODUCE, 7, produce)
    assert r.responses[0].partition_responses[0].error_code == 0
    bob = Wire(secure, "bob")
    assert bob.auth.error_code == 0
    # Produce: 29, nothing appended
    r = bob.call(ApiKey.PRODUCE, 7, produce)
    assert r.responses[0].partition_responses[0].error_code == 29
    # Fetch: 29 and no records
    fetch = {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
             "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                         "partition_max_bytes": 1 << 20}]}]}
    r = bob.call(ApiKey.FETCH, 11, fetch)
    part = r.responses[0].partitions[0]
    assert part.error_code == 29 and not part.records
    # ListOffsets: 29
    r = bob.call(ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    assert r.topics[0].partitions[0].error_code == 29
    # Metadata: hidden from the all-topics list, 29 when named, and no auto-creation
    r = bob.call(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": True})
    assert topic not in [t.name for t in r.topics]
    r = bob.call(ApiKey.METADATA, 9, {"topics": [{"name": topic}, {"name": "sec-never-made"}],
                                      "allow_auto_topic_creation": True})
    assert [(t.name, t.error_code) for t in r.topics] == [(topic, 29), ("sec-never-made", 29)]
    # Groups: 30
    r = bob.call(ApiKey.FIND_COORDINATOR, 2, {"key": "sec-g", "key_type": 0})
    assert r.error_code == 30
    r = bob.call(ApiKey.OFFSET_COMMIT, 7, {"group_id": "sec-g", "generation_id_or_member_epoch": -1,
                                          "member_id": "", "group_instance_id": None, "topics": [
                                              {"name": topic, "partitions": [{"partition_index": 0,
                                                                              "committed_offset": 1,
                                                                              "committed_leader_epoch": -1,
                                                                              "committed_metadata": ""}]}]})
    assert r.topics[0].partitions[0].error_code == 30
    r = bob.call(ApiKey.OFFSET_FETCH, 5, {"group_id": "sec-g", "topics": None})
    assert r.error_code == 30
    r = bob.call(ApiKey.JOIN_GROUP, 5, {"group_id": "sec-g", "session_timeout_ms": 10000,
                                        "rebalance_timeout_ms": 10000, "member_id": "", "group_instance_id": None,
                                        "protocol_type": "consumer", "protocols": [{"name": "range",
                                                                                    "metadata": b""}]})
    assert r.error_code == 30
    # Cluster: 31
    r = bob.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert r.error_code == 31
    r = bob.call(ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [{"resource_type": 4, "resource_name": "1",
                                                               "configuration_keys": None}],
                                              "include_synonyms": False})
    assert r.results[0].error_code == 31
    r = bob.call(ApiKey.CREATE_TOPICS, 3, {"topics": [{"name": "sec-bob", "num_partitions": 1,
                                                       "replication_factor": 1, "assignments": [], "configs": []}],
                                           "timeout_ms": 5000, "validate_only": False})
    assert r.topics[0].error_code == 29
    bob.close()
    # alice's records are all there is: 3 records, nothing from bob
    r = alice.call(ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    assert r.topics[0].partitions[0].offset == 3
    r = alice.call(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
    assert "sec-bob" not in [t.name for t in r.topics]
    alice.close()
    denied = [e for e in secure.log_lines() if e.get("event") == "authorization_denied"
              and e.get("principal") == "User:bob"]
    assert {e["operation"] for e in denied} >= {"WRITE", "READ", "DESCRIBE", "CREATE"}


def assert_produce_refused(cfg: dict, topic: str) -> None:
    """kafka-python's producer with ``cfg`` is refused a write to ``topic`` (TOPIC_AUTHORIZATION_FAILED)."""
    p = KafkaProducer(acks=1, max_block_ms=30000, **cfg)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send(topic, b"x").get(timeout=30)
    finally:
        p.close()


def test_clients_see_authorization_errors(secure):
    topic = new_topic(secure)
    cfg = kp_config(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", user="bob")
    assert_produce_refused(cfg, topic)
    c = KafkaConsumer(group_id="sec-bob", **cfg)
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    with pytest.raises((GroupAuthorizationFailedError, TopicAuthorizationFailedError)):
        while time.monotonic() < deadline:
            c.poll(timeout_ms=500)
    c.close()
    from confluent_kafka import Producer

    errors = []
    prod = Producer({**rdkafka_config(secure, "SASL_PLAINTEXT", "PLAIN", user="bob"), "acks": "1",
                     "message.timeout.ms": 10000, "log_level": 0})
    prod.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    prod.flush(15)
    assert errors and errors[0] is not None and errors[0].name() == "TOPIC_AUTHORIZATION_FAILED"
    if HAVE_KCAT:
        out = subprocess.run(kcat_args(secure, "SASL_PLAINTEXT", "PLAIN", user="bob")
                             + ["-C", "-t", topic, "-p", "0", "-o", "beginning", "-e"],
                             capture_output=True, timeout=30)
        assert out.returncode != 0 and b"authoriz" in out.stderr.lower()


# -- SASL protocol details ------------------------------------------------------------------------------
def test_requests_before_authentication_close_the_connection(secure):
    s = socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10)
    s.sendall(encode_request(18, 0, 1, "pre", {}))  # ApiVersions is allowed
    corr, body = decode_response(18, 0, read_frame(s))
    assert body.error_code == 0
    s.sendall(encode_request(ApiKey.METADATA, 1, 2, "pre", {"topics": None}))
    assert s.recv(1) == b""
    s.close()


def test_unsupported_mechanism_and_bad_state(secure):
    s = socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10)
    s.sendall(encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "x", {"mechanism": "GSSAPI"}))
    _, body = decode_response(ApiKey.SASL_HANDSHAKE, 1, read_frame(s))
    assert body.error_code == 33 and sorted(body.mechanisms) == sorted(MECHANISMS)
    assert s.recv(1) == b""
    s.close()
    s = socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10)
    s.sendall(encode_request(ApiKey.SASL_AUTHENTICATE, 1, 1, "x", {"auth_bytes": b"\0a\0b"}))
    _, body = decode_response(ApiKey.SASL_AUTHENTICATE, 1, read_frame(s))
    assert body.error_code == 34  # ILLEGAL_SASL_STATE: no handshake yet
    s.close()
    # on a listener without SASL the APIs answer ILLEGAL_SASL_STATE and the connection stays open
    s = socket.create_connection(("127.0.0.1", secure.ports["PLAINTEXT"]), timeout=10)
    s.sendall(encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "x", {"mechanism": "PLAIN"}))
    _, body = decode_response(ApiKey.SASL_HANDSHAKE, 1, read_frame(s))
    assert body.error_code == 34
    s.sendall(encode_request(18, 0, 2, "x", {}))
    assert decode_response(18, 0, read_frame(s))[1].error_code == 0
    s.close()


def test_failed_authentication_answers_58_then_closes(secure):
    w = Wire(secure, "alice", password="wrong")
    assert w.auth.error_code == 58
    assert w.auth.error_message == "Authentication failed: Invalid username or password"
    assert w.closed()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_handshake_v0_raw_tokens(secure, mechanism):
    from kafka.net.sasl.scram import ScramClient

    s = socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10)
    s.sendall(encode_request(ApiKey.SASL_HANDSHAKE, 0, 1, "raw", {"mechanism": mechanism}))
    _, body = decode_response(ApiKey.SASL_HANDSHAKE, 0, read_frame(s))
    assert body.error_code == 0

    def token(data: bytes) -> bytes:
        s.sendall(struct.pack(">i", len(data)) + data)
        return read_frame(s)[4:]

    if mechanism == "PLAIN":
        assert token(b"\0alice\0alice-pw") == b""
    else:
        client = ScramClient("alice", "alice-pw", mechanism)
        client.process_server_first_message(token(client.first_message()))
        client.process_server_final_message(token(client.final_message()))
    s.sendall(encode_request(ApiKey.METADATA, 1, 5, "raw", {"topics": None}))
    corr, _ = decode_response(ApiKey.METADATA, 1, read_frame(s))
    assert corr == 5
    s.close()


def test_users_and_rules_added_while_running_apply_at_once(secure):
    sundial_cli(secure.data_dir, "credentials", "add", "carol", "--password", "carol-pw", "--mechanism",
                "SCRAM-SHA-512")
    PASSWORDS["carol"] = "carol-pw"
    topic = new_topic(secure)
    cfg = kp_config(secure, "SASL_PLAINTEXT", "SCRAM-SHA-512", user="carol")
    assert_produce_refused(cfg, topic)
    sundial_cli(secure.data_dir, "acls", "add", "--allow-principal", "User:carol", "--producer", "--topic", topic)

    def produce_once():  # rules are re-read at most once a second, on use: try until they apply
        p = KafkaProducer(acks=1, max_block_ms=30000, **cfg)
        try:
            return p.send(topic, b"y").get(timeout=30)
        except TopicAuthorizationFailedError:
            return None
        finally:
            p.close()

    md = wait_for(produce_once, 60, "the new rule to apply", interval_s=0.2)
    assert md.offset == 0  # refused sends stored nothing
    sundial_cli(secure.data_dir, "credentials", "delete", "carol")
    # credentials are re-read at most once a second too: an attempt just after may still pass
    wait_for(lambda: _kp_refused(secure, cfg, "carol", may_succeed=True), 60, "carol to be refused")

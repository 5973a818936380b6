"""SASL mechanisms and the credentials store (broker/sasl.py), against RFC 7677's test vector
and kafka-python's own SCRAM and PLAIN client code as independent implementations."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from sundial.broker.sasl import (
    PLAIN_FAILED,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    CredentialsError,
    CredentialStore,
    PlainServer,
    SaslAuthenticationError,
    ScramServer,
    make_credential,
    scram_failed,
)


@pytest.fixture
def store(tmp_path):
    s = CredentialStore(str(tmp_path / "credentials.json"))
    s.set_user("alice", "alice-secret")
    s.set_user("bob", "b0b", mechanisms=(SCRAM_SHA_512,), iterations=8192)
    return s


def _exchange(server: ScramServer, user: str, password: str, mechanism: str):
    client = ScramClient(user, password, mechanism)
    server_first = server.evaluate(client.first_message())
    client.process_server_first_message(server_first)
    server_final = server.evaluate(client.final_message())
    client.process_server_final_message(server_final)  # raises if the server signature is wrong
    return server


# -- SCRAM ----------------------------------------------------------------------------------------
def test_rfc7677_test_vector(tmp_path):
    """RFC 7677 section 3: user "user", password "pencil", fixed nonces and salt."""
    cred = make_credential(SCRAM_SHA_256, "pencil", iterations=4096,
                           salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"version": 1, "secret": "", "users": {"user": {SCRAM_SHA_256: cred.to_json()}}}))
    server = ScramServer(SCRAM_SHA_256, CredentialStore(str(path)),
                         nonce_factory=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_kafka_python_scram_client_authenticates(store, mechanism):
    server = _exchange(ScramServer(mechanism, store), "alice", "alice-secret", mechanism)
    assert server.complete and server.username == "alice"


def test_scram_iterations_come_from_the_credential(store):
    server = ScramServer(SCRAM_SHA_512, store)
    first = server.evaluate(b"n,,n=bob,r=abc").decode()
    assert first.endswith(",i=8192")
    _exchange(ScramServer(SCRAM_SHA_512, store), "bob", "b0b", SCRAM_SHA_512)


def test_scram_wrong_password_fails_with_kafkas_message(store):
    with pytest.raises(SaslAuthenticationError) as info:
        _exchange(ScramServer(SCRAM_SHA_256, store), "alice", "wrong", SCRAM_SHA_256)
    assert str(info.value) == scram_failed(SCRAM_SHA_256)


def test_scram_mechanism_without_credential_fails(store):
    # bob has only SCRAM-SHA-512
    with pytest.raises(SaslAuthenticationError):
        _exchange(ScramServer(SCRAM_SHA_256, store), "bob", "b0b", SCRAM_SHA_256)


def test_unknown_user_gets_a_stable_believable_challenge(store):
    a = ScramServer(SCRAM_SHA_256, store).evaluate(b"n,,n=nobody,r=n1").decode()
    b = ScramServer(SCRAM_SHA_256, store).evaluate(b"n,,n=nobody,r=n2").decode()
    salt_a = dict(kv.split("=", 1) for kv in a.split(","))["s"]
    salt_b = dict(kv.split("=", 1) for kv in b.split(","))["s"]
    assert salt_a == salt_b and ",i=4096" in a  # same salt each time: no way to tell the user is missing
    with pytest.raises(SaslAuthenticationError) as info:
        _exchange(ScramServer(SCRAM_SHA_256, store), "nobody", "x", SCRAM_SHA_256)
    assert str(info.value) == scram_failed(SCRAM_SHA_256)


def test_scram_final_with_a_wrong_nonce_or_binding_fails(store):
    client = ScramClient("alice", "alice-secret", SCRAM_SHA_256)
    server = ScramServer(SCRAM_SHA_256, store)
    client.process_server_first_message(server.evaluate(client.first_message()))
    final = client.final_message()
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(final.replace(b"c=biws", b"c=eSws"))  # claims channel binding "y,,"
    server = ScramServer(SCRAM_SHA_256, store)
    client = ScramClient("alice", "alice-secret", SCRAM_SHA_256)
    client.process_server_first_message(server.evaluate(client.first_message()))
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(client.final_message().replace(b",r=", b",r=x"))


@pytest.mark.parametrize("first", [
    b"y,,n=alice,r=abc",                # client supports channel binding: none offered, refused
    b"p=tls-unique,,n=alice,r=abc",     # channel binding requested
    b"n,a=bob,n=alice,r=abc",           # authorization id other than the user
    b"n,,n=alice,r=abc,tokenauth=true",  # delegation token
    b"n,,n=alice,r=a,bc",               # nonce with a comma
    b"n,,r=abc,n=alice",                # attributes out of order
    b"n,,n=al=ice,r=abc",               # bad saslname escape
    b"n,,m=ext,n=alice,r=abc",
    b"",
    b"\xff\xfe",
])
def test_bad_client_first_messages_are_refused(store, first):
    with pytest.raises(SaslAuthenticationError):
        ScramServer(SCRAM_SHA_256, store).evaluate(first)


def _proof_client_final(user_saslname: str, password: str, gs2: str, server: ScramServer) -> bytes:
    """RFC 5802 client side written out (for a gs2 header kafka-python never sends)."""
    import hashlib
    import hmac

    bare = f"n={user_saslname},r=clientnonce"
    server_first = server.evaluate((gs2 + bare).encode()).decode()
    attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
    sp = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(sp, b"Client Key", hashlib.sha256).digest()
    stored = hashlib.sha256(client_key).digest()
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={attrs['r']}"
    auth = f"{bare},{server_first},{without_proof}".encode()
    sig = hmac.new(stored, auth, hashlib.sha256).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_saslname_escapes_and_matching_authzid(tmp_path):
    s = CredentialStore(str(tmp_path / "c.json"))
    s.set_user("a,b=c", "pw")
    server = ScramServer(SCRAM_SHA_256, s)
    server.evaluate(_proof_client_final("a=2Cb=3Dc", "pw", "n,a=a=2Cb=3Dc,", server))
    assert server.complete and server.username == "a,b=c"
    server = ScramServer(SCRAM_SHA_256, s)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(_proof_client_final("a=2Cb=3Dc", "wrong", "n,,", server))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.binary(max_size=200), final=st.binary(max_size=200))
def test_scram_server_only_raises_authentication_errors(store, first, final):
    server = ScramServer(SCRAM_SHA_256, store)
    try:
        server.evaluate(first)
        server.evaluate(final)
    except SaslAuthenticationError:
        return
    pytest.fail("random bytes authenticated")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.text(max_size=80))
def test_scram_final_mutations_never_authenticate(store, tail):
    client = ScramClient("alice", "alice-secret", SCRAM_SHA_256)
    server = ScramServer(SCRAM_SHA_256, store)
    client.process_server_first_message(server.evaluate(client.first_message()))
    good = client.final_message()
    bad = good[: len(good) // 2] + tail.encode("utf-8")
    if bad == good:
        return
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(bad)


# -- PLAIN ----------------------------------------------------------------------------------------------
def test_plain_checks_the_password_against_scram_credentials(store):
    server = PlainServer(store)
    assert server.evaluate(b"\0alice\0alice-secret") == b"" and server.complete and server.username == "alice"
    assert PlainServer(store).evaluate(b"alice\0alice\0alice-secret") == b""  # authzid == user
    assert PlainServer(store).evaluate(b"\0bob\0b0b") == b""  # only a SCRAM-SHA-512 credential


@pytest.mark.parametrize("token,message", [
    (b"\0alice\0wrong", PLAIN_FAILED),
    (b"\0nobody\0x", PLAIN_FAILED),
    (b"carol\0alice\0alice-secret", "Authentication failed: Client requested an authorization id that is "
                                    "different from username"),
    (b"alice\0alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"\0\0pw", "Authentication failed: username not specified"),
    (b"\0alice\0", "Authentication failed: password not specified"),
    (b"\0alice\xff\0x", "Invalid PLAIN token: not UTF-8"),
])
def test_plain_failures(store, token, message):
    with pytest.raises(SaslAuthenticationError) as info:
        PlainServer(store).evaluate(token)
    assert str(info.value) == message


# -- the store ----------------------------------------------------------------------------------------
def test_store_file_holds_no_password_and_is_private(store):
    text = open(store.path).read()
    assert "alice-secret" not in text and "b0b" not in text
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    doc = json.loads(text)
    assert doc["version"] == 1 and set(doc["users"]["alice"]) == {SCRAM_SHA_256, SCRAM_SHA_512}


def test_store_sees_changes_made_by_another_writer(store):
    reader = CredentialStore(store.path)
    assert set(reader.users()) == {"alice", "bob"}
    CredentialStore(store.path).set_user("carol", "c")
    assert "carol" in reader.users()
    assert reader.check_password("carol", "c")
    CredentialStore(store.path).delete_user("carol")
    assert "carol" not in reader.users()


def test_a_corrupt_file_keeps_the_last_good_view(store):
    reader = CredentialStore(store.path)
    assert reader.check_password("alice", "alice-secret")
    with open(store.path, "w") as fh:
        fh.write("{not json")
    assert reader.check_password("alice", "alice-secret")
    with pytest.raises(CredentialsError):
        CredentialStore(store.path).set_user("x", "y")  # the writer refuses to overwrite a bad file


@pytest.mark.parametrize("iterations", [4095, 16385])
def test_iterations_are_bounded_like_kafka(tmp_path, iterations):
    with pytest.raises(CredentialsError):
        CredentialStore(str(tmp_path / "c.json")).set_user("a", "b", iterations=iterations)


def test_delete_one_mechanism(store):
    store.delete_user("alice", [SCRAM_SHA_512])
    assert store.users()["alice"] == [(SCRAM_SHA_256, 4096)]
    assert not store.delete_user("nobody")


# -- the start-up warning for PLAIN without TLS ---------------------------------------------------

@pytest.mark.parametrize("listeners, mechanisms, warned", [
    ("SASL_PLAINTEXT://127.0.0.1:9093", "PLAIN,SCRAM-SHA-256", ["SASL_PLAINTEXT"]),
    ("SASL_PLAINTEXT://127.0.0.1:9093", "SCRAM-SHA-256,SCRAM-SHA-512", None),
    ("PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093", "PLAIN", ["SASL_PLAINTEXT"]),
])
def test_plain_on_a_clear_text_sasl_listener_is_warned_at_start(tmp_path, listeners, mechanisms, warned):
    from structlog.testing import capture_logs

    from sundial.broker.security import SecurityManager
    from sundial.config.broker import BrokerConfig

    cfg = BrokerConfig({"listeners": listeners, "sasl.enabled.mechanisms": mechanisms})
    with capture_logs() as logs:
        SecurityManager(cfg.sasl, cfg.listeners, str(tmp_path))
    found = [e for e in logs if e["event"] == "sasl_plain_without_tls"]
    if warned is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0]["log_level"] == "warning"
        assert found[0]["listeners"] == warned

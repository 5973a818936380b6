"""TLS contexts from Kafka's ssl.* keys and certificate principals (broker/security.py).

Handshakes run in memory (``ssl.MemoryBIO``) between the broker's context and a client
context; the expected principal comes from ``openssl x509 -nameopt RFC2253``, an
independent rendering of the subject.
"""

from __future__ import annotations

import ssl
import subprocess

import pytest
from support.pki import KEY_PASSWORD, make_pki, openssl_available

from sundial.broker.security import build_server_ssl_context, subject_dn
from sundial.config.components import SslConfig
from sundial.config import BrokerConfig, ConfigError

pytestmark = pytest.mark.skipif(not openssl_available(), reason="needs the openssl command")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def cfg(**kv) -> SslConfig:
    """The typed ssl.* view of a broker with one SSL listener and ``kv`` set."""
    return BrokerConfig({"listeners": "SSL://127.0.0.1:0", **kv}).ssl


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext):
    """Run a TLS handshake in memory; returns the server-side SSLObject (raises on failure)."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, obj, out, peer_in in (("c", client, c_out, s_in), ("s", server, s_out, c_in)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            data = out.read()
            if data:
                peer_in.write(data)
        if all(done.values()):
            # TLS 1.3: the server's verdict on the client certificate arrives after the client "finished"
            client.write(b"x")
            s_in.write(c_out.read())
            assert server.read(1) == b"x"
            return server
    raise AssertionError("handshake did not finish")


def client_ctx(pki, cert=None, key=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def rfc2253(cert: str) -> str:
    out = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-subject", "-nameopt", "RFC2253"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return out.split("=", 1)[1]


def test_server_certificate_is_verified_by_clients(pki):
    ctx = build_server_ssl_context(cfg(**{"ssl.keystore.location": pki.server_keystore}))
    server = handshake(ctx, client_ctx(pki))
    assert server.version() in ("TLSv1.2", "TLSv1.3")
    assert server.getpeercert() is None or server.getpeercert() == {}


def test_encrypted_key_with_ssl_key_password(pki):
    ctx = build_server_ssl_context(cfg(**{"ssl.keystore.location": pki.server_keystore_encrypted,
                                          "ssl.key.password": KEY_PASSWORD}))
    handshake(ctx, client_ctx(pki))
    with pytest.raises(ConfigError):
        build_server_ssl_context(cfg(**{"ssl.keystore.location": pki.server_keystore_encrypted,
                                        "ssl.key.password": "wrong"}))


def test_a_truststore_password_is_refused_for_pem_as_kafka_refuses_it(pki):
    with pytest.raises(ConfigError, match="trust store password cannot be specified for PEM"):
        build_server_ssl_context(cfg(**{"ssl.keystore.location": pki.server_keystore,
                                        "ssl.truststore.location": pki.ca, "ssl.truststore.password": "secret"}))


def test_required_client_auth_gives_the_subject_dn_as_principal(pki):
    ctx = build_server_ssl_context(cfg(**{"ssl.keystore.location": pki.server_keystore,
                                          "ssl.truststore.location": pki.ca, "ssl.client.auth": "required"}))
    server = handshake(ctx, client_ctx(pki, pki.alice_cert, pki.alice_key))
    dn = subject_dn(server.getpeercert())
    assert dn == rfc2253(pki.alice_cert) == "CN=alice,OU=eng,O=Sundial Test"
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client_ctx(pki))  # no certificate
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client_ctx(pki, pki.mallory_cert, pki.mallory_key))  # signed by an unknown CA


def test_requested_client_auth_accepts_clients_without_a_certificate(pki):
    ctx = build_server_ssl_context(cfg(**{"ssl.keystore.location": pki.server_keystore,
                                          "ssl.truststore.location": pki.ca, "ssl.client.auth": "requested"}))
    assert not handshake(ctx, client_ctx(pki)).getpeercert()
    assert subject_dn(handshake(ctx, client_ctx(pki, pki.alice_cert, pki.alice_key)).getpeercert())


def test_tls_versions_follow_ssl_enabled_protocols(pki):
    ctx = build_server_ssl_context(cfg(**{"ssl.keystore.location": pki.server_keystore,
                                          "ssl.enabled.protocols": "TLSv1.3"}))
    client = client_ctx(pki)
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client)
    assert handshake(ctx, client_ctx(pki)).version() == "TLSv1.3"


@pytest.mark.parametrize("settings", [
    {},                                                             # no keystore
    {"ssl.keystore.location": "/nonexistent.pem"},
    {"ssl.keystore.location": "KEYSTORE", "ssl.client.auth": "required"},  # no truststore
    {"ssl.keystore.location": "KEYSTORE", "ssl.enabled.protocols": "SSLv3"},
    {"ssl.keystore.location": "KEYSTORE", "ssl.keystore.type": "JKS"},
    {"ssl.keystore.location": "KEYSTORE", "ssl.cipher.suites": "NOT-A-CIPHER"},
    {"ssl.keystore.location": "KEYSTORE", "ssl.truststore.location": "/nonexistent-ca.pem"},
])
def test_bad_settings_are_config_errors(pki, settings):
    settings = {k: (pki.server_keystore if v == "KEYSTORE" else v) for k, v in settings.items()}
    with pytest.raises(ConfigError):
        build_server_ssl_context(cfg(**settings))


@pytest.mark.parametrize("subject,expected", [
    (((("commonName", "alice"),),), "CN=alice"),
    (((("countryName", "US"),), (("organizationName", "Acme, Inc."),), (("commonName", "bob"),)),
     "CN=bob,O=Acme\\, Inc.,C=US"),
    (((("commonName", "#lead"),),), "CN=\\#lead"),
    (((("commonName", "a+b=c;d<e>\"f\\"),),), "CN=a\\+b=c\\;d\\<e\\>\\\"f\\\\"),
    (((("organizationalUnitName", "x"), ("commonName", "y")),), "OU=x+CN=y"),
    (((("domainComponent", "com"),), (("domainComponent", "example"),), (("userId", "u1"),)),
     "UID=u1,DC=example,DC=com"),
])
def test_subject_dn_rfc2253(subject, expected):
    assert subject_dn({"subject": subject}) == expected


def test_no_subject_means_no_principal():
    assert subject_dn({}) is None and subject_dn(None) is None

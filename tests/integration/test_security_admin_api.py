"""ACLs and SCRAM users through the admin API, with kafka-python's and confluent-kafka's admin clients.

One daemon with the ACL authorizer on, a PLAINTEXT listener and a SASL_PLAINTEXT listener
(SCRAM). ``super.users`` are ``User:admin`` (SASL) and ``User:ANONYMOUS`` (the PLAINTEXT
listener, used by the raw-wire cases); ``User:alice`` (SASL) starts with no rules. Users
``admin`` and ``alice`` are added with ``sundial credentials`` before the start. A second
daemon has no authorizer.

What is checked:

* a rule created or deleted by either client is in force at the next request (alice is
  refused, allowed, refused again) and is the rule ``sundial acls list`` shows; a rule
  added by ``sundial acls`` is what DescribeAcls returns; rules survive a restart;
* a SCRAM user upserted by either client logs in at once, ``sundial credentials list``
  shows it, and after its deletion it no longer logs in; Kafka's per-user errors;
* without an authorizer the ACL APIs answer SECURITY_DISABLED and change nothing, while
  the SCRAM APIs work; without ALTER/DESCRIBE on the cluster every API answers
  CLUSTER_AUTHORIZATION_FAILED;
* on the raw wire: Kafka's INVALID_REQUEST messages per creation, filters with unknown
  elements, version 0 (LITERAL only), and DeleteAcls with overlapping filters.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException
from confluent_kafka import Producer as RdProducer
from confluent_kafka.admin import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient
from confluent_kafka.admin import ResourcePatternType, ResourceType as RdResourceType
from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism as RdScramMechanism
from confluent_kafka.admin import UserScramCredentialDeletion as RdDeletion
from confluent_kafka.admin import UserScramCredentialUpsertion as RdUpsertion
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType
from kafka.admin import ResourcePattern, ResourcePatternFilter, ResourceType, ScramMechanism
from kafka.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion
from kafka.errors import (
    ClusterAuthorizationFailedError,
    KafkaError,
    SaslAuthenticationFailedError,
    SecurityDisabledError,
    TopicAuthorizationFailedError,
)

from sundial.protocol import decode_response, encode_request
from sundial.protocol.api_keys import ApiKey

from .clients import connect_raw, read_frame
from .acl_support import acl_daemon, sundial_cli
from .conftest import DAEMONS_UNAVAILABLE

pytestmark = pytest.mark.skipif(DAEMONS_UNAVAILABLE is not None, reason=DAEMONS_UNAVAILABLE or "")

PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw"}
EVERYTHING = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                       ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    proc = acl_daemon(tmp_path_factory.mktemp("admin-api") / "broker", PASSWORDS, {
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "super.users": "User:admin;User:ANONYMOUS",
    }).start()
    yield proc
    assert proc.stop() == 0, proc.log_text()[-3000:]


def kp_admin(node, user: str | None = "admin", password: str | None = None,
             mechanism: str = "SCRAM-SHA-256") -> KafkaAdminClient:
    if user is None:
        return KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=30_000)
    return KafkaAdminClient(bootstrap_servers=node.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism=mechanism, sasl_plain_username=user,
                            sasl_plain_password=password or PASSWORDS[user], request_timeout_ms=30_000)


def rd_config(node, user: str = "admin", password: str | None = None, mechanism: str = "SCRAM-SHA-512") -> dict:
    return {"bootstrap.servers": node.sasl_bootstrap, "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password or PASSWORDS[user]}


def rd_admin(node, user: str = "admin") -> AdminClient:
    return AdminClient(rd_config(node, user))


def _rd_results(futures) -> dict:
    return {k: f.result() for k, f in futures.items()}


def _rd_error(fn) -> int:
    with pytest.raises(KafkaException) as info:
        fn()
    return info.value.args[0].code()


def alice_can_produce(node, topic: str) -> bool:
    p = RdProducer({**rd_config(node, "alice", mechanism="SCRAM-SHA-256"), "message.timeout.ms": 15000})
    outcome = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(30)
    assert outcome, "no delivery report"
    if outcome[0] is None:
        return True
    assert outcome[0].code() == RdKafkaError.TOPIC_AUTHORIZATION_FAILED, outcome[0]
    return False


def _topic(node) -> str:
    name = f"acl-{uuid.uuid4().hex[:8]}"
    with_admin = kp_admin(node)
    try:
        from kafka.admin import NewTopic
        with_admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        with_admin.close()
    return name


def test_acls_created_and_deleted_by_either_client_apply_at_once(node):
    topic = _topic(node)
    assert not alice_can_produce(node, topic)
    # kafka-python creates alice's producer rules (CreateAcls v3) ...
    kp = kp_admin(node)
    try:
        rules = [ACL("User:alice", "*", op, ACLPermissionType.ALLOW, ResourcePattern(ResourceType.TOPIC, topic))
                 for op in (ACLOperation.WRITE, ACLOperation.DESCRIBE)]
        assert kp.create_acls(rules) == {"succeeded": rules, "failed": []}
    finally:
        kp.close()
    assert alice_can_produce(node, topic)                  # in force for the very next request
    listed = sundial_cli(node.data_dir, "acls", "list", "--principal", "User:alice")
    assert f"ALLOW User:alice from host * to WRITE TOPIC LITERAL:{topic}" in listed
    # ... confluent-kafka (CreateAcls/DescribeAcls/DeleteAcls v2) sees them and deletes WRITE.
    rd = rd_admin(node)
    everything = AclBindingFilter(RdResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    found = rd.describe_acls(everything, request_timeout=30).result()
    assert AclBinding(RdResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                      AclOperation.WRITE, AclPermissionType.ALLOW) in found
    write = AclBindingFilter(RdResourceType.TOPIC, topic, ResourcePatternType.MATCH, "User:alice", None,
                             AclOperation.WRITE, AclPermissionType.ANY)
    deleted = _rd_results(rd.delete_acls([write], request_timeout=30))[write]
    assert [(b.name, b.operation) for b in deleted] == [(topic, AclOperation.WRITE)]
    assert not alice_can_produce(node, topic)
    # A rule from the offline command is what the API describes.
    sundial_cli(node.data_dir, "acls", "add", "--allow-principal", "User:alice", "--operation", "Write",
                "--topic", f"{topic}-", "--resource-pattern-type", "prefixed")
    kp = kp_admin(node, None)
    try:
        acls, error = kp.describe_acls(ACLFilter("User:alice", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                 ResourcePatternFilter(ResourceType.TOPIC, f"{topic}-x",
                                                                       ACLResourcePatternType.MATCH)))
    finally:
        kp.close()
    assert [(a.resource_pattern.resource_name, a.resource_pattern.pattern_type, a.operation) for a in acls] == [
        (f"{topic}-", ACLResourcePatternType.PREFIXED, ACLOperation.WRITE)]
    with open(os.path.join(node.data_dir, "acls.json")) as fh:
        stored = json.load(fh)["acls"]
    assert {"principal": "User:alice", "host": "*", "resource_type": "TOPIC", "pattern_type": "LITERAL",
            "resource_name": topic, "operation": "DESCRIBE", "permission": "ALLOW"} in stored


def test_scram_users_upserted_by_either_client_log_in_at_once(node):
    rd = rd_admin(node)
    upsert = RdUpsertion("frank", ScramCredentialInfo(RdScramMechanism.SCRAM_SHA_512, 8192), b"frank-pw")
    assert _rd_results(rd.alter_user_scram_credentials([upsert], request_timeout=30)) == {"frank": None}
    kp = kp_admin(node)
    try:
        assert kp.alter_user_scram_credentials([
            UserScramCredentialUpsertion("frank", ScramMechanism.SCRAM_SHA_256, "frank-pw-256")]) == {"frank": None}
        described = kp.describe_user_scram_credentials(["frank"])
    finally:
        kp.close()
    assert described == {"frank": {"error": None, "credential_infos": [
        {"mechanism": ScramMechanism.SCRAM_SHA_256, "iterations": 4096},
        {"mechanism": ScramMechanism.SCRAM_SHA_512, "iterations": 8192}]}}
    for mechanism, password in (("SCRAM-SHA-512", "frank-pw"), ("SCRAM-SHA-256", "frank-pw-256")):
        frank = kp_admin(node, "frank", password, mechanism)
        frank.list_topics()
        frank.close()
    assert "frank\tSCRAM-SHA-256 (iterations=4096), SCRAM-SHA-512 (iterations=8192)" in sundial_cli(
        node.data_dir, "credentials", "list")
    described = rd.describe_user_scram_credentials(["frank"], request_timeout=30)
    result = described.result() if hasattr(described, "result") else _rd_results(described)
    infos = sorted((i.mechanism, i.iterations) for i in result["frank"].scram_credential_infos)
    assert infos == [(RdScramMechanism.SCRAM_SHA_256, 4096), (RdScramMechanism.SCRAM_SHA_512, 8192)]
    assert _rd_results(rd.alter_user_scram_credentials(
        [RdDeletion("frank", RdScramMechanism.SCRAM_SHA_512)], request_timeout=30)) == {"frank": None}
    with pytest.raises((SaslAuthenticationFailedError, KafkaError)):
        kp_admin(node, "frank", "frank-pw", "SCRAM-SHA-512")
    kp = kp_admin(node)
    try:
        assert kp.alter_user_scram_credentials([
            UserScramCredentialDeletion("frank", ScramMechanism.SCRAM_SHA_512),
            UserScramCredentialUpsertion("gina", ScramMechanism.SCRAM_SHA_256, "pw", iterations=1000),
            UserScramCredentialUpsertion("hal", ScramMechanism.SCRAM_SHA_256, "pw", iterations=20000),
            UserScramCredentialUpsertion("ivy", ScramMechanism.SCRAM_SHA_256, "pw"),
            UserScramCredentialUpsertion("ivy", ScramMechanism.SCRAM_SHA_512, "pw"),
        ]) == {"frank": "Attempt to delete a user credential that does not exist",
               "gina": "Too few iterations", "hal": "Too many iterations",
               "ivy": "A user credential cannot be altered twice in the same request"}
        assert kp.describe_user_scram_credentials(["nobody", "admin", "admin"]) == {
            "nobody": {"error": "Attempt to describe a user credential that does not exist: nobody",
                       "credential_infos": []},
            "admin": {"error": "Cannot describe SCRAM credentials for the same user twice in a single request: "
                               "admin", "credential_infos": []}}
        everyone = kp.describe_user_scram_credentials()
    finally:
        kp.close()
    assert set(everyone) == {"admin", "alice", "frank"}
    assert everyone["frank"]["credential_infos"] == [{"mechanism": ScramMechanism.SCRAM_SHA_256, "iterations": 4096}]


def test_admin_apis_need_alter_or_describe_on_the_cluster(node):
    kp = kp_admin(node, "alice")
    rule = ACL("User:alice", "*", ACLOperation.ALL, ACLPermissionType.ALLOW,
               ResourcePattern(ResourceType.TOPIC, "alice-owns"))
    try:
        assert kp.create_acls([rule])["failed"] == [ClusterAuthorizationFailedError]
        with pytest.raises(ClusterAuthorizationFailedError):
            kp.describe_acls(EVERYTHING)
        assert kp.delete_acls([EVERYTHING])[0][2] is ClusterAuthorizationFailedError
        # Per user, not for the request: librdkafka aborts on a request-level error here.
        assert kp.describe_user_scram_credentials() == {
            "": {"error": "Cluster authorization failed.", "credential_infos": []}}
        assert kp.describe_user_scram_credentials(["admin"]) == {
            "admin": {"error": "Cluster authorization failed.", "credential_infos": []}}
        assert kp.alter_user_scram_credentials([
            UserScramCredentialUpsertion("alice", ScramMechanism.SCRAM_SHA_256, "new")]) == {
            "alice": "Cluster authorization failed."}
    finally:
        kp.close()
    rd = rd_admin(node, "alice")
    assert _rd_error(lambda: rd.describe_user_scram_credentials(request_timeout=30).result()) == \
        RdKafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert _rd_error(lambda: _rd_results(rd.describe_user_scram_credentials(["admin"], request_timeout=30))) == \
        RdKafkaError.CLUSTER_AUTHORIZATION_FAILED
    # DESCRIBE on the cluster lets alice describe, not change.
    admin = kp_admin(node)
    try:
        admin.create_acls([ACL("User:alice", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                               ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"))])
    finally:
        admin.close()
    kp = kp_admin(node, "alice")
    try:
        acls, _ = kp.describe_acls(EVERYTHING)
        assert any(a.resource_pattern.resource_type == ResourceType.CLUSTER for a in acls)
        assert kp.create_acls([rule])["failed"] == [ClusterAuthorizationFailedError]
        assert "alice" in kp.describe_user_scram_credentials()
    finally:
        kp.close()


def test_without_an_authorizer_acl_apis_are_security_disabled_and_scram_works(broker_factory):
    plain = broker_factory().start()
    kp = KafkaAdminClient(bootstrap_servers=plain.bootstrap, request_timeout_ms=30_000)
    rule = ACL("User:x", "*", ACLOperation.READ, ACLPermissionType.ALLOW, ResourcePattern(ResourceType.TOPIC, "t"))
    try:
        assert kp.create_acls([rule])["failed"] == [SecurityDisabledError]
        with pytest.raises(SecurityDisabledError):
            kp.describe_acls(EVERYTHING)
        assert kp.delete_acls([EVERYTHING])[0][2] is SecurityDisabledError
        assert kp.alter_user_scram_credentials([
            UserScramCredentialUpsertion("zoe", ScramMechanism.SCRAM_SHA_512, "pw")]) == {"zoe": None}
        assert kp.describe_user_scram_credentials() == {"zoe": {"error": None, "credential_infos": [
            {"mechanism": ScramMechanism.SCRAM_SHA_512, "iterations": 4096}]}}
    finally:
        kp.close()
    rd = AdminClient({"bootstrap.servers": plain.bootstrap})
    binding = AclBinding(RdResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:x", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    assert _rd_error(lambda: _rd_results(rd.create_acls([binding], request_timeout=30))) == \
        RdKafkaError.SECURITY_DISABLED
    assert not os.path.exists(os.path.join(plain.data_dir, "acls.json"))
    assert "zoe\tSCRAM-SHA-512" in sundial_cli(plain.data_dir, "credentials", "list")


# -- the raw wire -----------------------------------------------------------------------------------
def _call(node, api_key: int, version: int, body: dict):
    s = connect_raw(node.host, node.port)  # PLAINTEXT: User:ANONYMOUS, a super user here
    try:
        s.sendall(encode_request(api_key, version, 9, "raw-admin", body))
        return decode_response(api_key, version, read_frame(s))[1]
    finally:
        s.close()


def _creation(name="raw-t", rtype=2, pattern=3, principal="User:raw", op=3, perm=3):
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": "*", "operation": op, "permission_type": perm}


def test_create_acls_refuses_each_bad_binding_with_kafkas_message(node):
    answer = _call(node, ApiKey.CREATE_ACLS, 1, {"creations": [
        _creation(name="my-cluster", rtype=4), _creation(name=""), _creation(rtype=1), _creation(pattern=2),
        _creation(op=1), _creation(perm=1), _creation(principal="raw"), _creation(rtype=7, op=13),
        _creation(name="raw-ok")]})
    assert [(r.error_code, r.error_message) for r in answer.results] == [
        (42, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (42, "Invalid empty resource name"),
        (42, "Invalid resourceType ANY"),
        (42, "Invalid patternType MATCH"),
        (42, "Invalid operation ANY"),
        (42, "Invalid permissionType ANY"),
        (42, "Could not parse principal from `raw` (no colon is present separating the principal type from "
             "the principal name)"),
        (0, None), (0, None)]


def test_describe_and_delete_filters_on_the_wire(node):
    prefix = f"raw-{uuid.uuid4().hex[:6]}"
    answer = _call(node, ApiKey.CREATE_ACLS, 3, {"creations": [
        _creation(name=prefix, principal="User:wire"), _creation(name=f"{prefix}-", pattern=4, principal="User:wire"),
        _creation(name="*", principal="User:wire", op=4)]})
    assert [r.error_code for r in answer.results] == [0, 0, 0]
    unknown = _call(node, ApiKey.DESCRIBE_ACLS, 1, {
        "resource_type_filter": 0, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    assert (unknown.error_code, unknown.error_message) == (42, "Unknown patternFilter.")
    # Version 0 has no pattern type: LITERAL rules only.
    v0 = _call(node, ApiKey.DESCRIBE_ACLS, 0, {
        "resource_type_filter": 1, "resource_name_filter": None, "principal_filter": "User:wire",
        "host_filter": None, "operation": 1, "permission_type": 1})
    assert v0.error_code == 0
    assert sorted(r.resource_name for r in v0.resources) == sorted([prefix, "*"])
    # MATCH: every rule that applies to a name; two overlapping filters both report the rule.
    match = {"resource_type_filter": 2, "resource_name_filter": f"{prefix}-x", "pattern_type_filter": 2,
             "principal_filter": "User:wire", "host_filter": None, "operation": 1, "permission_type": 1}
    described = _call(node, ApiKey.DESCRIBE_ACLS, 3, match)
    assert sorted((r.resource_name, r.pattern_type) for r in described.resources) == [("*", 3), (f"{prefix}-", 4)]
    literal = dict(match, resource_name_filter=f"{prefix}-", pattern_type_filter=4)
    bad = dict(match, operation=0)
    deleted = _call(node, ApiKey.DELETE_ACLS, 3, {"filters": [match, literal, bad]})
    results = deleted.filter_results
    assert sorted(a.resource_name for a in results[0].matching_acls) == sorted(["*", f"{prefix}-"])
    assert [a.resource_name for a in results[1].matching_acls] == [f"{prefix}-"]
    assert (results[2].error_code, results[2].error_message) == (42, "Unknown entryFilter.")
    left = _call(node, ApiKey.DESCRIBE_ACLS, 3, dict(match, resource_type_filter=1, resource_name_filter=None,
                                                      pattern_type_filter=1))
    assert [(r.resource_name, r.pattern_type) for r in left.resources] == [(prefix, 3)]


def test_rules_and_users_survive_a_restart(node):
    kp = kp_admin(node, None)
    try:
        before = sorted(repr(a) for a in kp.describe_acls(EVERYTHING)[0])
    finally:
        kp.close()
    node.restart()
    kp = kp_admin(node, None)
    try:
        assert sorted(repr(a) for a in kp.describe_acls(EVERYTHING)[0]) == before
        assert {"admin", "alice"} <= set(kp.describe_user_scram_credentials())
    finally:
        kp.close()

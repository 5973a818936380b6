"""ACL decisions (broker/authorizer.py) against Kafka's AclAuthorizer rules, and the rules file."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.broker import authorizer as az
from sundial.broker.authorizer import (
    CLUSTER_NAME,
    AclError,
    AclOperation,
    AclRule,
    AclStore,
    Authorizer,
    PatternType,
    Permission,
    ResourceType,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
OP = AclOperation


def make(tmp_path, rules, **kwargs) -> Authorizer:
    store = AclStore(str(tmp_path / "acls.json"))
    if rules:
        store.add(rules)
    return Authorizer(store, **kwargs)


def rule(principal, rtype, name, op, perm="ALLOW", host="*", pattern="LITERAL"):
    return AclRule.make(principal, rtype, name, op, perm, host, pattern)


def test_deny_by_default_and_allow_everyone_if_no_acl_found(tmp_path):
    a = make(tmp_path, [])
    assert not a.authorize("User:alice", "127.0.0.1", OP.READ, T, "orders")
    b = Authorizer(a.store, allow_everyone_if_no_acl_found=True)
    assert b.authorize("User:alice", "127.0.0.1", OP.READ, T, "orders")


def test_allow_everyone_applies_only_to_resources_without_acls(tmp_path):
    a = make(tmp_path, [rule("User:bob", T, "orders", "READ")], allow_everyone_if_no_acl_found=True)
    assert not a.authorize("User:alice", "h", OP.READ, T, "orders")  # orders has an ACL: not for alice
    assert a.authorize("User:alice", "h", OP.READ, T, "payments")    # no ACL at all


def test_super_users_bypass_everything(tmp_path):
    a = make(tmp_path, [rule("User:admin", T, "*", "ALL", "DENY")], super_users="User:admin; User:ops")
    assert a.authorize("User:admin", "h", OP.DELETE, T, "x")
    assert a.authorize("User:ops", "h", OP.ALTER_CONFIGS, C, CLUSTER_NAME)
    assert not a.authorize("User:other", "h", OP.READ, T, "x")


def test_deny_wins_over_allow(tmp_path):
    a = make(tmp_path, [rule("User:alice", T, "orders", "ALL"), rule("User:alice", T, "orders", "WRITE", "DENY")])
    assert a.authorize("User:alice", "h", OP.READ, T, "orders")
    assert not a.authorize("User:alice", "h", OP.WRITE, T, "orders")


def test_wildcard_principal_host_and_resource(tmp_path):
    a = make(tmp_path, [rule("User:*", T, "*", "READ"), rule("User:*", T, "secret", "READ", "DENY", host="10.0.0.9")])
    assert a.authorize("User:anyone", "10.0.0.1", OP.READ, T, "whatever")
    assert a.authorize("User:anyone", "10.0.0.1", OP.READ, T, "secret")
    assert not a.authorize("User:anyone", "10.0.0.9", OP.READ, T, "secret")
    assert not a.authorize("User:anyone", "10.0.0.1", OP.WRITE, T, "whatever")


def test_host_specific_allow(tmp_path):
    a = make(tmp_path, [rule("User:alice", T, "orders", "READ", host="127.0.0.1")])
    assert a.authorize("User:alice", "127.0.0.1", OP.READ, T, "orders")
    assert not a.authorize("User:alice", "10.1.1.1", OP.READ, T, "orders")


@pytest.mark.parametrize("granted,implied", [
    ("READ", "DESCRIBE"), ("WRITE", "DESCRIBE"), ("DELETE", "DESCRIBE"), ("ALTER", "DESCRIBE"),
    ("ALTER_CONFIGS", "DESCRIBE_CONFIGS"),
])
def test_implied_operations(tmp_path, granted, implied):
    a = make(tmp_path, [rule("User:alice", T, "orders", granted)])
    assert a.authorize("User:alice", "h", OP[implied], T, "orders")
    # and not the other way round
    b = make(tmp_path / "b", [rule("User:alice", T, "orders", implied)])
    assert not b.authorize("User:alice", "h", OP[granted], T, "orders")


def test_prefixed_patterns(tmp_path):
    a = make(tmp_path, [rule("User:alice", T, "sales-", "READ", pattern="PREFIXED"),
                        rule("User:alice", T, "sales-secret", "READ", "DENY", pattern="PREFIXED")])
    assert a.authorize("User:alice", "h", OP.READ, T, "sales-eu")
    assert not a.authorize("User:alice", "h", OP.READ, T, "sales-secret-2")
    assert not a.authorize("User:alice", "h", OP.READ, T, "sale")


def test_resource_types_are_separate(tmp_path):
    a = make(tmp_path, [rule("User:alice", G, "orders", "READ")])
    assert a.authorize("User:alice", "h", OP.READ, G, "orders")
    assert not a.authorize("User:alice", "h", OP.READ, T, "orders")


def test_authorize_any_for_idempotent_write(tmp_path):
    a = make(tmp_path, [rule("User:p", T, "orders", "WRITE"), rule("User:q", T, "pre-", "WRITE", pattern="PREFIXED"),
                        rule("User:r", T, "x", "WRITE"), rule("User:r", T, "x", "WRITE", "DENY"),
                        rule("User:s", T, "*", "WRITE"), rule("User:s", T, "*", "WRITE", "DENY")])
    assert a.authorize_any("User:p", "h", OP.WRITE, T)
    assert a.authorize_any("User:q", "h", OP.WRITE, T)
    assert not a.authorize_any("User:r", "h", OP.WRITE, T)  # its only allow is denied
    assert not a.authorize_any("User:s", "h", OP.WRITE, T)  # wildcard deny
    assert not a.authorize_any("User:nobody", "h", OP.WRITE, T)


def test_rule_validation():
    with pytest.raises(AclError):
        AclRule.make("alice", T, "x", "READ")  # no principal type
    with pytest.raises(AclError):
        AclRule.make("User:a", T, "x", "FLY")
    with pytest.raises(AclError):
        AclRule.make("User:a", C, "other-cluster", "ALTER")
    with pytest.raises(AclError):
        AclRule.make("User:a", T, "*", "READ", pattern_type="PREFIXED")
    r = AclRule.make("User:a", "topic", "x", "describe-configs")
    assert r.operation == OP.DESCRIBE_CONFIGS and r.resource_type == T
    assert az.parse_operation("IdempotentWrite") == OP.IDEMPOTENT_WRITE


def test_rules_file_round_trip_and_live_reload(tmp_path, monkeypatch):
    monkeypatch.setattr(az, "REFRESH_INTERVAL_S", 0.0)
    a = make(tmp_path, [rule("User:alice", T, "orders", "READ")])
    assert a.authorize("User:alice", "h", OP.READ, T, "orders")
    doc = json.loads(open(a.store.path).read())
    assert doc == {"version": 1, "acls": [{"principal": "User:alice", "host": "*", "resource_type": "TOPIC",
                                           "pattern_type": "LITERAL", "resource_name": "orders",
                                           "operation": "READ", "permission": "ALLOW"}]}
    other = AclStore(a.store.path)
    other.add([rule("User:bob", T, "orders", "READ")])
    time.sleep(0.01)
    assert a.authorize("User:bob", "h", OP.READ, T, "orders")
    other.remove(lambda r: r.principal == "User:alice")
    assert not a.authorize("User:alice", "h", OP.READ, T, "orders")
    with open(a.store.path, "w") as fh:
        fh.write("[broken")
    assert a.authorize("User:bob", "h", OP.READ, T, "orders")  # a bad file keeps the last good rules


# -- an independent oracle over random rule sets ---------------------------------------------------------
PRINCIPALS = ["User:a", "User:b", "User:*"]
HOSTS = ["*", "1.1.1.1", "2.2.2.2"]
NAMES = ["t", "tx", "u", "*"]
OPS = [OP.READ, OP.WRITE, OP.DESCRIBE, OP.ALL, OP.ALTER, OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS]

rules_st = st.lists(st.builds(
    lambda p, h, n, op, perm, pat: (p, h, n, op, perm, pat),
    st.sampled_from(PRINCIPALS), st.sampled_from(HOSTS), st.sampled_from(NAMES), st.sampled_from(OPS),
    st.sampled_from(["ALLOW", "DENY"]), st.sampled_from(["LITERAL", "PREFIXED"])), max_size=6)


def oracle(rules, principal, host, op, name, allow_everyone):
    """Kafka's AclAuthorizer.authorize written as a literal transcription of its steps."""
    def resource_match(r):
        n, pat = r[2], r[5]
        return (n == "*" or n == name) if pat == "LITERAL" else name.startswith(n)
    matching = [r for r in rules if resource_match(r)]
    if not matching:
        return allow_everyone
    def who(r):
        return r[0] in (principal, "User:*") and r[1] in ("*", host)
    if any(r[4] == "DENY" and who(r) and r[3] in (op, OP.ALL) for r in matching):
        return False
    implied = {OP.DESCRIBE: {OP.DESCRIBE, OP.READ, OP.WRITE, OP.DELETE, OP.ALTER},
               OP.DESCRIBE_CONFIGS: {OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS}}.get(op, {op})
    return any(r[4] == "ALLOW" and who(r) and (r[3] == OP.ALL or r[3] in implied) for r in matching)


@settings(max_examples=300, deadline=None)
@given(rules=rules_st, principal=st.sampled_from(["User:a", "User:b"]), host=st.sampled_from(HOSTS[1:]),
       op=st.sampled_from([OP.READ, OP.WRITE, OP.DESCRIBE, OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS, OP.DELETE]),
       name=st.sampled_from(["t", "tx", "u", "v"]), allow_everyone=st.booleans())
def test_matches_oracle(tmp_path_factory, rules, principal, host, op, name, allow_everyone):
    valid = [r for r in rules if not (r[5] == "PREFIXED" and r[2] == "*")]
    store = AclStore(str(tmp_path_factory.mktemp("acl") / "acls.json"))
    if valid:
        store.add([AclRule.make(p, T, n, o, perm, h, pat) for p, h, n, o, perm, pat in valid])
    a = Authorizer(store, allow_everyone_if_no_acl_found=allow_everyone)
    assert a.authorize(principal, host, op, T, name) == oracle(valid, principal, host, op, name, allow_everyone)


def test_enums_match_kafka_codes():
    assert (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER) == (2, 3, 4)
    assert (OP.READ, OP.WRITE, OP.DESCRIBE, OP.IDEMPOTENT_WRITE) == (3, 4, 8, 12)
    assert (PatternType.LITERAL, PatternType.PREFIXED, Permission.DENY, Permission.ALLOW) == (3, 4, 2, 3)

"""Kafka's ACL binding filters, and concurrent writers of the ACL and credential stores."""

from __future__ import annotations

import threading

import pytest

from sundial.broker.authorizer import AclError, AclFilter, AclRule, AclStore
from sundial.broker.sasl import CredentialStore, credential_from_salted_password, make_credential, salted_password

LIT = AclRule.make("User:a", "TOPIC", "orders", "READ")
STAR = AclRule.make("User:b", "TOPIC", "*", "WRITE", "DENY")
PRE = AclRule.make("User:a", "TOPIC", "ord", "READ", pattern_type="PREFIXED")
GROUP = AclRule.make("User:a", "GROUP", "orders", "READ")
RULES = [LIT, STAR, PRE, GROUP]


def f(rt=1, name=None, pattern=1, principal=None, host=None, op=1, perm=1) -> AclFilter:
    return AclFilter.from_codes(rt, name, pattern, principal, host, op, perm)


@pytest.mark.parametrize("flt, expected", [
    (f(), RULES),
    (f(rt=2), [LIT, STAR, PRE]),
    (f(rt=2, name="orders"), [LIT]),                          # ANY pattern: exact names
    (f(rt=2, name="orders", pattern=2), [LIT, STAR, PRE]),     # MATCH: what applies to "orders"
    (f(rt=2, name="other", pattern=2), [STAR]),
    (f(pattern=4), [PRE]),
    (f(pattern=3, name="*"), [STAR]),
    (f(principal="User:a", op=3), [LIT, PRE, GROUP]),
    (f(perm=2), [STAR]),
    (f(host="10.0.0.1"), []),
])
def test_filter_matches_as_kafka(flt, expected):
    assert [r for r in RULES if flt.matches(r)] == expected


@pytest.mark.parametrize("codes, message", [
    ({"rt": 0}, "Unknown patternFilter."), ({"rt": 99}, "Unknown patternFilter."),
    ({"pattern": 0}, "Unknown patternFilter."), ({"op": 0}, "Unknown entryFilter."),
    ({"perm": 0}, "Unknown entryFilter."), ({"perm": 7}, "Unknown entryFilter."),
])
def test_filter_with_unknown_elements(codes, message):
    with pytest.raises(AclError, match=message):
        f(**codes)


def test_concurrent_writers_lose_no_rule(tmp_path):
    path = str(tmp_path / "acls.json")

    def add(i):
        AclStore(path).add([AclRule.make(f"User:u{i}", "TOPIC", f"t{i}", "READ")])

    threads = [threading.Thread(target=add, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.principal for r in AclStore(path).rules(force=True)) == sorted(f"User:u{i}" for i in range(16))
    removed = AclStore(path).remove_matching([f(principal="User:u1"), f(principal="User:u1", rt=2)])
    assert [[r.principal for r in group] for group in removed] == [["User:u1"], ["User:u1"]]
    assert len(AclStore(path).rules(force=True)) == 15


def test_concurrent_credential_writers_and_salted_password_upsert(tmp_path):
    path = str(tmp_path / "credentials.json")
    threads = [threading.Thread(target=lambda i=i: CredentialStore(path).set_user(f"u{i}", "pw", ["SCRAM-SHA-256"]))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = CredentialStore(path)
    assert sorted(store.users()) == sorted(f"u{i}" for i in range(8))
    salt = b"0123456789abcdef"
    from_api = credential_from_salted_password("SCRAM-SHA-512", salt,
                                               salted_password("SCRAM-SHA-512", "secret", salt, 4096), 4096)
    assert from_api == make_credential("SCRAM-SHA-512", "secret", salt=salt)
    store.update(lambda users: (users.setdefault("api", {}).update({"SCRAM-SHA-512": from_api}), True))
    assert store.check_password("api", "secret") and not store.check_password("api", "wrong")
    assert store.delete_user("api") and "api" not in CredentialStore(path).users()

"""SASL mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and the credentials store.

Pure logic: no sockets, no asyncio. :mod:`broker.security` drives one mechanism
object per connection; :mod:`broker.handlers.sasl` carries its tokens over
SaslHandshake/SaslAuthenticate; ``sundial credentials`` edits the store offline.

**SCRAM** (RFC 5802, RFC 7677), as Kafka's ``ScramSaslServer`` does it:

* client-first ``gs2-header client-first-bare`` with gs2 header ``n,,`` or
  ``n,a=<authzid>,`` (channel binding ``y``/``p`` is refused: Kafka offers none);
  ``client-first-bare = n=<saslname>,r=<cnonce>[,ext...]``; saslname escapes ``,``
  as ``=2C`` and ``=`` as ``=3D``. An authzid other than the user name fails, and so
  does the ``tokenauth=true`` extension (no delegation tokens here).
* server-first ``r=<cnonce><snonce>,s=<base64 salt>,i=<iterations>``.
* client-final ``c=<base64 gs2-header>,r=<nonce>[,ext...],p=<base64 proof>``; the
  proof is checked as ``H(proof XOR HMAC(StoredKey, AuthMessage)) == StoredKey``
  with ``AuthMessage = client-first-bare "," server-first "," client-final-without-proof``.
* server-final ``v=<base64 HMAC(ServerKey, AuthMessage)>``.

The client-final nonce must *end with* the nonce of server-first, as Kafka checks
it: librdkafka 2.0.x (Debian's kcat 1.7.1) sends the client nonce twice in front of
it. The proof covers the message as sent, so nothing is weakened.

Passwords are used as UTF-8 bytes without SASLprep, exactly like Kafka's
``ScramFormatter`` (and librdkafka and kafka-python), so a credential made here
works with every client. An unknown user is answered with a server-first message
built from a salt derived from the user name and a per-store secret, so the
exchange gives no hint whether the user exists; it fails at the proof.

**PLAIN** (RFC 4616): ``[authzid] NUL authcid NUL passwd``. Sundial keeps no
plaintext passwords: a PLAIN password is checked by deriving the user's SCRAM
``StoredKey`` from it (PBKDF2 with the stored salt and iteration count) and
comparing in constant time. That costs one PBKDF2 per PLAIN login (a few ms at
4096 iterations), which the handler runs off the event loop.

**Credentials store** (``sundial.credentials.file``, default
``<first log dir>/credentials.json``), JSON, written atomically (temp file, fsync,
rename) with mode 0600::

    {"version": 1,
     "secret": "<base64, 32 random bytes: seeds fake salts for unknown users>",
     "users": {"alice": {"SCRAM-SHA-256": {"salt": "<b64>", "iterations": 4096,
                                            "stored_key": "<b64>", "server_key": "<b64>"},
                         "SCRAM-SHA-512": {...}}}}

Only salted, derived keys are stored (Kafka's ``ScramCredential``). The broker
re-reads the file when its modification time or size changes, so users added with
``sundial credentials`` while the broker runs can log in at once.

Invariants: every failure raises :class:`SaslAuthenticationError` whose message is
what the client sees (Kafka's wording); no partial state survives a failure (the
connection is closed after the answer).

**Failure log limit** (:class:`FailureLogLimit`): a client that reconnects with a wrong
password fails every few hundred ms. The first failure from a client address is logged,
then at most one line per address per interval, carrying the number of failures from that
address that were not logged since the previous line (the metrics count every one).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass

import structlog

from sundial.storage.files import write_file_atomically

from .store_lock import update_lock

logger = structlog.get_logger(__name__)

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = {SCRAM_SHA_256: hashlib.sha256, SCRAM_SHA_512: hashlib.sha512}
ALL_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

#: Kafka's bounds on SCRAM iterations (``ScramMechanism.minIterations`` / ``maxIterations``).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 32
MAX_TOKEN_BYTES = 64 * 1024  # no legitimate SCRAM or PLAIN token comes close

STORE_VERSION = 1

PLAIN_FAILED = "Authentication failed: Invalid username or password"


def scram_failed(mechanism: str) -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class SaslAuthenticationError(Exception):
    """Authentication failed; the message is sent to the client (SASL_AUTHENTICATION_FAILED)."""


class CredentialsError(Exception):
    """The credentials store cannot be read or a credential request is invalid."""


# -- SCRAM primitives ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps for one user and mechanism (no password)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict:
        return {"salt": _b64(self.salt), "iterations": self.iterations,
                "stored_key": _b64(self.stored_key), "server_key": _b64(self.server_key)}

    @classmethod
    def from_json(cls, obj: dict) -> "ScramCredential":
        try:
            return cls(base64.b64decode(obj["salt"], validate=True), int(obj["iterations"]),
                       base64.b64decode(obj["stored_key"], validate=True),
                       base64.b64decode(obj["server_key"], validate=True))
        except (KeyError, TypeError, ValueError) as exc:
            raise CredentialsError(f"malformed SCRAM credential: {exc}") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _hmac(hash_fn, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_fn).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    hash_fn = SCRAM_MECHANISMS[mechanism]
    return hashlib.pbkdf2_hmac(hash_fn().name, password.encode("utf-8"), salt, iterations)


def make_credential(mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """Kafka's ``ScramFormatter.generateCredential``: salt, SaltedPassword, StoredKey, ServerKey."""
    if mechanism not in SCRAM_MECHANISMS:
        raise CredentialsError(f"unknown SCRAM mechanism {mechanism!r}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CredentialsError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {iterations}")
    hash_fn = SCRAM_MECHANISMS[mechanism]
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    sp = salted_password(mechanism, password, salt, iterations)
    client_key = _hmac(hash_fn, sp, b"Client Key")
    return ScramCredential(salt, iterations, hash_fn(client_key).digest(), _hmac(hash_fn, sp, b"Server Key"))


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """What AlterUserScramCredentials sends (salt, SaltedPassword) → the stored credential
    (Kafka's ``ScramFormatter``: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
    ServerKey = HMAC(SaltedPassword, "Server Key")); the password itself never reaches us."""
    hash_fn = SCRAM_MECHANISMS[mechanism]
    client_key = _hmac(hash_fn, salted_password, b"Client Key")
    return ScramCredential(bytes(salt), iterations, hash_fn(client_key).digest(),
                           _hmac(hash_fn, salted_password, b"Server Key"))


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """True if ``password`` derives ``credential`` (constant-time comparison)."""
    hash_fn = SCRAM_MECHANISMS[mechanism]
    sp = salted_password(mechanism, password, credential.salt, credential.iterations)
    stored = hash_fn(_hmac(hash_fn, sp, b"Client Key")).digest()
    return hmac.compare_digest(stored, credential.stored_key)


_SASLNAME_BAD = re.compile(r"=(?!2C|3D)")


def decode_saslname(name: str) -> str:
    """RFC 5802 saslname → user name (``=2C`` → ``,``, ``=3D`` → ``=``)."""
    if _SASLNAME_BAD.search(name) or "," in name:
        raise SaslAuthenticationError("Invalid SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _printable_nonce(nonce: str) -> bool:
    return bool(nonce) and all(0x21 <= ord(ch) <= 0x7E and ch != "," for ch in nonce)


# -- mechanisms ---------------------------------------------------------------------------------
class SaslServer:
    """One authentication exchange. ``evaluate(token)`` returns the challenge to send."""

    mechanism: str = ""

    def __init__(self) -> None:
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    @property
    def needs_thread(self) -> bool:
        """True when the next ``evaluate`` is CPU-heavy (PBKDF2) and belongs off the event loop."""
        return False


class PlainServer(SaslServer):
    mechanism = PLAIN

    def __init__(self, store: "CredentialStore") -> None:
        super().__init__()
        self._store = store

    @property
    def needs_thread(self) -> bool:
        return True

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("Authentication failed: PLAIN exchange already complete")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid PLAIN token: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts)))
        authzid, user, password = parts
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        self.username = user  # for the log line, also on failure
        if authzid and authzid != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        if not self._store.check_password(user, password):
            raise SaslAuthenticationError(PLAIN_FAILED)
        self.username = user
        self.complete = True
        return b""


class ScramServer(SaslServer):
    """Server side of SCRAM-SHA-256/512 (two round trips)."""

    def __init__(self, mechanism: str, store: "CredentialStore", *, nonce_factory=None) -> None:
        super().__init__()
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(mechanism)
        self.mechanism = mechanism
        self._hash = SCRAM_MECHANISMS[mechanism]
        self._store = store
        self._nonce_factory = nonce_factory or (lambda: secrets.token_urlsafe(24))
        self._state = 0
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._user_known = False

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SCRAM message: not UTF-8") from None
        if self._state == 0:
            return self._first(text)
        if self._state == 1:
            return self._final(text)
        raise SaslAuthenticationError("Authentication failed: SCRAM exchange already complete")

    def _first(self, text: str) -> bytes:
        # gs2-header: cbind-flag "," [authzid] ","
        m = re.fullmatch(r"(n|y|p=[^,]*),(a=[^,]*)?,(.*)", text, re.DOTALL)
        if m is None:
            raise SaslAuthenticationError("Invalid SCRAM client first message")
        flag, authz, bare = m.group(1), m.group(2), m.group(3)
        if flag != "n":
            raise SaslAuthenticationError("Authentication failed: channel binding is not supported")
        parts = bare.split(",")
        if len(parts) < 2 or not parts[0].startswith("n=") or not parts[1].startswith("r="):
            raise SaslAuthenticationError("Invalid SCRAM client first message")
        user = decode_saslname(parts[0][2:])
        cnonce = parts[1][2:]
        if not user or not _printable_nonce(cnonce):
            raise SaslAuthenticationError("Invalid SCRAM client first message")
        extensions = {}
        for part in parts[2:]:
            key, sep, value = part.partition("=")
            if not sep or not key:
                raise SaslAuthenticationError("Invalid SCRAM client first message")
            if key == "m":
                raise SaslAuthenticationError("Authentication failed: mandatory SCRAM extension not supported")
            extensions[key] = value
        if extensions.get("tokenauth", "").lower() == "true":
            raise SaslAuthenticationError(scram_failed(self.mechanism))
        if authz is not None and decode_saslname(authz[2:]) != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        credential = self._store.scram_credential(user, self.mechanism)
        self._user_known = credential is not None
        if credential is None:
            credential = self._store.fake_credential(user, self.mechanism)
        self._credential = credential
        self.username = user
        self._gs2_header = text[: len(text) - len(bare)]
        self._client_first_bare = bare
        self._nonce = cnonce + self._nonce_factory()
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = 1
        return self._server_first.encode("ascii")

    def _final(self, text: str) -> bytes:
        self._state = 2
        idx = text.rfind(",p=")
        if idx < 0:
            raise SaslAuthenticationError("Invalid SCRAM client final message")
        without_proof, proof_b64 = text[:idx], text[idx + 3:]
        parts = without_proof.split(",")
        if len(parts) < 2 or not parts[0].startswith("c=") or not parts[1].startswith("r="):
            raise SaslAuthenticationError("Invalid SCRAM client final message")
        try:
            binding = base64.b64decode(parts[0][2:], validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise SaslAuthenticationError("Invalid SCRAM client final message: bad base64") from None
        failed = scram_failed(self.mechanism)
        if binding != self._gs2_header.encode("utf-8"):
            raise SaslAuthenticationError(failed)
        if not parts[1][2:].endswith(self._nonce):  # Kafka's check (librdkafka 2.0 repeats the client nonce)
            raise SaslAuthenticationError("Invalid SCRAM client final message: nonce mismatch")
        cred = self._credential
        assert cred is not None
        if len(proof) != len(cred.stored_key):
            raise SaslAuthenticationError(failed)
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        client_signature = _hmac(self._hash, cred.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        ok = hmac.compare_digest(self._hash(client_key).digest(), cred.stored_key)
        if not ok or not self._user_known:
            raise SaslAuthenticationError(failed)
        self.complete = True
        server_signature = _hmac(self._hash, cred.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


def new_server(mechanism: str, store: "CredentialStore") -> SaslServer:
    if mechanism == PLAIN:
        return PlainServer(store)
    if mechanism in SCRAM_MECHANISMS:
        return ScramServer(mechanism, store)
    raise ValueError(f"unsupported SASL mechanism {mechanism}")


# -- the failure log limit ----------------------------------------------------------------------------
class FailureLogLimit:
    """Which authentication failures to log: per client address, the first, then at most one per
    ``interval_s`` (0: every one). Remembers at most ``max_addresses`` addresses: past that, the
    ones whose last line is older than the interval are forgotten (their next failure is a first one).
    """

    def __init__(self, interval_s: float, *, clock=time.monotonic, max_addresses: int = 4096) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._max_addresses = max_addresses
        self._addresses: dict[str, list] = {}   # address -> [monotonic time of the last line, failures not logged]

    def failure(self, address: str) -> int | None:
        """One failure from ``address``: None when it is not to be logged, else how many failures from
        that address were not logged since the previous line (0 for the first)."""
        now = self._clock()
        entry = self._addresses.get(address)
        if entry is not None and now - entry[0] < self.interval_s:
            entry[1] += 1
            return None
        suppressed = entry[1] if entry is not None else 0
        if entry is None and len(self._addresses) >= self._max_addresses:
            self._forget_quiet(now)
        self._addresses[address] = [now, 0]
        return suppressed

    def _forget_quiet(self, now: float) -> None:
        for address in [a for a, (last, _n) in self._addresses.items() if now - last >= self.interval_s]:
            del self._addresses[address]
        while len(self._addresses) >= self._max_addresses:  # all recent: drop the oldest
            del self._addresses[min(self._addresses, key=lambda a: self._addresses[a][0])]


# -- the store ------------------------------------------------------------------------------------
class CredentialStore:
    """Users' SCRAM credentials in one JSON file (see module doc). Thread-safe reads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._secret = b""

    # -- reading -----------------------------------------------------------------------------
    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def refresh(self) -> None:
        """Re-read the file if it changed (cheap stat otherwise). Keeps the old view on a bad file."""
        stamp = self._file_stamp()
        with self._lock:
            if stamp == self._stamp and (stamp is not None or self._secret):
                return
            if stamp is None:
                self._users, self._stamp = {}, None
                if not self._secret:
                    self._secret = secrets.token_bytes(32)
                return
            try:
                users, secret = self._parse(self._read())
            except CredentialsError as exc:
                logger.error("credentials_file_unreadable", path=self.path, error=str(exc))
                if not self._secret:
                    self._secret = secrets.token_bytes(32)
                self._stamp = stamp
                return
            self._users, self._secret, self._stamp = users, secret or secrets.token_bytes(32), stamp
            logger.info("credentials_loaded", path=self.path, users=len(users))

    def _read(self) -> dict:
        try:
            with open(self.path, "rb") as fh:
                return json.loads(fh.read().decode("utf-8"))
        except (OSError, ValueError) as exc:
            raise CredentialsError(f"cannot read {self.path}: {exc}") from None

    @staticmethod
    def _parse(doc) -> tuple[dict[str, dict[str, ScramCredential]], bytes]:
        if not isinstance(doc, dict) or doc.get("version") != STORE_VERSION:
            raise CredentialsError(f"unsupported credentials file version {doc.get('version') if isinstance(doc, dict) else doc!r}")
        users: dict[str, dict[str, ScramCredential]] = {}
        raw_users = doc.get("users") or {}
        if not isinstance(raw_users, dict):
            raise CredentialsError("'users' must be an object")
        for user, mechs in raw_users.items():
            if not isinstance(mechs, dict):
                raise CredentialsError(f"user {user!r}: expected an object of mechanisms")
            users[user] = {m: ScramCredential.from_json(c) for m, c in mechs.items() if m in SCRAM_MECHANISMS}
        try:
            secret = base64.b64decode(doc.get("secret") or "", validate=True)
        except ValueError:
            secret = b""
        return users, secret

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        self.refresh()
        return self._users.get(user, {}).get(mechanism)

    def fake_credential(self, user: str, mechanism: str) -> ScramCredential:
        """A stable, believable credential for an unknown user (no user enumeration)."""
        self.refresh()
        seed = hmac.new(self._secret, f"{mechanism}\0{user}".encode("utf-8"), hashlib.sha256).digest()
        hash_len = SCRAM_MECHANISMS[mechanism]().digest_size
        return ScramCredential(seed, DEFAULT_ITERATIONS, secrets.token_bytes(hash_len), secrets.token_bytes(hash_len))

    def check_password(self, user: str, password: str) -> bool:
        """PLAIN: does ``password`` derive one of the user's SCRAM credentials?"""
        self.refresh()
        creds = self._users.get(user)
        if not creds:
            # Same cost as a real check, so timing does not reveal unknown users.
            password_matches(SCRAM_SHA_256, self.fake_credential(user, SCRAM_SHA_256), password)
            return False
        mechanism = SCRAM_SHA_256 if SCRAM_SHA_256 in creds else next(iter(creds))
        return password_matches(mechanism, creds[mechanism], password)

    def users(self) -> dict[str, list[tuple[str, int]]]:
        """User → [(mechanism, iterations)] (for listing)."""
        self.refresh()
        return {u: sorted((m, c.iterations) for m, c in mechs.items()) for u, mechs in sorted(self._users.items())}

    # -- writing (the CLI, offline) --------------------------------------------------------------
    def _load_for_update(self) -> dict:
        if not os.path.exists(self.path):
            return {"version": STORE_VERSION, "secret": _b64(secrets.token_bytes(32)), "users": {}}
        doc = self._read()
        self._parse(doc)  # validate before changing anything
        doc.setdefault("users", {})
        if not doc.get("secret"):
            doc["secret"] = _b64(secrets.token_bytes(32))
        return doc

    def _save(self, doc: dict) -> None:
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        data = json.dumps(doc, indent=2, sort_keys=True).encode("utf-8") + b"\n"
        write_file_atomically(self.path, data, mode=0o600)
        self._stamp = None

    def update(self, change):
        """Read-modify-write under the store's update lock (:mod:`broker.store_lock`).

        ``change(users)`` gets the parsed store, ``{user: {mechanism: ScramCredential}}``,
        may change it in place and returns ``(result, changed)``; when ``changed`` the file
        is replaced atomically (users left without credentials are dropped). Returns
        ``result``. The CLI and the broker's AlterUserScramCredentials both write this way,
        so neither loses the other's change.
        """
        with update_lock(self.path):
            doc = self._load_for_update()
            users, _secret = self._parse(doc)
            result, changed = change(users)
            if changed:
                doc["users"] = {u: {m: c.to_json() for m, c in sorted(mechs.items())}
                                for u, mechs in sorted(users.items()) if mechs}
                self._save(doc)
        return result

    def set_user(self, user: str, password: str, mechanisms=(SCRAM_SHA_256, SCRAM_SHA_512),
                 iterations: int = DEFAULT_ITERATIONS) -> None:
        if not user or any(ch in user for ch in "\0"):
            raise CredentialsError("user name must be non-empty and contain no NUL")
        if not password:
            raise CredentialsError("password must not be empty")
        for m in mechanisms:
            if m not in SCRAM_MECHANISMS:
                raise CredentialsError(f"unknown SCRAM mechanism {m!r} (choose from {', '.join(SCRAM_MECHANISMS)})")
        new = {m: make_credential(m, password, iterations=iterations) for m in mechanisms}

        def change(users):
            users.setdefault(user, {}).update(new)
            return None, True

        self.update(change)

    def delete_user(self, user: str, mechanisms=None) -> bool:
        def change(users):
            entry = users.get(user)
            if entry is None:
                return False, False
            if mechanisms:
                for m in mechanisms:
                    entry.pop(m, None)
            else:
                entry.clear()
            return True, True

        return self.update(change)

"""Installs the packages pinned in package-lock.json into node_modules, without npm.

    python3 tests/integration/js/install.py

For the test image, where Debian's npm would pull hundreds of packages for one
dependency-free library (kafkajs). It reads every ``node_modules/...`` entry of the lock
file (lockfileVersion 2 or 3), downloads its tarball (the entry's ``resolved`` URL, or the
npm registry's usual one), checks it against the entry's ``integrity`` hash, and unpacks
it into that path. Any failure (no network, a hash mismatch, an entry without integrity,
a package that needs an install script) ends it with a one-line error and exit status 1,
so an image build that runs it fails rather than ship without kafkajs.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REGISTRY = os.environ.get("NPM_CONFIG_REGISTRY", "https://registry.npmjs.org").rstrip("/")


class InstallError(Exception):
    pass


def tarball_url(name: str, entry: dict) -> str:
    if entry.get("resolved"):
        return entry["resolved"]
    return f"{REGISTRY}/{name}/-/{name.rsplit('/', 1)[-1]}-{entry['version']}.tgz"


def check_integrity(name: str, data: bytes, integrity: str) -> None:
    """Subresource-integrity check: any one of the listed hashes must match."""
    for item in integrity.split():
        algorithm, _, expected = item.partition("-")
        if algorithm in ("sha512", "sha384", "sha256", "sha1"):
            if base64.b64encode(hashlib.new(algorithm, data).digest()).decode() == expected:
                return
    raise InstallError(f"{name}: the tarball does not match the lock file's integrity {integrity}")


def unpack(name: str, data: bytes, target: str) -> None:
    """Unpacks the tarball's ``package/`` tree into ``target`` (regular files and directories only)."""
    root = os.path.realpath(target)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) < 2 or not parts[1]:
                continue
            path = os.path.realpath(os.path.join(root, parts[1]))
            if not path.startswith(root + os.sep):
                raise InstallError(f"{name}: the tarball's {member.name} points outside the package")
            if member.isdir():
                os.makedirs(path, exist_ok=True)
            elif member.isfile():
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with tar.extractfile(member) as src, open(path, "wb") as dst:
                    dst.write(src.read())
                os.chmod(path, 0o755 if member.mode & 0o111 else 0o644)


def install(directory: str = HERE) -> list[str]:
    with open(os.path.join(directory, "package-lock.json"), encoding="utf-8") as fh:
        lock = json.load(fh)
    if lock.get("lockfileVersion") not in (2, 3):
        raise InstallError(f"package-lock.json: lockfileVersion {lock.get('lockfileVersion')} is not 2 or 3")
    installed = []
    for path, entry in sorted(lock.get("packages", {}).items()):
        if not path.startswith("node_modules/") or entry.get("dev") or entry.get("optional"):
            continue
        name = path.rsplit("node_modules/", 1)[1]
        if entry.get("hasInstallScript"):
            raise InstallError(f"{name}: needs an install script; use npm")
        if not entry.get("integrity") or not entry.get("version"):
            raise InstallError(f"{name}: the lock file gives no version or integrity")
        url = tarball_url(name, entry)
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                data = response.read()
        except OSError as exc:
            raise InstallError(f"{name}: cannot download {url}: {exc}") from exc
        check_integrity(name, data, entry["integrity"])
        unpack(name, data, os.path.join(directory, path))
        installed.append(f"{name}@{entry['version']}")
    return installed


def main() -> int:
    try:
        installed = install()
    except (InstallError, OSError, ValueError) as exc:
        print(f"install.py: error: {exc}", file=sys.stderr)
        return 1
    print(f"install.py: installed {', '.join(installed) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

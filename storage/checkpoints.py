"""Per-log-directory checkpoint files and the clean-shutdown marker (Kafka's formats).

Offset checkpoint files (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``; Kafka ``OffsetCheckpointFile`` / ``CheckpointFile``)
are text::

    0                      <- version
    2                      <- number of entries
    orders 0 1234          <- topic, partition, offset separated by whitespace
    orders 1 99

They are written to ``<file>.tmp``, fsynced, renamed over the file, and the directory
is fsynced. A file with a wrong version, a wrong entry count or a malformed line is
unreadable; the loader then treats it as empty (recovery point 0, log start offset =
first segment base) and logs why, as Kafka does.

``.kafka_cleanshutdown`` marks a log directory whose logs were all flushed and closed.
At start-up it is read and deleted at once (a crash while loading then counts as
unclean); at clean shutdown it is written last, with Kafka's content
``{"version":0,"brokerEpoch":0}`` (0.10.x wrote an empty file; both are accepted).
"""

from __future__ import annotations

import json
import os

import structlog

from .files import CLEAN_SHUTDOWN_FILE, read_file_if_exists, remove_quietly, write_file_atomically

logger = structlog.get_logger(__name__)

CHECKPOINT_VERSION = 0

TopicPartition = tuple[str, int]


class CheckpointFormatError(ValueError):
    """A checkpoint file that does not follow the format of the module doc."""


def format_offset_checkpoint(offsets: dict[TopicPartition, int]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    for (topic, partition), offset in sorted(offsets.items()):
        lines.append(f"{topic} {partition} {offset}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse_offset_checkpoint(text: str) -> dict[TopicPartition, int]:
    """Parse checkpoint text; raises :class:`CheckpointFormatError` on any deviation."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointFormatError("missing version or entry count line")
    try:
        version = int(lines[0].strip())
        count = int(lines[1].strip())
    except ValueError:
        raise CheckpointFormatError("version and entry count must be integers") from None
    if version != CHECKPOINT_VERSION:
        raise CheckpointFormatError(f"unrecognised version {version}")
    entries = lines[2:]
    if count != len(entries):
        raise CheckpointFormatError(f"expected {count} entries but found {len(entries)}")
    offsets: dict[TopicPartition, int] = {}
    for line in entries:
        fields = line.split()
        if len(fields) != 3:
            raise CheckpointFormatError(f"malformed line {line!r}")
        try:
            partition, offset = int(fields[1]), int(fields[2])
        except ValueError:
            raise CheckpointFormatError(f"malformed line {line!r}") from None
        offsets[(fields[0], partition)] = offset
    return offsets


def read_offset_checkpoint(path: str) -> dict[TopicPartition, int]:
    """The offsets in ``path``; {} when it is missing or unreadable (logged)."""
    try:
        raw = read_file_if_exists(path)
    except OSError as exc:
        logger.warning("checkpoint_unreadable", path=path, error=str(exc))
        return {}
    if raw is None:
        return {}
    try:
        return parse_offset_checkpoint(raw.decode("utf-8"))
    except (CheckpointFormatError, UnicodeDecodeError) as exc:
        logger.warning("checkpoint_corrupt_ignored", path=path, error=str(exc))
        return {}


def write_offset_checkpoint(path: str, offsets: dict[TopicPartition, int]) -> None:
    write_file_atomically(path, format_offset_checkpoint(offsets))


def consume_clean_shutdown_marker(log_dir: str) -> bool:
    """True if ``log_dir`` was shut down cleanly; deletes the marker either way."""
    path = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
    if not os.path.exists(path):
        return False
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        if raw.strip():
            json.loads(raw.decode("utf-8"))  # Kafka's {"version":0,"brokerEpoch":N}
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        logger.warning("clean_shutdown_marker_unreadable", log_dir=log_dir, error=str(exc))
    remove_quietly(path)
    return True


def write_clean_shutdown_marker(log_dir: str, broker_epoch: int = 0) -> None:
    body = json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":")).encode()
    write_file_atomically(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), body)


__all__ = [
    "CheckpointFormatError", "format_offset_checkpoint", "parse_offset_checkpoint",
    "read_offset_checkpoint", "write_offset_checkpoint", "consume_clean_shutdown_marker",
    "write_clean_shutdown_marker",
]

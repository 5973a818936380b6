"""All partition logs of the broker across ``log.dirs`` (Kafka ``LogManager``, one node).

Start-up (:meth:`LogManager.startup`)
-------------------------------------
Per log dir: read and delete ``.kafka_cleanshutdown``; read
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``; remove
``<topic>-<p>.<uuid>-delete`` leftovers; list the partition directories. Topic metadata
comes from ``sundial-topics.json`` (:mod:`storage.topics`); without any copy (a data
dir written by an older Sundial or by Kafka) the topics are adopted from the partition
directories and their ``partition.metadata``. A partition directory of a topic the
metadata does not know is the leftover of an interrupted deletion and is deleted.

Opening is **lazy** after a clean shutdown: nothing of a partition is read, mapped or
scanned until :meth:`get_log` first asks for it (then its segment index files are
checked and repaired if needed; :mod:`storage.recovery`). 10,000 partitions therefore
start in the time it takes to list the directories. After an unclean shutdown every
partition of that dir is loaded (and recovered from its recovery point) during
start-up, with progress logged, as Kafka does — a later clean shutdown must be able
to vouch for all of them. Each data dir recovers its partitions on
``num.recovery.threads.per.data.dir`` threads (``recovery_threads_per_data_dir``), all
dirs at once, as Kafka's ``loadLogs`` does.

Opening off the owner thread: with an ``executor`` (the broker's scheduler),
:meth:`start_open` hands the file work of opening a partition (creating its directory
if missing, loading and recovering its segments, ``partition.metadata``) to the
executor and returns its future; :meth:`finish_open`, on the owner thread, installs
the opened log (or drops it when its topic was deleted meanwhile). A :meth:`get_log`
for a partition whose open is under way waits for it, so a partition is never opened
twice at once.

Layout decisions: a new partition goes to the log dir holding the fewest partitions.
Topic creation writes the topic list first, then the partition directories (a directory
of a topic the list lacks is deleted at start). Topic deletion writes the list first,
then renames each partition directory to ``<topic>-<p>.<uuid>-delete`` and removes it
after ``file.delete.delay.ms`` (:meth:`delete_expired_files`, which the broker calls
periodically), so a crash in between never resurrects the topic. Both split in a
decision on the owner thread and file work that runs on any thread
(:meth:`prepare_create_topic`, :meth:`prepare_delete_topic`): the broker runs the file
work off the event loop, on one ordered thread, and answers once it is done.

Moves between log dirs (AlterReplicaLogDirs, :mod:`storage.log_move`): :meth:`begin_move`
decides one; :meth:`move_future_job` and :meth:`move_copy_job` build the copy steps;
:meth:`start_swap` takes the log out of service and runs the swap as an open under way,
so requests wait for it as for any open and :meth:`finish_open` installs the log where the
swap left it. Start-up resolves the ``-future`` directories a stop left behind
(``_resolve_moves_left``): never two live copies, never the live copy dropped.

Shutdown: every open log is flushed and closed (final time-index entries, trimmed
indexes, producer snapshots), both checkpoint files are written for every dir, then
``.kafka_cleanshutdown``.

Not thread-safe, like the logs it holds.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import shutil
import threading
from typing import Any, Callable, Iterator, Mapping

import structlog

from sundial.config.topic import TopicConfig, format_overrides, resolve_topic_config
from sundial.config.topic_names import collision_key

from . import disk, files
from .checkpoints import (
    consume_clean_shutdown_marker,
    read_offset_checkpoint,
    write_clean_shutdown_marker,
    write_offset_checkpoint,
)
from .errors import KafkaStorageError
from .index import MappedIndexes
from .log import PartitionLog
from .log_search import BatchIndexCache
from .log_dirs import ReplicaPlacement
from .log_move import (
    CommitOutcome,
    LogDirNotFoundError,
    LogMove,
    copy_job,
    future_dir_name,
    future_job,
    parse_future_dir_name,
    promote_future,
    resolve_leftovers,
    swap_job,
)
from .retention import RetentionOutcome
from .topics import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    TopicMetadata,
    UnknownTopicOrPartitionError,
    encode_metadata,
    new_topic_id,
    read_metadata,
    read_partition_metadata,
    validate_topic_name,
    write_encoded_metadata,
    write_partition_metadata,
)

logger = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]

#: Unclean start-up logs progress every this many partitions.
PROGRESS_EVERY_PARTITIONS = 500


class LogManager:
    """Owns every :class:`PartitionLog` (see module doc)."""

    def __init__(self, log_dirs: list[str] | str, broker_explicit: Mapping[str, Any] | None = None, *,
                 producer_id_expiration_ms: int = 86_400_000, now_ms: Callable[[], int] | None = None,
                 rng: random.Random | None = None, recovery_threads_per_data_dir: int = 1,
                 executor: concurrent.futures.Executor | None = None,
                 batch_indexes: BatchIndexCache | None = None,
                 mapped_indexes: MappedIndexes | None = None) -> None:
        if isinstance(log_dirs, str):
            log_dirs = [log_dirs]
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.broker_explicit = dict(broker_explicit or {})
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._now_ms = now_ms
        self._rng = rng or random.Random()
        if recovery_threads_per_data_dir < 1:
            raise ValueError("recovery_threads_per_data_dir must be at least 1")
        self.recovery_threads_per_data_dir = recovery_threads_per_data_dir
        self._executor = executor
        # one budget for the search indexes of every log this manager opens
        self._batch_indexes = batch_indexes if batch_indexes is not None else BatchIndexCache()
        # one limit for the mapped index files of every log this manager opens, creates or moves
        self._mapped_indexes = mapped_indexes if mapped_indexes is not None else MappedIndexes()
        self._opening: dict[TopicPartition, concurrent.futures.Future] = {}   # opens under way
        self._topics: dict[str, TopicMetadata] = {}
        self._creating: dict[str, TopicMetadata] = {}          # topics whose creation is being made durable
        self._generation = 0
        self._metadata_lock = threading.Lock()                 # one metadata write at a time
        self._written_generation = -1                          # newest generation written (under the lock)
        self._locations: dict[TopicPartition, str] = {}       # partition -> log dir holding it
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._clean: dict[str, bool] = {}
        self._recovery_points: dict[str, dict[TopicPartition, int]] = {}
        self._log_start_offsets: dict[str, dict[TopicPartition, int]] = {}
        self._pending_dirs: list[list] = []                    # [path, due_ms | None, delay_ms]
        self._moves: dict[TopicPartition, LogMove] = {}        # AlterReplicaLogDirs moves under way
        self._swaps: dict[TopicPartition, LogMove] = {}        # moves whose swap runs (in _opening)
        self._offline: set[TopicPartition] = set()             # a swap failed half-way: until a restart
        self._started = False
        self._shut_down = False
        self._checkpoint_lock = threading.Lock()

    # -- start-up ----------------------------------------------------------------------------------------
    def startup(self) -> None:
        if self._started:
            return
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            # A directory holding no partition and no checkpoint is new: nothing to recover, so
            # its first start (and every partition created during it) is not an unclean one.
            self._clean[d] = consume_clean_shutdown_marker(d) or _is_fresh_log_dir(d)
            self._recovery_points[d] = read_offset_checkpoint(os.path.join(d, files.RECOVERY_POINT_CHECKPOINT_FILE))
            self._log_start_offsets[d] = read_offset_checkpoint(
                os.path.join(d, files.LOG_START_OFFSET_CHECKPOINT_FILE))
        found: dict[TopicPartition, str] = {}
        futures: dict[TopicPartition, list[tuple[str, str]]] = {}
        for d in self.log_dirs:
            for name in os.listdir(d):
                path = os.path.join(d, name)
                if files.is_delete_dir(name):
                    shutil.rmtree(path, ignore_errors=True)
                    logger.info("deleted_partition_dir_removed", path=path)
                    continue
                future_of = parse_future_dir_name(name)
                if future_of is not None:
                    if os.path.isdir(path):
                        futures.setdefault(future_of, []).append((d, name))
                    continue
                parsed = files.parse_partition_dir_name(name)
                if parsed is None or not os.path.isdir(path):
                    continue
                if parsed in found:
                    raise KafkaStorageError(
                        f"duplicate log directories for {parsed[0]}-{parsed[1]}: {found[parsed]} and {d}")
                found[parsed] = d
        self._resolve_moves_left(found, futures)
        stored = read_metadata(self.log_dirs)
        if stored is None:
            self._adopt_topics(found)
        else:
            self._generation = stored[0]
            for t in stored[1]:
                config = resolve_topic_config(t.overrides, self.broker_explicit)
                self._topics[t.name] = TopicMetadata(t.name, t.topic_id, t.partitions, dict(t.overrides), config)
        for tp, d in found.items():
            meta = self._topics.get(tp[0])
            if meta is None or tp[1] >= meta.partitions:
                self._schedule_dir_delete(tp, os.path.join(d, files.partition_dir_name(*tp)), 0)
                logger.warning("orphan_partition_dir_deleted", topic=tp[0], partition=tp[1], log_dir=d)
                continue
            self._locations[tp] = d
        self._started = True
        unclean = [d for d in self.log_dirs if not self._clean[d]]
        to_load = [tp for tp, d in self._locations.items() if d in unclean]
        logger.info("log_manager_starting", log_dirs=self.log_dirs, topics=len(self._topics),
                    partitions=len(self._locations), unclean_log_dirs=unclean,
                    recovery_threads_per_data_dir=self.recovery_threads_per_data_dir)
        if to_load:
            self._recover(sorted(to_load))
            logger.info("logs_recovered", partitions=len(to_load))

    def _recover(self, to_load: list[TopicPartition]) -> None:
        """Open (and recover) ``to_load``: ``recovery_threads_per_data_dir`` threads per data dir,
        every dir at once; the logs are installed here, on the calling thread, as they finish."""
        pools = {d: concurrent.futures.ThreadPoolExecutor(self.recovery_threads_per_data_dir,
                                                          thread_name_prefix="sundial-recovery")
                 for d in {self._locations[tp] for tp in to_load}}
        try:
            futures = {}
            for tp in to_load:
                job = self._open_job(tp)
                if job is not None:
                    futures[pools[self._locations[tp]].submit(job)] = tp
            done = 0
            first_error: BaseException | None = None
            for fut in concurrent.futures.as_completed(futures):
                try:
                    self._install(futures[fut], *fut.result())
                except BaseException as exc:  # noqa: BLE001 - re-raised once every other open has ended
                    first_error = first_error or exc
                done += 1
                if done % PROGRESS_EVERY_PARTITIONS == 0:
                    logger.info("log_loading_progress", loaded=done, total=len(futures))
            if first_error is not None:
                raise first_error
        finally:
            for pool in pools.values():
                pool.shutdown(wait=True)

    def _resolve_moves_left(self, found: dict[TopicPartition, str],
                            futures: dict[TopicPartition, list[tuple[str, str]]]) -> None:
        """Start-up: the ``-future`` directories of moves a stop cut short (:mod:`storage.log_move`):
        discarded when the partition has its live directory, renamed to it when it has none."""
        if not futures:
            return
        leftovers = resolve_leftovers(found, futures)
        for path in leftovers.discard:
            shutil.rmtree(path, ignore_errors=True)
            logger.warning("log_move_abandoned", path=path,
                           reason="the move did not complete before the stop; the partition stays where it was")
        for tp, (d, name) in leftovers.promote.items():
            promote_future(d, name, tp)
            found[tp] = d
            self._clean[d] = False   # its checkpoints do not know it yet: recover it from its start
            logger.warning("log_move_completed_at_startup", topic=tp[0], partition=tp[1], log_dir=d)

    def _adopt_topics(self, found: dict[TopicPartition, str]) -> None:
        """No metadata file: rebuild the topic list from partition directories (logged)."""
        by_topic: dict[str, list[int]] = {}
        for topic, p in found:
            by_topic.setdefault(topic, []).append(p)
        for topic, parts in sorted(by_topic.items()):
            try:
                validate_topic_name(topic)
            except InvalidTopicError:
                logger.warning("partition_dir_with_illegal_topic_ignored", topic=topic)
                continue
            topic_id = None
            for p in parts:
                topic_id = read_partition_metadata(os.path.join(found[(topic, p)], files.partition_dir_name(topic, p)))
                if topic_id:
                    break
            config = resolve_topic_config({}, self.broker_explicit)
            self._topics[topic] = TopicMetadata(topic, topic_id or new_topic_id(), max(parts) + 1, {}, config)
            logger.warning("topic_adopted_from_partition_dirs", topic=topic, partitions=max(parts) + 1)
        if by_topic:
            self._persist_metadata()

    def _check_started(self) -> None:
        if not self._started:
            self.startup()

    # -- topics ---------------------------------------------------------------------------------------
    def topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def topics(self) -> list[TopicMetadata]:
        return [self._topics[n] for n in sorted(self._topics)]

    def topic_by_id(self, topic_id: bytes) -> TopicMetadata | None:
        for meta in self._topics.values():
            if meta.topic_id == topic_id:
                return meta
        return None

    def _persist_metadata(self) -> None:
        """Write the topic list now, on this thread (start-up, tools, tests, the rarely used admin
        paths); the broker makes creations and deletions durable off the event loop instead
        (:meth:`prepare_create_topic`, :meth:`prepare_delete_topic`)."""
        self._metadata_job()()

    def _metadata_job(self) -> Callable[[], None]:
        """Owner thread: the next generation of the topic list (topics being created included),
        encoded now; the returned job writes it to every log dir (tmp + fsync + rename + directory
        fsync) on any thread. Jobs may run in any order: one that finds a newer generation
        written already does nothing, since each holds the whole list."""
        self._generation += 1
        generation = self._generation
        data = encode_metadata({**self._topics, **self._creating}, generation)
        log_dirs = list(self.log_dirs)

        def job() -> None:
            disk.current().pause("metadata")
            with self._metadata_lock:
                if generation <= self._written_generation:
                    return
                write_encoded_metadata(log_dirs, data)
                self._written_generation = generation

        return job

    def _check_new_topic(self, name: str, partitions: int, overrides: Mapping[str, Any] | None) -> TopicMetadata:
        self._check_started()
        validate_topic_name(name)
        if name in self._topics or name in self._creating:
            raise TopicAlreadyExistsError(f"topic '{name}' already exists")
        collision = collision_key(name)
        for other in (*self._topics, *self._creating):
            if collision_key(other) == collision:
                raise InvalidTopicError(f"topic '{name}' collides with existing topic '{other}'")
        if partitions <= 0:
            raise InvalidPartitionsError(f"number of partitions must be larger than 0, got {partitions}")
        overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        config = resolve_topic_config(overrides, self.broker_explicit)
        return TopicMetadata(name, new_topic_id(), partitions, format_overrides(overrides), config)

    def create_topic(self, name: str, partitions: int, overrides: Mapping[str, Any] | None = None,
                     validate_only: bool = False) -> TopicMetadata:
        """Create a topic on this thread; raises InvalidTopicError, TopicAlreadyExistsError,
        InvalidPartitionsError, or ``config.ConfigError`` for bad overrides."""
        if validate_only:
            return self._check_new_topic(name, partitions, overrides)
        pending = self.prepare_create_topic(name, partitions, overrides)
        try:
            pending.run()
        except BaseException:
            self.abandon_create_topic(pending)
            raise
        return self.finish_create_topic(pending)

    def prepare_create_topic(self, name: str, partitions: int,
                             overrides: Mapping[str, Any] | None = None) -> "PendingTopicChange":
        """Owner thread: check and reserve a new topic (raises as :meth:`create_topic`); the
        returned change's ``run`` (any thread) writes the topic list and then the partition
        directories; :meth:`finish_create_topic` (owner thread, after ``run`` returned) makes the
        topic visible, or :meth:`abandon_create_topic` when ``run`` failed. Until then nothing
        serves the topic, and another creation of the name is refused as existing."""
        meta = self._check_new_topic(name, partitions, overrides)
        self._creating[name] = meta
        write = self._metadata_job()
        dirs = []
        for p in range(partitions):   # recorded now, so that each partition counts in the next choice
            d = self._locations[(name, p)] = self._pick_log_dir()
            dirs.append((p, d))

        def run() -> None:
            write()   # durable first: a partition directory of a topic the list lacks is deleted at start
            for p, d in dirs:
                _make_partition_dir(os.path.join(d, files.partition_dir_name(name, p)), meta.topic_id)

        return PendingTopicChange(name, meta, run, dirs)

    def finish_create_topic(self, pending: "PendingTopicChange") -> TopicMetadata:
        meta = self._creating.pop(pending.name)
        self._topics[pending.name] = meta
        for _p, d in pending.dirs:
            self._clean[d] = self._clean.get(d, True)
        return meta  # the broker logs the creation once, with who asked for it

    def abandon_create_topic(self, pending: "PendingTopicChange") -> None:
        """The creation failed: forget the reservation (the next topic-list write drops it)."""
        self._creating.pop(pending.name, None)
        for p, _d in pending.dirs:
            self._locations.pop((pending.name, p), None)

    def create_partitions(self, name: str, total: int) -> TopicMetadata:
        self._check_started()
        meta = self._topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        if total <= meta.partitions:
            raise InvalidPartitionsError(
                f"topic currently has {meta.partitions} partitions, which is higher than or equal to the "
                f"requested {total}")
        new = TopicMetadata(meta.name, meta.topic_id, total, meta.overrides, meta.config)
        self._topics[name] = new
        self._persist_metadata()
        for p in range(meta.partitions, total):
            self._create_partition_dir(new, p)
        logger.info("partitions_created", topic=name, partitions=total)
        return new

    def alter_topic_config(self, name: str, overrides: Mapping[str, Any]) -> TopicMetadata:
        """Replace the topic's overrides (AlterConfigs semantics) and apply them to open logs."""
        self._check_started()
        meta = self._topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        overrides = {k: v for k, v in overrides.items() if v is not None}
        config = resolve_topic_config(overrides, self.broker_explicit)
        new = TopicMetadata(meta.name, meta.topic_id, meta.partitions, format_overrides(overrides), config)
        self._topics[name] = new
        self._persist_metadata()
        for (topic, _p), log in self._logs.items():
            if topic == name:
                log.update_config(config)
        logger.info("topic_config_altered", topic=name, overrides=new.overrides)
        return new

    def delete_topic(self, name: str) -> None:
        """Delete a topic on this thread (raises UnknownTopicOrPartitionError)."""
        pending = self.prepare_delete_topic(name)
        pending.run()
        self.finish_delete_topic(pending)

    def prepare_delete_topic(self, name: str) -> "PendingTopicChange":
        """Owner thread: the topic is gone at once (its logs closed, nothing serves it); the
        returned change's ``run`` (any thread) writes the topic list without it and then renames
        each partition directory to ``-delete`` (removing it at once when ``file.delete.delay.ms``
        is 0); :meth:`finish_delete_topic` (owner thread, after ``run``) schedules the delayed
        removals. A creation of the same name must run its file work after this ``run`` (the
        broker runs both on one ordered lane), or its new directories would be renamed."""
        self._check_started()
        meta = self._topics.pop(name, None)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        write = self._metadata_job()
        dirs = []
        for p in range(meta.partitions):
            tp = (name, p)
            move = self._moves.pop(tp, None)
            if move is not None:
                move.cancelled = True   # its mover discards the future
            self._offline.discard(tp)
            self._drop_open_under_way(tp)
            log = self._logs.pop(tp, None)
            if log is not None:
                log.close_handles()
            d = self._locations.pop(tp, None)
            for cp in (self._recovery_points, self._log_start_offsets):
                for per_dir in cp.values():
                    per_dir.pop(tp, None)
            if d is not None:
                dirs.append((p, d))
        delay_ms = meta.config.file_delete_delay_ms
        renamed: list[str] = []

        def run() -> None:
            write()   # durable first, so a crash during the renames never resurrects the topic
            for p, d in dirs:
                target = _rename_for_delete((name, p), os.path.join(d, files.partition_dir_name(name, p)))
                if target is None:
                    continue
                if delay_ms <= 0:
                    disk.current().pause("unlink")
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    renamed.append(target)

        return PendingTopicChange(name, meta, run, dirs, renamed, delay_ms)

    def finish_delete_topic(self, pending: "PendingTopicChange") -> None:
        for target in pending.renamed:
            self._pending_dirs.append([target, None, pending.delay_ms])
        logger.info("topic_deleted", topic=pending.name, partitions=pending.meta.partitions)

    def _drop_open_under_way(self, tp: TopicPartition) -> None:
        """Wait for an open of ``tp`` under way and close what it opened (its directory is about to
        be renamed; rare: a topic deleted while one of its partitions is being opened)."""
        fut = self._opening.pop(tp, None)
        if fut is None:
            return
        swap = self._swaps.pop(tp, None)
        try:
            result = fut.result()
        except Exception:  # noqa: BLE001 - the partition is going away; its open's error does not matter
            return
        if swap is not None:   # a move's swap: the data is where it ended, and the old copy goes too
            outcome: CommitOutcome = result[3]
            self._locations[tp] = outcome.log_dir
            if outcome.deleted is not None:
                self._pending_dirs.append([outcome.deleted, None, 0])
        result[0].close_handles()

    def _schedule_dir_delete(self, tp: TopicPartition, path: str, delay_ms: int) -> None:
        target = _rename_for_delete(tp, path)
        if target is None:
            return
        if delay_ms <= 0:
            shutil.rmtree(target, ignore_errors=True)
        else:
            self._pending_dirs.append([target, None, delay_ms])

    # -- partitions ----------------------------------------------------------------------------------
    def _pick_log_dir(self) -> str:
        counts = {d: 0 for d in self.log_dirs}
        for d in self._locations.values():
            counts[d] = counts.get(d, 0) + 1
        return min(self.log_dirs, key=lambda d: (counts[d], self.log_dirs.index(d)))

    def _create_partition_dir(self, meta: TopicMetadata, partition: int) -> str:
        tp = (meta.name, partition)
        d = self._pick_log_dir()
        _make_partition_dir(os.path.join(d, files.partition_dir_name(*tp)), meta.topic_id)
        self._locations[tp] = d
        self._clean[d] = self._clean.get(d, True)
        return d

    def is_open(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._logs

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log, opened (and if needed recovered) on first use; None if unknown.

        Opening here runs on the calling thread; callers on the event loop first await
        :meth:`start_open` (the broker's ``ReplicaManager.open_logs``). When an open is
        already under way on the executor, this waits for it."""
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None:
            return log
        if tp in self._opening:
            log = self.finish_open(topic, partition)
            if log is not None:
                return log
        job = self._open_job(tp)
        if job is None:
            return None
        return self._install(tp, *job())

    def start_open(self, topic: str, partition: int) -> concurrent.futures.Future | None:
        """Open the partition on the executor; its future (already under way: the same one), or
        None when it is open, unknown, or there is no executor. Owner thread only; the result is
        installed by :meth:`finish_open` (or by the next :meth:`get_log`)."""
        tp = (topic, partition)
        if tp in self._logs:
            return None
        fut = self._opening.get(tp)
        if fut is not None or self._executor is None:
            return fut
        job = self._open_job(tp)
        if job is None:
            return None
        fut = self._opening[tp] = self._executor.submit(job)
        return fut

    def finish_open(self, topic: str, partition: int) -> PartitionLog | None:
        """Install the log :meth:`start_open` opened (waiting for it if it is still under way);
        the log now open, or None. Raises what the open raised."""
        tp = (topic, partition)
        fut = self._opening.pop(tp, None)
        if fut is None:
            return self._logs.get(tp)
        if tp in self._swaps:
            return self._finish_swap(tp, fut)
        return self._install(tp, *fut.result())

    def _open_job(self, tp: TopicPartition) -> Callable[[], tuple] | None:
        """Bookkeeping on the owner thread (the dir is chosen and recorded now); the returned job
        does the file work on any thread and returns ``(log, topic_id, log_dir)``."""
        meta = self._topics.get(tp[0])
        if meta is None or not 0 <= tp[1] < meta.partitions:
            return None
        self._check_started()
        if tp in self._offline:
            raise KafkaStorageError(f"partition {tp[0]}-{tp[1]} is offline: the swap of its log directory move "
                                    "failed half-way; a restart completes it")
        d = self._locations.get(tp)
        if d is None:
            d = self._locations[tp] = self._pick_log_dir()
        self._clean[d] = clean = self._clean.get(d, True)
        pdir = os.path.join(d, files.partition_dir_name(*tp))
        log_start_offset = self._log_start_offsets.get(d, {}).get(tp)
        recovery_point = self._recovery_points.get(d, {}).get(tp)
        expiration_ms, rng, batch_indexes = self.producer_id_expiration_ms, self._rng, self._batch_indexes
        mapped_indexes = self._mapped_indexes

        def job() -> tuple[PartitionLog, bytes, str]:
            disk.current().pause("open")
            if not os.path.isdir(pdir):
                _make_partition_dir(pdir, meta.topic_id)
            log = PartitionLog.open(pdir, meta.config, topic=tp[0], partition=tp[1], clean=clean,
                                    log_start_offset=log_start_offset, recovery_point=recovery_point,
                                    producer_id_expiration_ms=expiration_ms, rng=rng,
                                    batch_indexes=batch_indexes, mapped_indexes=mapped_indexes)
            try:
                if read_partition_metadata(pdir) != meta.topic_id:
                    write_partition_metadata(pdir, meta.topic_id)
            except BaseException:
                log.close_handles()
                raise
            return log, meta.topic_id, d

        return job

    def _install(self, tp: TopicPartition, log: PartitionLog, topic_id: bytes, log_dir: str) -> PartitionLog | None:
        """Make an opened log the partition's, unless its topic went away (or was re-created) meanwhile."""
        meta = self._topics.get(tp[0])
        current = self._logs.get(tp)
        if (current is not None or meta is None or meta.topic_id != topic_id or tp[1] >= meta.partitions
                or self._locations.get(tp) != log_dir):
            log.close_handles()
            return current
        log.defer_renames = self._executor is not None   # the broker runs retention's renames
        self._logs[tp] = log
        return log

    def open_logs(self) -> Iterator[tuple[str, int, PartitionLog]]:
        for (topic, partition), log in list(self._logs.items()):
            yield topic, partition, log

    def all_partitions(self) -> list[TopicPartition]:
        return [(m.name, p) for m in self.topics() for p in range(m.partitions)]

    def replica_placements(self) -> list[ReplicaPlacement]:
        """Every replica's log directory, with size and offsets when its log is open (no disk I/O;
        :func:`storage.log_dirs.measure_log_dirs` measures the rest on a worker thread)."""
        out = []
        for (topic, partition), d in sorted(self._locations.items()):
            pdir = os.path.join(d, files.partition_dir_name(topic, partition))
            log = self._logs.get((topic, partition))
            if log is None or log.closed:
                out.append(ReplicaPlacement(topic, partition, d, pdir))
            else:
                out.append(ReplicaPlacement(topic, partition, d, pdir, size_bytes=log.size_bytes,
                                            log_end_offset=log.log_end_offset, high_watermark=log.high_watermark))
            move = self._moves.get((topic, partition))
            if move is not None and move.future_log_end_offset is not None:
                out.append(ReplicaPlacement(topic, partition, move.target_dir, move.future_path, is_future=True,
                                            size_bytes=move.future_size_bytes,
                                            log_end_offset=move.future_log_end_offset))
        return out

    # -- AlterReplicaLogDirs (storage.log_move) --------------------------------------------------------
    def begin_move(self, topic: str, partition: int, log_dir: str) -> tuple[LogMove | None, LogMove | None]:
        """Owner thread: decide a move of the partition to ``log_dir`` (Kafka
        ``ReplicaManager.alterReplicaLogDirs``); ``(move to run, move cancelled)``, either None.

        Already there: nothing to do (a move elsewhere under way is cancelled, as Kafka does when
        the destination changes back). Already moving there: the same move goes on (returned as
        neither). Raises LogDirNotFoundError (not a configured log dir, compared as the absolute
        path, as Kafka does), UnknownTopicOrPartitionError, InvalidTopicError (a name too long
        for a future directory), KafkaStorageError (the partition is offline or being swapped)."""
        self._check_started()
        if log_dir not in self.log_dirs:
            raise LogDirNotFoundError(f"log dir {log_dir} is not found in the config")
        tp = (topic, partition)
        meta = self._topics.get(topic)
        if meta is None or not 0 <= partition < meta.partitions or tp not in self._locations:
            raise UnknownTopicOrPartitionError(f"partition {topic}-{partition} does not exist")
        if tp in self._offline or tp in self._swaps:
            raise KafkaStorageError(f"partition {topic}-{partition} is being swapped or offline")
        existing = self._moves.get(tp)
        if existing is not None and existing.target_dir == log_dir:
            return None, None
        cancelled = None
        if existing is not None:
            existing.cancelled = True
            del self._moves[tp]
            cancelled = existing
        current = self._locations[tp]
        if current == log_dir:
            return None, cancelled
        move = LogMove(topic, partition, current, log_dir, os.path.join(log_dir, future_dir_name(topic, partition)))
        self._moves[tp] = move
        return move, cancelled

    def end_move(self, move: LogMove) -> None:
        """Forget ``move`` (done, failed or cancelled); owner thread."""
        if self._moves.get(move.tp) is move:
            del self._moves[move.tp]

    def _move_source(self, move: LogMove) -> tuple[PartitionLog, bytes, TopicConfig]:
        log = self._logs.get(move.tp)
        meta = self._topics.get(move.topic)
        if move.cancelled or self._moves.get(move.tp) is not move or log is None or log.closed or meta is None:
            raise KafkaStorageError(f"the move of {move.topic}-{move.partition} is no longer under way")
        return log, meta.topic_id, meta.config

    def move_future_job(self, move: LogMove, now_ms: int) -> Callable[[], None]:
        """Owner thread, the partition open: the job (any thread) creating the move's future log."""
        log, topic_id, config = self._move_source(move)
        return future_job(move, log, topic_id, config, self.producer_id_expiration_ms, now_ms,
                          mapped_indexes=self._mapped_indexes)

    def move_copy_job(self, move: LogMove, max_bytes: int, now_ms: int) -> Callable[[], int]:
        """Owner thread: the job (any thread) copying the next ``max_bytes`` into the future log;
        it returns the bytes copied (fewer than ``max_bytes``: the future reached the current end)."""
        return copy_job(move, self._move_source(move)[0], max_bytes, now_ms)

    def start_swap(self, move: LogMove, now_ms: int, submit: Callable[[Callable[[], Any]], concurrent.futures.Future]
                   ) -> tuple[concurrent.futures.Future, Callable[[], None]]:
        """Owner thread: take the current log out of service and run the swap
        (:func:`storage.log_move.commit_move`) through ``submit`` (a worker thread). Until it ends the
        partition is being opened: requests wait for it as for any open, and :meth:`finish_open`
        installs the log where the swap left it. Returns the swap's future and ``after``, to call on
        the owner thread once it is done and installed (the former log is marked flushed and closed)."""
        log, topic_id, config = self._move_source(move)
        job, after = swap_job(move, log, topic_id, config, now_ms, self.producer_id_expiration_ms,
                             batch_indexes=self._batch_indexes, mapped_indexes=self._mapped_indexes)
        tp = move.tp
        del self._logs[tp]
        fut = submit(job)
        self._opening[tp] = fut
        self._swaps[tp] = move
        return fut, lambda: after(fut)

    def _finish_swap(self, tp: TopicPartition, fut: concurrent.futures.Future) -> PartitionLog | None:
        move = self._swaps.pop(tp)
        if self._moves.get(tp) is move:
            del self._moves[tp]
        try:
            log, topic_id, log_dir, outcome = fut.result()
        except BaseException:
            self._offline.add(tp)
            logger.error("log_move_partition_offline", topic=tp[0], partition=tp[1],
                         reason="the swap failed after the current directory was renamed; a restart completes it")
            raise
        self._locations[tp] = log_dir
        meta = self._topics.get(tp[0])
        if outcome.deleted is not None:
            delay_ms = meta.config.file_delete_delay_ms if meta is not None else 0
            self._pending_dirs.append([outcome.deleted, None, delay_ms])
        self._clean[log_dir] = self._clean.get(log_dir, True)
        return self._install(tp, log, topic_id, log_dir)

    # -- periodic work --------------------------------------------------------------------------------
    def run_retention(self, now_ms: int,
                      consumed_upto: Callable[[str, int], int | None] | None = None) -> list[RetentionOutcome]:
        """One retention pass over every partition; outcomes that deleted or held something."""
        self._check_started()
        outcomes = []
        for topic, partition in self.all_partitions():
            log = self.get_log(topic, partition)
            if log is None:
                continue
            upto = None
            if consumed_upto is not None and log.config.consumed_retention_enabled and log.config.delete:
                try:
                    upto = consumed_upto(topic, partition)
                except Exception:  # the group side failing must never stop retention
                    logger.exception("consumed_upto_failed", topic=topic, partition=partition)
                    upto = None
            try:
                outcome = log.delete_old_segments(now_ms, upto)
            except KafkaStorageError as exc:
                logger.error("retention_failed", topic=topic, partition=partition, error=str(exc))
                continue
            log.remove_expired_producers(now_ms)
            if outcome:
                outcomes.append(outcome)
        return outcomes

    def take_expired_files(self, now_ms: int) -> tuple[list[str], list[str]]:
        """``(files, dirs)`` whose delete delay has passed, handed over and forgotten.

        Bookkeeping only, on the owner thread; removing them is file-system work the
        caller may do on another thread (:func:`remove_expired`).
        """
        due_files: list[str] = []
        for _t, _p, log in self.open_logs():
            due_files.extend(log.take_expired_files(now_ms))
        due_dirs: list[str] = []
        keep = []
        for entry in self._pending_dirs:
            path, due, delay = entry
            if due is None:
                entry[1] = due = now_ms + delay
            if due <= now_ms:
                due_dirs.append(path)
            else:
                keep.append(entry)
        self._pending_dirs = keep
        return due_files, due_dirs

    def take_rename_jobs(self) -> list[tuple[TopicPartition, Any]]:
        """Retention's renames to ``.deleted`` owed by the open logs (``storage.log_retention``):
        ``(partition, SegmentRename)`` to run on any thread, then give back to :meth:`renamed`."""
        return [((t, p), job) for t, p, log in self.open_logs() for job in log.take_rename_jobs()]

    def renamed(self, tp: TopicPartition, job) -> None:
        """Owner thread, once ``job.run()`` returned: its files wait for their unlink."""
        log = self._logs.get(tp)
        if log is not None and not log.closed:
            log.renamed(job)

    def delete_expired_files(self, now_ms: int) -> int:
        """Remove ``.deleted`` segment files and ``-delete`` dirs whose delay has passed."""
        return remove_expired(*self.take_expired_files(now_ms))

    def checkpoint(self, *, recovery_points: bool = True, log_start_offsets: bool = True) -> None:
        """Write the checkpoint files of every log dir (tmp + fsync + rename), on this thread."""
        for path, entries in self.checkpoint_contents(recovery_points=recovery_points,
                                                      log_start_offsets=log_start_offsets):
            self.write_checkpoint(path, entries)

    def write_checkpoint(self, path: str, entries: dict) -> None:
        """Write one checkpoint file; safe on a worker thread (one write at a time per manager)."""
        disk.current().pause("checkpoint")
        with self._checkpoint_lock:
            write_offset_checkpoint(path, entries)

    def checkpoint_contents(self, *, recovery_points: bool = True, log_start_offsets: bool = True
                            ) -> list[tuple[str, dict]]:
        """(file, entries) of the checkpoints asked for, read from the logs on the owner thread; the
        writes (:meth:`write_checkpoint`) may then go to a worker, off the event loop. Recovery
        points go every ``log.flush.offset.checkpoint.interval.ms``, log start offsets every
        ``log.flush.start.offset.checkpoint.interval.ms``, as Kafka's two scheduled tasks."""
        self._check_started()
        out: list[tuple[str, dict]] = []
        for d in self.log_dirs:
            known = {tp for tp, loc in self._locations.items() if loc == d}
            recovery = {tp: v for tp, v in self._recovery_points.get(d, {}).items() if tp in known}
            starts = {tp: v for tp, v in self._log_start_offsets.get(d, {}).items() if tp in known}
            for tp in known:
                log = self._logs.get(tp)
                if log is not None:
                    recovery[tp] = log.recovery_point
                    starts[tp] = log.log_start_offset
            self._recovery_points[d] = recovery
            self._log_start_offsets[d] = starts
            if recovery_points:
                out.append((os.path.join(d, files.RECOVERY_POINT_CHECKPOINT_FILE), dict(recovery)))
            if log_start_offsets:
                out.append((os.path.join(d, files.LOG_START_OFFSET_CHECKPOINT_FILE), dict(starts)))
        return out

    def flush_all(self) -> None:
        for _t, _p, log in self.open_logs():
            log.flush()

    def shutdown(self) -> None:
        """Flush and close every open log, write checkpoints and the clean-shutdown markers."""
        if self._shut_down:
            return
        self._check_started()
        failed = False
        for topic, partition in list(self._opening):   # opens under way are finished and closed too
            try:
                self.finish_open(topic, partition)
            except (KafkaStorageError, OSError) as exc:
                failed = True
                logger.error("log_open_failed", topic=topic, partition=partition, error=str(exc))
        for (topic, partition), log in list(self._logs.items()):
            try:
                log.close(flush=True)
            except (KafkaStorageError, OSError) as exc:
                failed = True
                logger.error("log_close_failed", topic=topic, partition=partition, error=str(exc))
        self.checkpoint()
        if not failed:
            for d in self.log_dirs:
                write_clean_shutdown_marker(d)
        self._logs.clear()
        self._shut_down = True
        logger.info("log_manager_shut_down", clean=not failed)

    def close_without_marker(self) -> None:
        """Release every descriptor without flushing or marking clean (tests simulating a crash)."""
        for tp in list(self._opening):
            self._drop_open_under_way(tp)
        for log in self._logs.values():
            log.close_handles()
        self._logs.clear()
        self._shut_down = True


def remove_expired(due_files: list[str], due_dirs: list[str]) -> int:
    """Unlink what :meth:`LogManager.take_expired_files` handed over; number removed.

    Safe on any thread: nothing opens a ``.deleted`` file or a ``-delete`` directory.
    """
    slow = disk.current()
    removed = 0
    for path in due_files:
        slow.pause("unlink")
        removed += files.remove_quietly(path)
    for path in due_dirs:
        slow.pause("unlink")
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


class PendingTopicChange:
    """A topic creation or deletion decided on the owner thread whose file work, :meth:`run`, is
    still to do on any thread (:meth:`LogManager.prepare_create_topic`,
    :meth:`LogManager.prepare_delete_topic`)."""

    __slots__ = ("name", "meta", "run", "dirs", "renamed", "delay_ms")

    def __init__(self, name: str, meta: TopicMetadata, run: Callable[[], None],
                 dirs: list[tuple[int, str]], renamed: list[str] | None = None, delay_ms: int = 0) -> None:
        self.name = name
        self.meta = meta
        self.run = run
        self.dirs = dirs            # (partition, log dir)
        self.renamed = renamed if renamed is not None else []   # deletion: ``-delete`` dirs left to remove
        self.delay_ms = delay_ms


def _rename_for_delete(tp: TopicPartition, path: str) -> str | None:
    """Rename a partition directory to ``<topic>-<p>.<uuid>-delete``; the new path (None: gone already)."""
    target = os.path.join(os.path.dirname(path), files.delete_dir_name(*tp))
    try:
        os.rename(path, target)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KafkaStorageError.from_os_error(exc, f"cannot rename {path} for deletion") from exc
    return target


def _make_partition_dir(pdir: str, topic_id: bytes) -> None:
    """A new partition directory: ``partition.metadata`` and an empty first segment (any thread)."""
    try:
        os.makedirs(pdir, exist_ok=True)
        write_partition_metadata(pdir, topic_id, sync=False)
        log_path = files.log_file(pdir, 0)
        if not os.path.exists(log_path):
            open(log_path, "ab").close()
    except OSError as exc:
        raise KafkaStorageError.from_os_error(exc, f"cannot create partition directory {pdir}") from exc


__all__ = ["LogDirNotFoundError", "LogManager", "PendingTopicChange", "remove_expired"]


def _is_fresh_log_dir(log_dir: str) -> bool:
    """No partition directory and no recovery-point checkpoint: a data directory never used."""
    if os.path.exists(os.path.join(log_dir, files.RECOVERY_POINT_CHECKPOINT_FILE)):
        return False
    return not any(files.parse_partition_dir_name(name) is not None or files.is_delete_dir(name)
                   for name in os.listdir(log_dir))

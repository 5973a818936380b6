"""The daemon's lifecycle: recover logs, listen, serve, and stop cleanly.

Start-up: load the TLS certificates, **bind every listener first** (and the metrics
endpoint) so a busy port or a bad address fails before anything is written; then lock
every data directory (``.lock``, as Kafka does, so two daemons never share one), read or
create ``meta.properties`` (cluster id, node id), open the logs (recovery after an
unclean shutdown happens here and logs its progress), start the group coordinator, and
only then start listening (``listen()`` with a large backlog) on the bound sockets.
A start that cannot succeed raises :class:`StartupError` with one line an operator can
act on (``cannot listen on 127.0.0.1:9092: address already in use``); the command prints
it as ``sundial: error: ...`` and exits 1.

Shutdown (SIGTERM/SIGINT, uvicorn's sequence): stop accepting; wake parked fetches
so they answer with what they have; let each connection finish the request it is
handling, up to ``sundial.shutdown.grace.ms``; close connections; stop the
coordinator; flush every log, write the checkpoints and the clean-shutdown marker.

Periodic work runs as tasks on the same loop (storage is single-threaded):
retention every ``log.retention.check.interval.ms`` (after
``log.initial.task.delay.ms``), removal of ``.deleted`` files, checkpoints every
``log.flush.offset.checkpoint.interval.ms``, the ``flush.ms`` policy, the
``connections.max.idle.ms`` sweep, and the log cleaner (``log.cleaner.enable``;
its long work runs on its own thread, :mod:`broker.log_cleaner`).

The loop never waits on the disk: the blocking file work these tasks and the requests
start runs on the scheduler's ``background.threads`` threads (:mod:`broker.scheduler`);
the protocol schemas are compiled on a worker thread before the listeners open; logs
are recovered on ``num.recovery.threads.per.data.dir`` threads per data dir.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import fcntl
import gc
import os
import socket
import time
import uuid
from typing import Callable

import structlog
from prometheus_client import start_http_server

from sundial.config import BrokerConfig
from sundial.config.broker import BROKER_CONFIGS, unknown_key_warnings
from sundial.records.timestamps import wall_clock_ms
from sundial.protocol.schema_codec import warm_up as warm_up_schemas
from sundial.storage import LogManager, disk
from sundial.storage.log_manager import remove_expired
from sundial.storage.files import write_file_atomically

from . import __version__
from .connection import Connection
from .dispatch import Dispatcher
from .limits import RequestMemoryPool
from .metrics import (BrokerMetrics, PartitionRows, group_lag_rows, group_rows, on_loop, resident_partition_rows,
                      security_rows)
from .node import Broker, build_broker
from .share.metrics import ShareCollector, share_rows
from .txn.metrics import TransactionCollector, txn_rows
from .purgatory import FetchPurgatory
from .scheduler import Scheduler
from .security import build_server_ssl_context

logger = structlog.get_logger(__name__)

SUNDIAL_VERSION = __version__


class StartupError(Exception):
    """The broker cannot start; the message is one line saying what and where (no errno codes)."""


def os_reason(exc: BaseException) -> str:
    """``[Errno 98] Address already in use`` → ``address already in use``."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _same_node_id(text: str, node_id: int) -> bool:
    try:
        return int(text) == node_id
    except ValueError:
        return False


def _address(host: str, port: int) -> str:
    host = host or "0.0.0.0"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_sockets(host: str, port: int, what: str = "") -> list[socket.socket]:
    """Bound, not yet listening, TCP sockets for ``host:port`` (every address of a wildcard host).

    Binding before the data directories are touched is what makes a busy port fail
    first; ``listen()`` happens later, when the broker can answer. Raises
    :class:`StartupError` naming the address (``what`` says which setting it came from).
    """
    shown = _address(host, port) + (f" ({what})" if what else "")
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {shown}: {os_reason(exc)}") from None
    socks: list[socket.socket] = []
    seen = set()
    bound_port = port
    try:
        for family, type_, proto, _name, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            try:
                sock = socket.socket(family, type_, proto)
            except OSError:
                continue  # e.g. no IPv6 in this kernel: asyncio skips the address too
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                # Port 0 on a wildcard host: every address gets the port the first one drew.
                sock.bind((addr[0], bound_port, *addr[2:]))
            except OSError as exc:
                if (not host and family == socket.AF_INET6 and len(socks) > 1
                        and exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)):
                    socks.pop().close()  # a container without IPv6: IPv4 is bound
                    continue
                raise
            bound_port = sock.getsockname()[1]
            sock.setblocking(False)
        if not socks:
            raise OSError(errno.EAFNOSUPPORT, "no usable address")
    except OSError as exc:
        for sock in socks:
            sock.close()
        raise StartupError(f"cannot listen on {shown}: {os_reason(exc)}") from None
    return socks


def _remove_files(paths: list[str]) -> int:
    return remove_expired(paths, [])


def _remove_dirs(paths: list[str]) -> int:
    return remove_expired([], paths)


class BrokerServer:
    """Owns the listeners, the connections and the periodic tasks of one Broker."""

    def __init__(self, config: BrokerConfig, unknown_keys: dict[str, str] | None = None, *,
                 now_ms: Callable[[], int] = wall_clock_ms, flush_threads=None) -> None:
        """``flush_threads``: the fsync threads of the partition flushers (:mod:`broker.flusher`; None:
        their own, closed with them), handed in by a test that needs a failing or slow disk."""
        self.config = config
        self.now_ms = now_ms
        self.flush_threads = flush_threads
        self.metrics = BrokerMetrics()
        self.purgatory = FetchPurgatory()
        self.dispatcher = Dispatcher()
        #: The daemon's parts (:mod:`broker.node`), built once by :meth:`start` when the logs
        #: are loaded. Until then None: a start that fails before it releases what it took.
        self.broker: Broker | None = None
        self.scheduler: Scheduler | None = None   # blocking file work, off the loop (built by start)
        self.unknown_keys = unknown_keys or {}
        self.connections: set[Connection] = set()
        self._per_ip: dict[str, int] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: list[asyncio.Task] = []
        #: What start() took that shutdown() gives back, last taken first released: the
        #: metrics endpoint, the directory locks, the loaded logs, the coordinator's tasks.
        self._release = contextlib.AsyncExitStack()
        self._bound: list[tuple[object, list[socket.socket]]] = []  # (listener, sockets) not yet serving
        self._stopping = False
        self._started = False
        self.bound_ports: dict[str, int] = {}
        self.sendfile_enabled = os.environ.get("SUNDIAL_SENDFILE", "1") != "0"
        self.request_pool = RequestMemoryPool(config.sockets.queued_max_request_bytes)

    # -- admission -----------------------------------------------------------------------
    def admit(self, conn: Connection) -> bool:
        if self._stopping:
            return False
        max_total = self.config.sockets.max_connections
        if len(self.connections) >= max_total:
            logger.warning("connection_refused", client=conn.peer_host, reason="max.connections",
                           limit=max_total)
            self.metrics.connection_refused("max.connections")
            return False
        limit = self.config.sockets.connection_limit_for(conn.peer_host)
        if self._per_ip.get(conn.peer_host, 0) >= limit:
            logger.warning("connection_refused", client=conn.peer_host, reason="max.connections.per.ip",
                           limit=limit)
            self.metrics.connection_refused("max.connections.per.ip")
            return False
        self.connections.add(conn)
        self._per_ip[conn.peer_host] = self._per_ip.get(conn.peer_host, 0) + 1
        self.metrics.connections.set(len(self.connections))
        return True

    def forget(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            share = self.broker.share_partitions if self.broker is not None else None
            if share is not None:  # its share sessions end, their records go back at once
                share.connection_closed(conn.conn_id)
            left = self._per_ip.get(conn.peer_host, 1) - 1
            if left <= 0:
                self._per_ip.pop(conn.peer_host, None)
            else:
                self._per_ip[conn.peer_host] = left
            self.metrics.connections.set(len(self.connections))

    # -- start ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind, load, serve; raises :class:`StartupError` (or ``ConfigError``) when it cannot."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        # Nothing is written before every address is ours: certificates, listeners, metrics.
        ssl_contexts = {listener.name: build_server_ssl_context(cfg.ssl) for listener in cfg.listeners
                        if listener.security_protocol in ("SSL", "SASL_SSL")}
        advertised = {l.name: l for l in cfg.advertised_listeners}
        for listener in cfg.listeners:
            socks = bind_sockets(listener.host, listener.port)
            self._bound.append((listener, socks))
            receive_buffer_bytes = cfg.sockets.receive_buffer_bytes
            if receive_buffer_bytes != -1:
                # Set before listen(), so accepted sockets inherit it and the window scale
                # offered in the handshake fits it (Kafka's Acceptor does the same).
                for sock in socks:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
            port = socks[0].getsockname()[1]
            self.bound_ports[listener.name] = port
            adv = advertised.get(listener.name)
            if listener.port == 0 and adv is not None and adv.port == 0:
                # An ephemeral port: advertise what was bound unless advertised.listeners says otherwise.
                advertised[listener.name] = type(adv)(adv.name, adv.host, port, adv.security_protocol)
        if cfg.metrics_listener is not None:
            self._start_metrics_endpoint(*cfg.metrics_listener)
        log_dirs = [os.path.abspath(d) for d in cfg.log_dirs]
        for d in log_dirs:
            self._prepare_dir(d)
        cluster_id = self._read_or_create_meta(log_dirs)
        for key, did_you_mean in unknown_key_warnings(self.unknown_keys):
            if did_you_mean:
                logger.warning("config_key_ignored", key=key, did_you_mean=did_you_mean)
            else:
                logger.warning("config_key_ignored", key=key)
        for key, reason in BROKER_CONFIGS.without_effect(cfg.explicit):
            logger.warning("config_key_without_effect", key=key, reason=reason)
        disk.install_from_environment()
        # Compiled while the logs load; awaited before the listeners open.
        schemas = loop.run_in_executor(None, warm_up_schemas, dict(self.dispatcher.advertised))
        self.scheduler = scheduler = Scheduler(cfg.log_scheduling.background_threads)
        self._release.callback(scheduler.close)   # released last: the logs' shutdown may still use it
        t0 = time.monotonic()
        logs = LogManager(log_dirs, cfg.explicit,
                          producer_id_expiration_ms=cfg.log_scheduling.producer_id_expiration_ms,
                          recovery_threads_per_data_dir=cfg.log_scheduling.recovery_threads_per_data_dir,
                          executor=scheduler.executor)
        try:
            await asyncio.to_thread(logs.startup)
        except OSError as exc:
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            raise StartupError(f"cannot load the logs in {', '.join(log_dirs)}: {os_reason(exc)}{where}") from None
        self._release.push_async_callback(asyncio.to_thread, logs.shutdown)
        logger.info("logs_loaded", log_dirs=log_dirs, topics=len(logs.topics()),
                    seconds=round(time.monotonic() - t0, 3))
        self.broker = broker = build_broker(cfg, now_ms=self.now_ms, cluster_id=cluster_id, advertised=advertised,
                                            logs=logs, metrics=self.metrics, purgatory=self.purgatory,
                                            dispatcher=self.dispatcher, scheduler=scheduler,
                                            flush_threads=self.flush_threads)
        self._release.callback(broker.close_flushers)      # after every writer below has stopped
        self._release.push_async_callback(broker.replica_manager.close)
        self._release.push_async_callback(broker.groups.stop)
        await broker.groups.start()
        if broker.share_state is not None:  # replayed on a worker thread, before the listeners open
            self._release.push_async_callback(broker.share_state.stop)
            await broker.share_state.start()
        if broker.share_partitions is not None:  # closed before the store stops: pending writes finish
            self._release.push_async_callback(broker.share_partitions.close)
            self.metrics.registry.register(ShareCollector(on_loop(loop, lambda: share_rows(broker.share_partitions))))
        self._release.push_async_callback(broker.transactions.stop)
        await broker.transactions.start()
        self.metrics.registry.register(TransactionCollector(on_loop(loop, lambda: txn_rows(broker.transactions))))
        # Scrapes run on prometheus_client's thread; storage and groups are read on the loop.
        self.metrics.install_partition_collector(resident_partition_rows(loop, PartitionRows(
            lambda: logs, internal_topics=cfg.metrics_internal_topics_enabled)))
        self.metrics.install_group_lag_collector(on_loop(loop, lambda: group_lag_rows(broker.groups)))
        self.metrics.install_group_collector(on_loop(loop, lambda: group_rows(broker.groups)))
        self.metrics.install_security_collector(on_loop(loop, lambda: security_rows(broker.security,
                                                                                   broker.authorizer)))
        t_schemas = time.monotonic()
        compiled = await schemas
        logger.info("protocol_schemas_loaded", versions=compiled,
                    waited_seconds=round(time.monotonic() - t_schemas, 3))
        # Everything built so far (modules, configs, schemas, the log manager) lives as long as
        # the process: move it out of the collector's reach so full collections stay short. The
        # collection itself is a full one (80 ms here): done before the listeners open, no
        # request waits for it.
        gc.collect()
        gc.freeze()
        while self._bound:
            listener, socks = self._bound.pop(0)
            for sock in socks:
                srv = await loop.create_server(
                    lambda l=listener: Connection(self, l), sock=sock,
                    backlog=cfg.sockets.listen_backlog_size, ssl=ssl_contexts.get(listener.name))
                self._servers.append(srv)
        self._start_periodic_tasks()
        self._started = True
        logger.info("broker_started", version=SUNDIAL_VERSION, node_id=broker.node_id,
                    cluster_id=broker.cluster_id,
                    listeners=[f"{l.name}://{l.host or '0.0.0.0'}:{self.bound_ports[l.name]}"
                               for l in cfg.listeners],
                    advertised=[l.uri for l in broker.advertised.values()], log_dirs=log_dirs,
                    event_loop=type(loop).__module__.split(".")[0],
                    apis=len(broker.dispatcher.advertised))

    def _prepare_dir(self, d: str) -> None:
        """Create and lock one data directory (StartupError when it is not usable)."""
        if os.path.exists(d) and not os.path.isdir(d):
            raise StartupError(f"data directory {d} is not a directory")
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise StartupError(f"cannot create data directory {d}: {os_reason(exc)}") from None
        self._lock_dir(d)

    def _lock_dir(self, d: str) -> None:
        try:
            fd = os.open(os.path.join(d, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StartupError(f"cannot lock data directory {d}: {os_reason(exc)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StartupError(f"data directory {d} is locked by another Sundial or Kafka process") from None
        self._release.callback(_close_quietly, fd)

    def _read_or_create_meta(self, log_dirs: list[str]) -> str:
        """Kafka's ``meta.properties``: the cluster id and node id of each data directory."""
        cluster_id = None
        for d in log_dirs:
            path = os.path.join(d, "meta.properties")
            if os.path.exists(path):
                props = {}
                try:
                    with open(path, encoding="utf-8") as fh:
                        for line in fh:
                            line = line.strip()
                            if line and not line.startswith("#") and "=" in line:
                                k, v = line.split("=", 1)
                                props[k.strip()] = v.strip()
                except (OSError, UnicodeDecodeError) as exc:
                    raise StartupError(f"cannot read {path}: {os_reason(exc)}") from None
                node = props.get("node.id") or props.get("broker.id")
                if node is not None and not _same_node_id(node, self.config.node_id):
                    raise StartupError(f"{path} belongs to node.id {node}, but this broker is node.id "
                                       f"{self.config.node_id}")
                if cluster_id is None:
                    cluster_id = props.get("cluster.id")
        if cluster_id is None:
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        for d in log_dirs:
            path = os.path.join(d, "meta.properties")
            if not os.path.exists(path):
                try:
                    write_file_atomically(path, (f"#\n#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n"
                                                 f"cluster.id={cluster_id}\nnode.id={self.config.node_id}\n"
                                                 "version=1\n").encode("utf-8"))
                except OSError as exc:
                    raise StartupError(f"cannot write {path}: {os_reason(exc)}") from None
        return cluster_id

    def _start_metrics_endpoint(self, host: str, port: int) -> None:
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.metrics.registry)
        except OSError as exc:
            raise StartupError(f"cannot listen on {_address(host, port)} (sundial.metrics.listener): "
                               f"{os_reason(exc)}") from None
        # shutdown() waits for the serving thread's next poll (up to 0.5 s): not on the event loop
        self._release.push_async_callback(asyncio.to_thread, server.shutdown)
        self.metrics_port = server.server_address[1]
        logger.info("metrics_listening", address=f"{host}:{self.metrics_port}")

    # -- periodic work ----------------------------------------------------------------------
    def _start_periodic_tasks(self) -> None:  # noqa: C901 - one row per periodic task
        sched = self.config.log_scheduling
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._every(
            sched.retention_check_interval_ms, self._retention_pass,
            initial_delay_ms=sched.initial_task_delay_ms, name="retention")))
        self._tasks.append(loop.create_task(self._every(1000, self._housekeeping, name="housekeeping")))
        cp = sched.flush_offset_checkpoint_interval_ms
        if cp > 0:
            self._tasks.append(loop.create_task(self._every(
                cp, lambda: self._checkpoint(recovery_points=True, log_start_offsets=False), name="checkpoint")))
        start_cp = sched.flush_start_offset_checkpoint_interval_ms
        if start_cp > 0:
            self._tasks.append(loop.create_task(self._every(
                start_cp, lambda: self._checkpoint(recovery_points=False, log_start_offsets=True),
                name="start-offset-checkpoint")))
        idle_ms = self.config.sockets.connections_max_idle_ms
        if idle_ms > 0:
            self._tasks.append(loop.create_task(self._every(min(max(idle_ms // 4, 50), 10_000),
                                                            self._close_idle, name="idle")))
        # flush.messages and the flush Kafka does after every roll (recovery point), every second;
        # flush.ms every log.flush.scheduler.interval.ms (Kafka's flusher), see
        # LogSchedulingConfig.flush_check_interval_ms.
        self._tasks.append(loop.create_task(self._every(1000, lambda: self._flush_due(time_check=False),
                                                        name="flush")))
        self._tasks.append(loop.create_task(self._every(sched.flush_check_interval_ms,
                                                        lambda: self._flush_due(time_check=True),
                                                        name="flush-ms")))
        self._tasks.append(loop.create_task(self._every(60_000, self._expire_producers, name="producers")))
        if self.broker.cleaner is not None:
            self._tasks.append(loop.create_task(self.broker.cleaner.run(), name="log-cleaner"))

    async def _every(self, period_ms: int, fn, *, initial_delay_ms: int | None = None, name: str) -> None:
        await asyncio.sleep((period_ms if initial_delay_ms is None else initial_delay_ms) / 1000)
        while True:
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("periodic_task_failed", task=name)
            await asyncio.sleep(period_ms / 1000)

    async def _retention_pass(self) -> None:
        await self.broker.replica_manager.run_retention()

    async def _housekeeping(self) -> None:
        # Unlinking a large segment can take long on a slow disk: only the bookkeeping
        # runs on the event loop, the unlinks on the scheduler's threads, in parallel.
        due_files, due_dirs = self.broker.logs.take_expired_files(self.broker.now_ms())
        if due_files:
            await self.scheduler.run_all(_remove_files, due_files)
        if due_dirs:
            await self.scheduler.run_all(_remove_dirs, due_dirs)

    async def _checkpoint(self, **which) -> None:
        await self.broker.replica_manager.write_checkpoints(**which)   # read on the loop, written off it

    async def _flush_due(self, *, time_check: bool) -> None:
        await self.broker.replica_manager.flush_due(time_check=time_check)

    def _expire_producers(self) -> None:
        now = self.broker.now_ms()
        for _topic, _partition, log in self.broker.logs.open_logs():
            log.remove_expired_producers(now)

    def _close_idle(self) -> None:
        idle_s = self.config.sockets.connections_max_idle_ms / 1000
        now = time.monotonic()
        for conn in list(self.connections):
            if (not conn.busy or conn.write_blocked) and now - conn.last_active_monotonic > idle_s:
                logger.info("connection_idle_closed", conn_id=conn.conn_id, client=conn.peer_host,
                            idle_ms=int((now - conn.last_active_monotonic) * 1000))
                conn.close()

    # -- stop --------------------------------------------------------------------------------
    async def shutdown(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        if self._started:  # after a failed start the one error line says it all
            logger.info("broker_stopping", connections=len(self.connections),
                        request_pool_peak_bytes=self.request_pool.peak_bytes,
                        request_pool_limit_bytes=self.request_pool.limit_bytes)
        for _listener, socks in self._bound:
            for sock in socks:
                sock.close()
        self._bound.clear()
        for srv in self._servers:
            srv.close()
        self.purgatory.wake_all()
        broker = self.broker
        if broker is not None:
            broker.groups.begin_shutdown()  # parked joins/syncs answer NOT_COORDINATOR now
        for conn in list(self.connections):
            conn.stop_after_current()
        grace_s = self.config.sockets.shutdown_grace_ms / 1000
        deadline = time.monotonic() + grace_s
        while any(c.busy for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            conn.close()
        if broker is not None and broker.cleaner is not None:
            await broker.cleaner.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for srv in self._servers:
            try:
                await asyncio.wait_for(srv.wait_closed(), 1.0)
            except (asyncio.TimeoutError, Exception):
                pass
        await self._release.aclose()
        if self._started:
            logger.info("broker_stopped")

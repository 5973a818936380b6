"""``socket.send.buffer.bytes`` and ``socket.receive.buffer.bytes`` reach the sockets.

The broker runs in process (real BrokerServer, real loopback sockets); the test reads the
buffer sizes of the broker's own end of an accepted connection with ``getsockopt``. Linux
reports twice the size asked for (the kernel keeps the doubled value for its bookkeeping,
socket(7)), which is the ground truth the test computes. -1 leaves the kernel's choice:
what an accepted loopback socket of a plain listener gets, read the same way.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from sundial.config import BrokerConfig, ConfigError


async def _server_side_socket(settings: dict, tmp_path):
    from sundial.broker.server import BrokerServer

    server = BrokerServer(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                                        **settings}))
    await server.start()
    port = server.bound_ports[server.config.listeners[0].name]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    deadline = asyncio.get_running_loop().time() + 60
    while not server.connections:
        assert asyncio.get_running_loop().time() < deadline, "the broker never saw the connection"
        await asyncio.sleep(0.01)
    [conn] = server.connections
    sock = conn.transport.get_extra_info("socket")
    sizes = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    writer.close()
    await server.shutdown()
    return sizes


@pytest.mark.asyncio
async def test_configured_sizes_are_set_on_accepted_sockets(tmp_path):
    send, receive = await _server_side_socket(
        {"socket.send.buffer.bytes": "65536", "socket.receive.buffer.bytes": "32768"}, tmp_path)
    assert (send, receive) == (2 * 65536, 2 * 32768)


@pytest.mark.asyncio
async def test_kafka_defaults_are_100_kib(tmp_path):
    send, receive = await _server_side_socket({}, tmp_path)
    assert (send, receive) == (2 * 102_400, 2 * 102_400)


def _kernel_choice() -> tuple[int, int]:
    """(SO_SNDBUF, SO_RCVBUF) the kernel gives an accepted loopback socket nobody sized."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        with socket.create_connection(listener.getsockname()) as _client:
            accepted, _ = listener.accept()
            with accepted:
                return (accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                        accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))


@pytest.mark.asyncio
async def test_minus_one_keeps_the_kernel_choice(tmp_path):
    send, receive = await _server_side_socket(
        {"socket.send.buffer.bytes": "-1", "socket.receive.buffer.bytes": "-1"}, tmp_path)
    assert (send, receive) == _kernel_choice()


@pytest.mark.parametrize("name", ["socket.send.buffer.bytes", "socket.receive.buffer.bytes"])
@pytest.mark.parametrize("value", ["0", "-2"])
def test_sizes_below_one_other_than_minus_one_are_refused(name, value, tmp_path):
    with pytest.raises(ConfigError, match=name):
        BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), name: value})

"""Producer id allocation for InitProducerId, never reused across restarts.

Ids are handed out from blocks of ``BLOCK_SIZE``. The file ``producer-id-block`` in
the first data directory holds one decimal number: the first id not yet reserved.
A block is reserved (file rewritten with tmp + fsync + rename) *before* any id of
it is handed out, so a crash can waste ids but never give the same id twice: a
reused id with epoch 0 would collide with the sequence state kept for the old
producer and be refused as out of order.
"""

from __future__ import annotations

import os

from sundial.storage.files import write_file_atomically

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"


class ProducerIdManager:
    def __init__(self, data_dir: str) -> None:
        self._path = os.path.join(data_dir, FILE_NAME)
        self._next = 0
        self._block_end = 0
        try:
            with open(self._path, encoding="ascii") as fh:
                self._block_end = self._next = max(0, int(fh.read().strip() or 0))
        except (OSError, ValueError):
            self._block_end = self._next = 0

    def _reserve_block(self) -> None:
        end = self._next + BLOCK_SIZE
        write_file_atomically(self._path, f"{end}\n".encode("ascii"))
        self._block_end = end

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._reserve_block()
        pid = self._next
        self._next += 1
        return pid

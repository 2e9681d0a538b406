"""A few Kafka protocol requests by hand, for what a client library will not do on purpose:
send one idempotent batch twice, or with a gap in its sequence numbers.

Only ``InitProducerId`` v1 and ``Produce`` v3 (record batch v2, uncompressed) are spoken.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def record_batch(pid: int, epoch: int, sequence: int, records: list[tuple[bytes, bytes]]) -> bytes:
    now = int(time.time() * 1000)
    body = bytearray()
    for i, (key, value) in enumerate(records):
        rec = b"\x00" + varint(0) + varint(i) + varint(len(key)) + key + varint(len(value)) + value + varint(0)
        body += varint(len(rec)) + rec
    after_crc = struct.pack(">hiqqqhii", 0, len(records) - 1, now, now, pid, epoch, sequence, len(records)) + bytes(
        body
    )
    rest = struct.pack(">ib", -1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(rest)) + rest


@dataclass
class ProduceResult:
    error: int
    base_offset: int


class KafkaWire:
    def __init__(self, host: str, port: int, timeout: float = 20.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()

    def _request(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation += 1
        header = struct.pack(">hhi", api_key, version, self.correlation) + string("tidemark-tests")
        payload = header + body
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", self._recv(4))[0]
        response = self._recv(size)
        assert struct.unpack(">i", response[:4])[0] == self.correlation
        return response[4:]

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def init_producer_id(self) -> tuple[int, int]:
        """An idempotent (non-transactional) producer id and epoch."""
        r = self._request(22, 1, string(None) + struct.pack(">i", 60000))
        _throttle, error, pid, epoch = struct.unpack(">ihqh", r[:16])
        assert error == 0, f"InitProducerId failed with error {error}"
        return pid, epoch

    def produce(
        self, topic: str, partition: int, pid: int, epoch: int, sequence: int, records: list[tuple[bytes, bytes]]
    ) -> ProduceResult:
        batch = record_batch(pid, epoch, sequence, records)
        body = (
            string(None)
            + struct.pack(">hi", -1, 10000)
            + struct.pack(">i", 1)
            + string(topic)
            + struct.pack(">i", 1)
            + struct.pack(">ii", partition, len(batch))
            + batch
        )
        r = self._request(0, 3, body)
        pos = 4  # topics count
        name_len = struct.unpack(">h", r[pos : pos + 2])[0]
        pos += 2 + name_len + 4  # name, partitions count
        _index, error, base_offset = struct.unpack(">ihq", r[pos : pos + 14])
        return ProduceResult(error, base_offset)

"""A child process that commits one large batch to Redis and dies on the way.

``python redis_commit_child.py URL NAMESPACE N HOW`` opens the full range of materialization
``view`` (resuming from batch 0), then commits batch 1: every one of N documents rewritten
with tag ``v1`` and every tenth key deleted, in one script.  ``HOW``:

* ``partial:F`` — send the first fraction F of the script's bytes, then SIGKILL itself;
* ``sent``      — send all of it, then SIGKILL itself before the reply;
* ``signal``    — print ``committing`` and commit; the parent SIGKILLs it whenever it likes.

The connection is named ``CLIENT_NAME`` (second line of stdout) so that the parent can
see when the server is done with it.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid

from redis.connection import Connection

from tidemark.drivers.redis.script import COMMIT_LUA
from tidemark.drivers.redis.store import RedisConfig, RedisStore
from tidemark.protocol.messages import Range

PAD = "x" * 100


def batch(prefix: str, n: int, tag: str):
    return [(prefix, (f"k{i:06d}",), {"k": i, "tag": tag, "pad": PAD}) for i in range(n)]


def main(url: str, namespace: str, n: int, how: str) -> None:
    store = RedisStore(RedisConfig.from_config({"url": url, "namespace": namespace}))
    name = f"tm-child-{uuid.uuid4().hex[:8]}"
    store.client.client_setname(name)
    fence = store.open_range("view", Range())
    assert fence.checkpoint and fence.checkpoint["batch_id"] == 0, fence
    store.client.script_load(COMMIT_LUA)  # EVALSHA must not meet NOSCRIPT: that needs a reply
    if how != "signal":
        fraction = 1.0 if how == "sent" else float(how.partition(":")[2])

        def send_and_die(self, command, check_health=True):
            data = b"".join(command if isinstance(command, list) else [command])
            self._sock.sendall(data[: int(len(data) * fraction)])
            os.kill(os.getpid(), signal.SIGKILL)

        Connection.send_packed_command = send_and_die
    prefix = namespace + "docs:"
    print("committing", flush=True)
    print(name, flush=True)
    store.commit(
        fence,
        {"checkpoint_id": "ck", "batch_id": 1},
        batch(prefix, n, "v1"),
        deletes=[(prefix, (f"k{i:06d}",)) for i in range(0, n, 10)],
    )
    print("committed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])

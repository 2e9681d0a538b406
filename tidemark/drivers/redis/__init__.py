"""The ``redis`` endpoint: data keys ``<prefix><key JSON>`` and a checkpoints hash per view.

* :mod:`.layout` — data keys, the checkpoints hash
* :mod:`.fences` — Open: bump overlapping fences, inherit (``plan_open``)
* :mod:`.script` — the commit script (fence check + data + checkpoint)
* :mod:`.store` — :class:`RedisStore`: open_range, load, commit, write
* :mod:`.persistence` — AOF settings and the exactly-once warning
* :mod:`.connection` — redis-py without its retries; error translation
* :mod:`.driver` — :class:`RedisDriver`, the protocol on top of the store

Needs ``pip install 'tidemark[redis]'``.
"""

from tidemark.drivers.redis.driver import RedisDriver

__all__ = ["RedisDriver"]

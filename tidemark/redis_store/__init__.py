"""Redis as a tidemark endpoint, as a library (the driver class builds on it).

* :mod:`~tidemark.redis_store.layout` — data keys ``<prefix><key JSON>``, the checkpoints hash
* :mod:`~tidemark.redis_store.fences` — Open: bump overlapping fences, inherit (``plan_open``)
* :mod:`~tidemark.redis_store.script` — the commit script (fence check + data + checkpoint)
* :mod:`~tidemark.redis_store.store` — :class:`RedisStore`: open_range, load, commit, write
* :mod:`~tidemark.redis_store.persistence` — AOF settings and the exactly-once warning
* :mod:`~tidemark.redis_store.connection` — redis-py without its retries; error translation

Needs ``pip install 'tidemark[redis]'``.
"""

from tidemark.redis_store.fences import RangeFence
from tidemark.redis_store.persistence import Persistence
from tidemark.redis_store.store import AT_LEAST_ONCE, EXACTLY_ONCE, Committed, RedisConfig, RedisStore

__all__ = ["AT_LEAST_ONCE", "EXACTLY_ONCE", "Committed", "Persistence", "RangeFence", "RedisConfig", "RedisStore"]

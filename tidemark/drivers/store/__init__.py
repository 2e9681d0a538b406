"""The ``store`` endpoint (issue #21): a transactional key-value view per shard range on
RocksDB, queryable while it is written.  :mod:`.driver` (config, Validate/Apply, Open,
inspection), :mod:`.transactor` (one shard session), :mod:`.view` (reading every range at
one batch), :mod:`.naming` (directories and keys), :mod:`.query` (``tidemark.open_view``).
Needs ``rocksdict``: ``pip install 'tidemark[store]'``."""

from tidemark.drivers.store.driver import CAPABILITIES, StoreDriver

__all__ = ["CAPABILITIES", "StoreDriver"]

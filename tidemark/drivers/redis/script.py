"""The commit: one Lua script that checks the fence, writes the data and the checkpoint.

Redis runs a script atomically: no other command runs between its first and last line,
and its writes reach the AOF and the replicas as one ``MULTI``/``EXEC`` block (a
truncated block at the end of an AOF is dropped at load).  A client that dies while
sending the script sends an incomplete command, which the server never runs.  So a
commit is all or nothing, for a killed client as for a killed server.

The script makes no write before it has checked the fence, and after that only calls
that cannot fail on a well-formed hash (``SET``, ``DEL``, ``HSET``, and ``RPUSH`` to keys it has
checked to be lists or absent): Redis does not roll
a script back, so a script that failed half-way would leave half a commit.

One script per commit, never chunked: chunks would be separate transactions, and a crash
between them would leave part of a batch visible under the old checkpoint.  The price is
that the whole commit travels in one request (bounded by the server's
``client-query-buffer-limit``, 1 GiB by default; tidemark refuses a commit above
``max_commit_bytes`` before sending it) and that the server serves nobody else while the
script runs (about a microsecond per key, see docs/dev/redis-webhook.md).

``KEYS = [checkpoints hash, upserted keys..., appended-to keys..., deleted keys...]``
``ARGV = [fence field, expected fence, checkpoint field, checkpoint JSON, number of upserts,
number of appends, upserted values..., appended values...]``

Upserts are ``SET``; appends are ``RPUSH`` (delta-updates rows, quarantined documents).
Returns ``{1, fence}`` when committed, ``{2, fence}`` when the range already holds exactly
this checkpoint (a retry after a lost reply: nothing is written again, so appends are not
doubled), ``{0, current fence or ""}`` when fenced off, ``{3, key}`` when an appended-to key
holds something other than a list (nothing written).
"""

from __future__ import annotations

COMMIT_LUA = """
local fence = redis.call('HGET', KEYS[1], ARGV[1])
if fence ~= ARGV[2] then
  return {0, fence or ''}
end
if redis.call('HGET', KEYS[1], ARGV[3]) == ARGV[4] then
  return {2, fence}
end
local n = tonumber(ARGV[5])
local m = tonumber(ARGV[6])
for i = 1, m do
  local t = redis.call('TYPE', KEYS[1 + n + i])['ok']
  if t ~= 'none' and t ~= 'list' then
    return {3, KEYS[1 + n + i]}
  end
end
for i = 1, n do
  redis.call('SET', KEYS[1 + i], ARGV[6 + i])
end
for i = 1, m do
  redis.call('RPUSH', KEYS[1 + n + i], ARGV[6 + n + i])
end
local first = 2 + n + m
while first <= #KEYS do
  local last = math.min(first + 999, #KEYS)
  redis.call('DEL', unpack(KEYS, first, last))
  first = last + 1
end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
return {1, fence}
"""

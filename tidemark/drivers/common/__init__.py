"""What every endpoint shares, whatever it is: the fenced checkpoints' Open rule
(:mod:`.fences`), the column model of table-like endpoints (:mod:`.columns`), passwords
out of messages (:mod:`.redact`).  Nothing here knows SQL, Spark or a client library."""

"""The PostgreSQL driver behind a real connection pooler (PgBouncer), in front of the test server.

tidemark stages rows in temp tables of its session, so a pooler that hands each
*transaction* any server connection (PgBouncer's ``pool_mode = transaction``) could send a
Store to one server process and the commit to another: rows of one session staged into
another's tables. The driver checks, first thing in every Load, Store and commit
transaction, that it runs in the server process it opened in; these tests force the
switch through PgBouncer and check the refusal, and that session pooling works.

The fixture starts a private ``pgbouncer`` (the machine's binary; as the ``postgres`` user
when the tests run as root, which PgBouncer refuses to run as). Without one the tests skip,
or fail where ``TIDEMARK_REQUIRE_ALL`` is set, as ``.ci/run`` does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading

import psycopg
import pytest

from tests.support.driver_protocol import MAT, apply, binding, doc, open_session, txn
from tests.support.helpers import free_port, server_user, skip_unless_required
from tidemark.drivers.postgres import PostgresDriver
from tidemark.errors import DriverError, EndpointUnavailable

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pgbouncer(postgres_url):
    """URLs of two pools in front of the test server: ``transaction`` and ``session`` mode."""
    binary = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None)
    if binary is None:
        skip_unless_required("no pgbouncer binary on this machine")
    run_as, owner = server_user("pgbouncer")
    info = psycopg.conninfo.conninfo_to_dict(postgres_url)
    host, port = info.get("host", "127.0.0.1"), info.get("port", "5432")
    user, dbname = info.get("user", "postgres"), info.get("dbname", "test")
    base = tempfile.mkdtemp(prefix="tidemark-pgbouncer-")
    listen = free_port()
    with open(os.path.join(base, "users.txt"), "w") as f:
        f.write(f'"{user}" ""\n')
    with open(os.path.join(base, "pgbouncer.ini"), "w") as f:
        f.write(f"""[databases]
tm_tx = host={host} port={port} dbname={dbname} pool_mode=transaction
tm_session = host={host} port={port} dbname={dbname} pool_mode=session
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {base}/users.txt
default_pool_size = 4
logfile = {base}/pgbouncer.log
pidfile = {base}/pgbouncer.pid
ignore_startup_parameters = application_name,extra_float_digits
""")
    if owner is not None:
        for name in (base, *(os.path.join(base, n) for n in os.listdir(base))):
            os.chown(name, owner.pw_uid, owner.pw_gid)
    # In the foreground, logging to stderr as well: its "listening on" line is the signal
    # that it accepts connections.
    proc = subprocess.Popen(
        [*run_as, binary, "-v", os.path.join(base, "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "listening on 127.0.0.1" in line:
            break
    else:
        proc.wait()
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail("pgbouncer did not start:\n" + "".join(seen[-20:]))
    drain = threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True)  # keep the pipe from filling
    drain.start()
    try:
        yield {mode: f"postgresql://{user}@127.0.0.1:{listen}/tm_{mode}" for mode in ("tx", "session")}
    finally:
        with open(os.path.join(base, "pgbouncer.pid")) as f:
            os.kill(int(f.read().strip()), signal.SIGTERM)  # pgbouncer itself, under runuser
        proc.wait()
        drain.join()
        shutil.rmtree(base, ignore_errors=True)


def test_transaction_pooling_is_refused_before_anything_is_staged(pgbouncer, pg_schema, postgres_url):
    url = pgbouncer["tx"]
    d = PostgresDriver({"url": url, "schema": pg_schema, "retry": {"attempts": 2, "base_delay": 0}})
    b = binding()
    try:
        apply(d, b)
        t, opened = open_session(d, b)
        assert opened.runtime_checkpoint is None
        # Another client's open transaction now holds the server process the session opened
        # in (PgBouncer reuses the most recently released one first): the session's next
        # transaction must run in another one.
        with psycopg.connect(url, prepare_threshold=None) as holder:
            held = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
            assert held == t.session  # pg_backend_pid() at Open
            with pytest.raises(DriverError, match="pool_mode = transaction") as exc:
                txn(t, b, [doc("a", 1), doc("b", 2)], 0)
            assert not isinstance(exc.value, EndpointUnavailable)  # terminal: retrying cannot help
            assert f"pid {t.session}, then" in str(exc.value)
        t.close()
    finally:
        d.close()
    with psycopg.connect(postgres_url) as con:
        assert con.execute(f'SELECT count(*) FROM "{pg_schema}".customers').fetchone()[0] == 0
        assert con.execute(f'SELECT checkpoint FROM "{pg_schema}".tidemark_checkpoints').fetchall() == [(None,)]


def test_session_pooling_works(pgbouncer, pg_schema):
    d = PostgresDriver({"url": pgbouncer["session"], "schema": pg_schema})
    b = binding()
    try:
        apply(d, b)
        t, _ = open_session(d, b)
        txn(t, b, [doc("a", 1), doc("b", 2)], 0)
        assert txn(t, b, [doc("a", 3)], 1) == {("a",): doc("a", 1)}
        t.close()
        # a new session on a server process the pool reuses: PgBouncer's reset dropped the
        # old session's temp tables, and the new session makes its own
        t, opened = open_session(d, b)
        assert opened.runtime_checkpoint["batch_id"] == 1
        assert txn(t, b, [doc("b", 4)], 2) == {("b",): doc("b", 2)}
        t.close()
        assert d.dump(MAT, b) == {("a",): doc("a", 3), ("b",): doc("b", 4)}
    finally:
        d.close()

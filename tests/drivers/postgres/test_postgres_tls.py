"""The PostgreSQL driver over TLS, against a private server that only accepts TLS.

The shared test server has TLS off, so this module starts its own from the machine's
PostgreSQL binaries (``initdb``, ``pg_ctl``; as the ``postgres`` user when the tests run as
root, which PostgreSQL refuses to run as). A test CA (``trustme``) issues the server's
certificate, for ``localhost`` only, and a client certificate for a role that may only log
in with one; another role logs in with a password (scram-sha-256), which the shared server
(trust) cannot refuse. ``pg_hba.conf`` rejects every connection without TLS, so a session
that works went over TLS.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import subprocess
import tempfile
import uuid

import psycopg
import pytest

from tests.support.driver_protocol import MAT, apply, binding, doc, open_session, txn
from tests.support.helpers import (
    free_port,
    normalize,
    oracle_orders,
    orders_spec,
    postgres_view,
    server_user,
    skip_unless_required,
    write_orders,
)
from tidemark.drivers.postgres import PostgresDriver
from tidemark.errors import AuthenticationFailed, DriverError, EndpointUnavailable

pytestmark = pytest.mark.postgres

SECRET = "tls-s3cr3t-Pa55"
CERT_USER = "tidemark_cert_user"
PASSWORD_USER = "tidemark_password_user"


def _bindir() -> str | None:
    for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True):
        if os.access(os.path.join(path, "initdb"), os.X_OK):
            return path
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


class TlsServer:
    def __init__(self, base: str, port: int, ca_file: str, other_ca_file: str, client_cert: str, client_key: str):
        self.base, self.port = base, port
        self.ca_file, self.other_ca_file = ca_file, other_ca_file
        self.client_cert, self.client_key = client_cert, client_key

    def config(self, schema: str, **extra) -> dict:
        return {
            "host": "localhost",
            "port": self.port,
            "user": "postgres",
            "database": "postgres",
            "schema": schema,
            "sslmode": "verify-full",
            "sslrootcert": self.ca_file,
            **extra,
        }

    def stop(self) -> None:
        subprocess.run(
            [*self.run_as, os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-m", "fast", "-w", "stop"],
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        subprocess.run(
            [
                *self.run_as,
                os.path.join(self.bindir, "pg_ctl"),
                "-D",
                self.data,
                "-l",
                os.path.join(self.base, "log"),
                "-w",
                "-t",
                "60",
                "-o",
                self.options,
                "start",
            ],
            check=True,
            capture_output=True,
        )

    def admin(self) -> psycopg.Connection:
        """A connection over the Unix socket (trusted), to set up and inspect."""
        return psycopg.connect(host=self.base, port=self.port, user="postgres", dbname="postgres", autocommit=True)


@pytest.fixture(scope="module")
def tls_server():
    import trustme  # in the test extra

    bindir = _bindir()
    if bindir is None:
        skip_unless_required("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    run_as, owner = server_user("a private PostgreSQL server")
    base = tempfile.mkdtemp(prefix="tidemark-pg-tls-")
    data = os.path.join(base, "data")

    def own(path: str, mode: int) -> None:
        os.chmod(path, mode)
        if owner is not None:
            os.chown(path, owner.pw_uid, owner.pw_gid)

    own(base, 0o700)
    ca, other_ca = trustme.CA(), trustme.CA()
    server_cert = ca.issue_cert("localhost")
    files = {
        name: os.path.join(base, name)
        for name in ("ca.crt", "other-ca.crt", "server.crt", "server.key", "client.crt", "client.key")
    }
    ca.cert_pem.write_to_path(files["ca.crt"])
    other_ca.cert_pem.write_to_path(files["other-ca.crt"])
    server_cert.cert_chain_pems[0].write_to_path(files["server.crt"])
    server_cert.private_key_pem.write_to_path(files["server.key"])
    for name in ("ca.crt", "server.crt", "server.key"):
        own(files[name], 0o600)
    # the client's files belong to whoever runs the tests (libpq wants the key at 0600)
    client = ca.issue_cert("tidemark-client.test", common_name=CERT_USER)  # the CN is the role
    client.cert_chain_pems[0].write_to_path(files["client.crt"])
    client.private_key_pem.write_to_path(files["client.key"])
    os.chmod(files["client.key"], 0o600)
    os.chmod(files["other-ca.crt"], 0o644)
    os.chmod(base, 0o711)  # the client reads its files and the CA by path; the data dir stays 0700

    port = free_port()
    subprocess.run(
        [
            *run_as,
            os.path.join(bindir, "initdb"),
            "-D",
            data,
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        ],
        check=True,
        capture_output=True,
    )
    with open(os.path.join(data, "pg_hba.conf"), "w") as f:
        f.write(
            "local all all trust\n"
            f"hostssl all {CERT_USER} 127.0.0.1/32 cert\n"
            f"hostssl all {CERT_USER} ::1/128 cert\n"
            f"hostssl all {PASSWORD_USER} 127.0.0.1/32 scram-sha-256\n"
            f"hostssl all {PASSWORD_USER} ::1/128 scram-sha-256\n"
            "hostssl all all 127.0.0.1/32 trust\n"
            "hostssl all all ::1/128 trust\n"
            "hostnossl all all 0.0.0.0/0 reject\n"
            "hostnossl all all ::/0 reject\n"
        )
    options = " ".join(
        [
            f"-c port={port}",
            "-c listen_addresses=localhost",
            f"-c unix_socket_directories={base}",
            "-c ssl=on",
            f"-c ssl_cert_file={files['server.crt']}",
            f"-c ssl_key_file={files['server.key']}",
            f"-c ssl_ca_file={files['ca.crt']}",
            "-c fsync=off",
            "-c shared_buffers=16MB",
            "-c max_connections=20",
        ]
    )
    started = subprocess.run(
        [
            *run_as,
            os.path.join(bindir, "pg_ctl"),
            "-D",
            data,
            "-l",
            os.path.join(base, "log"),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
        ],
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        log = open(os.path.join(base, "log")).read() if os.path.exists(os.path.join(base, "log")) else ""
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"private TLS server did not start: {started.stderr}\n{log}")
    server = TlsServer(base, port, files["ca.crt"], files["other-ca.crt"], files["client.crt"], files["client.key"])
    server.run_as, server.bindir, server.data, server.options = run_as, bindir, data, options
    try:
        with server.admin() as con:
            con.execute(f'CREATE ROLE "{CERT_USER}" LOGIN')
            con.execute(f'GRANT CREATE ON DATABASE postgres TO "{CERT_USER}"')
            con.execute(f"CREATE ROLE \"{PASSWORD_USER}\" LOGIN PASSWORD '{SECRET}'")
        yield server
    finally:
        subprocess.run(
            [*run_as, os.path.join(bindir, "pg_ctl"), "-D", data, "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def tls_schema(tls_server):
    return f"tm_tls_{uuid.uuid4().hex[:10]}"


def _ssl_sessions(server: TlsServer, user: str) -> list[tuple]:
    with server.admin() as con:
        return con.execute(
            "SELECT s.ssl, s.client_dn FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
            "WHERE a.usename = %s AND a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()",
            (user,),
        ).fetchall()


def test_verify_full_round_trip(tls_server, tls_schema):
    """sslmode verify-full with the CA: a whole transaction, over TLS, and nothing without it."""
    d = PostgresDriver(tls_server.config(tls_schema, password=SECRET))
    try:
        b = binding()
        apply(d, b)
        t, opened = open_session(d, b)
        assert opened.runtime_checkpoint is None
        sessions = _ssl_sessions(tls_server, "postgres")  # the driver's and the shard session's
        assert sessions and all(ssl for ssl, _dn in sessions)
        txn(t, b, [doc("a", 1), doc("b", 2)], 0)
        assert txn(t, b, [doc("a", 3)], 1) == {("a",): doc("a", 1)}
        t.close()
        assert d.dump(MAT, b) == {("a",): doc("a", 3), ("b",): doc("b", 2)}
        assert [r.runtime_checkpoint["batch_id"] for r in d.checkpoints(MAT)] == [1]
    finally:
        d.close()
    # The same server without TLS: pg_hba.conf refuses it, a terminal error naming no secret.
    plain = PostgresDriver(
        tls_server.config(tls_schema, sslmode="disable", password=SECRET, retry={"attempts": 3, "base_delay": 0})
    )
    try:
        with pytest.raises(AuthenticationFailed, match="no encryption") as exc:
            plain.checkpoints(MAT)
        assert SECRET not in str(exc.value)
    finally:
        plain.close()


def test_verify_full_refuses_a_certificate_from_another_ca(tls_server, tls_schema):
    d = PostgresDriver(
        tls_server.config(
            tls_schema, sslrootcert=tls_server.other_ca_file, password=SECRET, retry={"attempts": 3, "base_delay": 0}
        )
    )
    try:
        with pytest.raises(DriverError, match="TLS settings refused") as exc:
            d.checkpoints(MAT)
        assert not isinstance(exc.value, EndpointUnavailable)  # a misconfiguration is not retried
        assert "certificate" in str(exc.value) and SECRET not in str(exc.value)
    finally:
        d.close()


def test_verify_full_checks_the_host_name_and_verify_ca_does_not(tls_server, tls_schema):
    """The server's certificate names ``localhost`` only."""
    d = PostgresDriver(tls_server.config(tls_schema, host="127.0.0.1", retry={"attempts": 3, "base_delay": 0}))
    try:
        with pytest.raises(DriverError, match="TLS settings refused") as exc:
            d.checkpoints(MAT)
        assert "does not match host name" in str(exc.value)
        assert not isinstance(exc.value, EndpointUnavailable)
    finally:
        d.close()
    d = PostgresDriver(tls_server.config(tls_schema, host="127.0.0.1", sslmode="verify-ca"))
    try:
        assert d.checkpoints(MAT) == []
    finally:
        d.close()


def test_client_certificate_login(tls_server, tls_schema):
    """A role that may only log in with a certificate: sslcert/sslkey do it; without them it is refused."""
    d = PostgresDriver(
        tls_server.config(tls_schema, user=CERT_USER, sslcert=tls_server.client_cert, sslkey=tls_server.client_key)
    )
    try:
        b = binding()
        apply(d, b)
        t, _ = open_session(d, b)
        sessions = _ssl_sessions(tls_server, CERT_USER)
        # a client certificate was presented (pg_stat_ssl cuts its DN at 63 bytes); the login
        # itself shows that its CN names the role, as the `cert` method requires
        assert sessions and all(ssl and dn and "/CN=" in dn for ssl, dn in sessions)
        txn(t, b, [doc("k", 7)], 0)
        t.close()
        assert d.dump(MAT, b) == {("k",): doc("k", 7)}
    finally:
        d.close()
    d = PostgresDriver(tls_server.config(tls_schema, user=CERT_USER, retry={"attempts": 3, "base_delay": 0}))
    try:
        refused = "TLS settings refused.*requires a valid client certificate.*sslcert"
        with pytest.raises(DriverError, match=refused) as exc:
            d.checkpoints(MAT)
        assert not isinstance(exc.value, EndpointUnavailable)
    finally:
        d.close()


@pytest.mark.spark
def test_spark_run_over_tls_with_separate_fields(spark, tmp_path, tls_server, tls_schema):
    """A spec that names host, port, user and the TLS files as separate fields, end to end."""
    from tidemark.spark.runner import run_spec

    data = tmp_path / "data"
    write_orders(data, files=2, per_file=100, customers=30, seed=77, deletes=0.05)
    endpoint = tls_server.config(
        tls_schema, user=CERT_USER, sslcert=tls_server.client_cert, sslkey=tls_server.client_key
    )
    spec = orders_spec(
        tmp_path, data_dir=data, db_path=None, shards=2, max_files=1, name="view", endpoint={"postgres": endpoint}
    )
    reports: list = []
    run_spec(spec, spark=spark, on_batch=reports.append)
    assert [r.batch_id for r in reports] == [0, 1]
    conninfo = psycopg.conninfo.make_conninfo(
        "",
        host="localhost",
        port=str(tls_server.port),
        user=CERT_USER,
        dbname="postgres",
        sslmode="verify-full",
        sslrootcert=tls_server.ca_file,
        sslcert=tls_server.client_cert,
        sslkey=tls_server.client_key,
    )
    assert normalize(postgres_view(conninfo, tls_schema)) == oracle_orders(data)


def test_wrong_password_is_refused_terminally_and_never_shown(tls_server, tls_schema, caplog):
    """A role with scram-sha-256: the right password logs in; a wrong one, as a field or in
    the URL, is an AuthenticationFailed naming the user and neither password, not retried."""
    caplog.set_level(logging.DEBUG)
    d = PostgresDriver(tls_server.config(tls_schema, user=PASSWORD_USER, password=SECRET))
    try:
        assert d.checkpoints(MAT) == []
    finally:
        d.close()
    wrong = "Wr0ng-" + SECRET
    url = (
        f"postgresql://{PASSWORD_USER}:{wrong}@localhost:{tls_server.port}/postgres"
        f"?sslmode=verify-full&sslrootcert={tls_server.ca_file}"
    )
    for config in (
        tls_server.config(tls_schema, user=PASSWORD_USER, password=wrong),
        {"url": url, "schema": tls_schema},
    ):
        d = PostgresDriver({**config, "retry": {"attempts": 3, "base_delay": 0}})
        try:
            with pytest.raises(AuthenticationFailed, match=PASSWORD_USER) as exc:
                d.checkpoints(MAT)
            assert "password authentication failed" in str(exc.value)
            assert wrong not in str(exc.value) and SECRET not in str(exc.value)
            assert wrong not in repr(d) and wrong not in str(d.settings)
        finally:
            d.close()
    assert not [r for r in caplog.records if "retry" in r.getMessage()]  # refused at once
    assert all(wrong not in r.getMessage() and SECRET not in r.getMessage() for r in caplog.records)


def test_a_server_that_comes_back_is_reached_by_the_retry_policy(tls_server, tls_schema, caplog):
    """The server is down when the driver connects: the first attempt fails as transient, the
    server starts again before the retry, and the retry connects (over TLS, with a password)."""
    seen: list[str] = []

    class StartOnFirstRetry(logging.Handler):
        def emit(self, record):
            if "try 1 of " in record.getMessage() and not seen:
                seen.append(record.getMessage())
                tls_server.start()  # returns once the server accepts connections

    handler = StartOnFirstRetry(level=logging.WARNING)
    logging.getLogger("tidemark.policy").addHandler(handler)
    tls_server.stop()
    d = PostgresDriver(
        tls_server.config(tls_schema, user=PASSWORD_USER, password=SECRET, retry={"attempts": 5, "base_delay": 0.01})
    )
    try:
        assert d.checkpoints(MAT) == []
    finally:
        d.close()
        logging.getLogger("tidemark.policy").removeHandler(handler)
        if not seen:
            tls_server.start()
    assert len(seen) == 1 and "EndpointUnavailable" in seen[0] and SECRET not in seen[0]


def test_tidemark_run_finds_a_wrong_password_before_spark_starts(tls_server, tls_schema, tmp_path):
    """`tidemark run` checks its endpoints before it starts Spark: a wrong password is one
    error line within seconds, naming the user and no password, and no JVM is started."""
    import subprocess
    import sys
    import time

    data = tmp_path / "data"
    write_orders(data, files=1, per_file=10, customers=5, seed=3)
    wrong = "Wr0ng-" + SECRET
    spec = orders_spec(
        tmp_path,
        data_dir=data,
        db_path=None,
        endpoint={"postgres": tls_server.config(tls_schema, user=PASSWORD_USER, password=wrong)},
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tidemark", "run", spec, "--available-now"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith("error: ") and PASSWORD_USER in lines[0], done.stderr
    assert "password authentication failed" in done.stderr
    assert wrong not in done.stderr + done.stdout and SECRET not in done.stderr + done.stdout
    assert "log4j" not in done.stderr and "Spark" not in done.stderr  # Spark never started
    assert took < 20, took

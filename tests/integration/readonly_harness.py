"""What the read-only compute tests share: the pageserver's `basebackup`
command as bytes (any mode), through its pgwire port with the admin token,
and a free port on 127.0.0.1.
"""
import io

import psycopg

from conftest import pg_user


def pageserver_conn(cluster):
    port = cluster.status()["pageserver"]["pg_port"]
    admin, _token = cluster.tokens()
    return psycopg.connect("host=127.0.0.1 port=%d user=%s dbname=postgres" % (port, pg_user()),
                           autocommit=True, connect_timeout=10, password=admin)


def basebackup(cluster, lsn, mode=""):
    """The archive bytes of `basebackup T TL lsn [mode]`."""
    tenant, timeline = cluster.ids()
    cmd = "basebackup %s %s %s%s" % (tenant, timeline, lsn, " " + mode if mode else "")
    buf = io.BytesIO()
    with pageserver_conn(cluster) as conn:
        with conn.cursor().copy(cmd) as copy:
            for chunk in copy:
                buf.write(chunk)
    return buf.getvalue()

/*
 * test/forward/lying_standby.c: a "lying standby" for
 * test/run-67-forward-standbys.sh.  It opens a physical replication
 * connection on a slot, starts streaming at the server's current flush
 * position and reports (a standby status update, 'r') that it has
 * written, flushed and applied AHEAD bytes more than that, which it was
 * never sent: what a diverged old leader's walreceiver reports on its
 * first reply after a failover (its own replay end).  Then it reads and
 * discards what the walsender sends, answering keepalives with the same
 * report, until the connection ends or it is killed.
 *
 *   lying_standby CONNINFO SLOT AHEAD
 *
 * Prints "start=X/X lie=X/X walsender=PID" on stdout once the report is
 * sent.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <libpq-fe.h>

static void
die(PGconn *conn, const char *what)
{
	fprintf(stderr, "lying_standby: %s: %s\n", what, PQerrorMessage(conn));
	exit(1);
}

static void
put64(char *p, uint64_t v)
{
	int			i;

	for (i = 7; i >= 0; i--, v >>= 8)
		p[i] = (char) (v & 0xff);
}

/* microseconds since 2000-01-01, PostgreSQL's epoch */
static uint64_t
pg_now(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return ((uint64_t) tv.tv_sec - 946684800ULL) * 1000000ULL + (uint64_t) tv.tv_usec;
}

static void
report(PGconn *conn, uint64_t lsn)
{
	char		msg[34];

	msg[0] = 'r';
	put64(msg + 1, lsn);		/* written */
	put64(msg + 9, lsn);		/* flushed */
	put64(msg + 17, lsn);		/* applied */
	put64(msg + 25, pg_now());
	msg[33] = 0;
	if (PQputCopyData(conn, msg, sizeof(msg)) != 1 || PQflush(conn) != 0)
		die(conn, "sending the status update");
}

int
main(int argc, char **argv)
{
	char		conninfo[4096];
	char		cmd[512];
	PGconn	   *conn;
	PGresult   *res;
	unsigned	hi, lo;
	uint64_t	start, lie;
	char	   *buf;
	int			n;

	if (argc != 4)
	{
		fprintf(stderr, "usage: lying_standby CONNINFO SLOT AHEAD\n");
		return 2;
	}
	snprintf(conninfo, sizeof(conninfo), "%s replication=true", argv[1]);
	conn = PQconnectdb(conninfo);
	if (PQstatus(conn) != CONNECTION_OK)
		die(conn, "connecting");
	res = PQexec(conn, "IDENTIFY_SYSTEM");
	if (PQresultStatus(res) != PGRES_TUPLES_OK ||
		sscanf(PQgetvalue(res, 0, 2), "%X/%X", &hi, &lo) != 2)
		die(conn, "IDENTIFY_SYSTEM");
	start = ((uint64_t) hi << 32) | lo;
	snprintf(cmd, sizeof(cmd), "START_REPLICATION SLOT %s PHYSICAL %X/%X TIMELINE %s",
			 argv[2], hi, lo, PQgetvalue(res, 0, 1));
	PQclear(res);
	res = PQexec(conn, cmd);
	if (PQresultStatus(res) != PGRES_COPY_BOTH)
		die(conn, cmd);
	PQclear(res);
	lie = start + strtoull(argv[3], NULL, 10);
	report(conn, lie);
	printf("start=%X/%X lie=%X/%X walsender=%d\n", hi, lo,
		   (unsigned) (lie >> 32), (unsigned) lie, PQbackendPID(conn));
	fflush(stdout);
	while ((n = PQgetCopyData(conn, &buf, 0)) > 0)
	{
		/* a keepalive asking for a reply: the same report again */
		if (buf[0] == 'k' && n >= 18 && buf[17])
			report(conn, lie);
		PQfreemem(buf);
	}
	return 0;
}

# Crash matrix, row 4: immediate shutdown in the middle of
# esrc.rebuild_snapshot().
#
# A snapshot table is filled by reducer v1; the reducer is then replaced
# by v2 and a rebuild starts, which replays the log into a new heap stream
# by stream (src/snapshot/snaprebuild.c).  A gate in v2 (an advisory lock the test
# holds) stops the rebuild half way, with the rows of earlier streams
# already in the new heap, while an append to the category and one to
# another category commit (the rebuild does not hold appends back).  After
# "pg_ctl stop -m immediate" and crash recovery: the table holds the rows
# it had (v1, and the append's event applied by v2), no new heap is left,
# both appends are stored; a new rebuild gives exactly the v2 rows, and
# appends keep the table current in their own transaction.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use EsrcTap;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = esrc_node('crash_snapshot');
$node->safe_psql('postgres', <<'SQL');
CREATE FUNCTION public.acct_reducer(state jsonb, ev esrc.event) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    RETURN jsonb_build_object('n', coalesce((state->>'n')::int, 0) + 1,
                              'sum', coalesce((state->>'sum')::bigint, 0) + coalesce((ev.data->>'amount')::bigint, 0),
                              'last', ev.version);
END
$$;
SELECT esrc.append_batch('acct-' || s,
    (SELECT jsonb_agg(jsonb_build_object('type', 'Deposited', 'data', jsonb_build_object('amount', s * 100 + v)))
     FROM generate_series(0, 39) v))
FROM generate_series(10, 59) s;
SELECT esrc.create_snapshot('public.acct_state', 'acct', 'public.acct_reducer(jsonb, esrc.event)'::regprocedure);
SQL

# rows as reducer v1 (r => null) or v2 (r => 2) makes them from the log,
# leaving out the stream $except if given
sub mismatches
{
	my ($r, $except) = @_;
	my $extra = $r ? "|| jsonb_build_object('r', $r)" : '';
	my $but = $except ? "AND stream <> '$except'" : '';
	return $node->safe_psql('postgres', <<"SQL");
SELECT count(*) FROM
    (SELECT stream, count(*) n, sum(coalesce((data->>'amount')::bigint, 0)) s, max(version) v
     FROM esrc.events WHERE category = 'acct' $but GROUP BY stream) e
    FULL JOIN (SELECT * FROM public.acct_state WHERE true $but) t USING (stream)
WHERE t.version IS DISTINCT FROM e.v
   OR t.state IS DISTINCT FROM jsonb_build_object('n', e.n, 'sum', e.s, 'last', e.v) $extra
SQL
}
is(mismatches(0), '0', 'create_snapshot filled the table with the v1 rows of all 50 streams');

# reducer v2, with a gate at stream acct-35 (sorted in the middle)
$node->safe_psql('postgres', <<'SQL');
CREATE OR REPLACE FUNCTION public.acct_reducer(state jsonb, ev esrc.event) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    IF ev.stream = 'acct-35' AND ev.version = 20 THEN
        PERFORM pg_advisory_xact_lock_shared(4243);
    END IF;
    RETURN jsonb_build_object('n', coalesce((state->>'n')::int, 0) + 1,
                              'sum', coalesce((state->>'sum')::bigint, 0) + coalesce((ev.data->>'amount')::bigint, 0),
                              'last', ev.version, 'r', 2);
END
$$;
SQL

my $gate = $node->background_psql('postgres');
$gate->query_safe('SELECT pg_advisory_lock(4243)');
my $rebuild = $node->background_psql('postgres');
my $rebuild_pid = backend_pid($rebuild);
$rebuild->query_until(qr/rebuilding/,
	"\\echo rebuilding\nSELECT esrc.rebuild_snapshot('public.acct_state');\n");
wait_for_wait_event($node, $rebuild_pid, 'advisory');

is($node->safe_psql('postgres', "SELECT esrc.append('acct-12', 'Deposited', '{\"amount\": 1}', NULL, 39)"),
	'40', 'an append to the category commits while the rebuild runs, without waiting for it');
is($node->safe_psql('postgres', "SELECT esrc.append('other-1', 'Noted', '{}', NULL, -1)"),
	'0', 'an append to another category commits while the rebuild runs');
is(mismatches(0, 'acct-12'), '0', 'readers see the v1 rows while the rebuild runs');
is($node->safe_psql('postgres', "SELECT version || '|' || state FROM public.acct_state WHERE stream = 'acct-12'"),
	'40|{"n": 41, "r": 2, "sum": 48781, "last": 40}',
	'the append during the rebuild moved its row with the current reducer (v2)');

my $log_offset = -s $node->logfile;
$node->stop('immediate');
$node->start;
ok($node->log_contains(qr/database system was not properly shut down; automatic recovery in progress/,
		$log_offset), 'the server ran crash recovery');
crashed_session_done($_) for ($gate, $rebuild);

is(mismatches(0, 'acct-12'), '0',
	'after recovery the table holds exactly the rows it had: the half-done rebuild left no trace');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_class WHERE relname LIKE 'pg\\_temp\\_%' AND relnamespace = 'public'::regnamespace"),
	'0', 'and no new heap of it is left');
is($node->safe_psql('postgres', "SELECT esrc.stream_version('acct-12')"), '40',
	'the append to the category that committed during the rebuild is stored');
is($node->safe_psql('postgres', "SELECT esrc.stream_version('other-1')"), '0',
	'the append to another category that committed during the rebuild is stored');
ok_checks($node, 'after recovery');

is($node->safe_psql('postgres', "SELECT esrc.rebuild_snapshot('public.acct_state')"),
	'2001', 'a rebuild after recovery applies all 2001 events');
is(mismatches(2), '0', 'and the table holds exactly the v2 rows');
is($node->safe_psql('postgres', <<'SQL'), '0', 'snapshot_at agrees with every row');
SELECT count(*) FROM public.acct_state t
WHERE esrc.snapshot_at('public.acct_state', t.stream, t.version) IS DISTINCT FROM t.state
SQL

is($node->safe_psql('postgres', <<'SQL'), '41|{"n": 42, "r": 2, "sum": 48782, "last": 41}',
BEGIN;
SELECT esrc.append('acct-12', 'Deposited', '{"amount": 1}', NULL, 40) \gset
SELECT version || '|' || state FROM public.acct_state WHERE stream = 'acct-12';
COMMIT;
SQL
	'an append after recovery updates its snapshot row in its own transaction');
is(mismatches(2), '0', 'every row still matches the log');
my $n = appends_continue($node);
ok($n >= 51, "appends continue at the right versions in all $n streams");
is(mismatches(2), '0', 'and the snapshot follows them');

$node->stop;
done_testing();

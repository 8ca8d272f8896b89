# pg_dump/pg_restore of a database with snapshot tables (src/snapshot/snapshot.c).
#
# The definitions in esrc.snapshots are dumped with the extension (a
# configuration table) and the snapshot tables as ordinary tables.  After a
# restore into a fresh cluster: the definitions and the rows are identical,
# the rows agree with the restored log (a rebuild changes nothing), appends
# keep the snapshots current in their own transaction, the dependencies are
# back (the reducer cannot be dropped from under a snapshot), and
# drop_snapshot works.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use EsrcTap;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tmp = $PostgreSQL::Test::Utils::tmp_check;
my $src = esrc_node('snap_source');
$src->safe_psql('postgres', 'CREATE DATABASE bank');
$src->safe_psql('bank', <<'SQL');
CREATE EXTENSION esrc;
CREATE FUNCTION public.balance(state jsonb, ev esrc.event) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('balance', coalesce((state->>'balance')::numeric, 0)
                                         + coalesce((ev.data->>'amount')::numeric, 0),
                              'events', coalesce((state->>'events')::int, 0) + 1)
$$;
SELECT esrc.append('acct-' || (i % 20), 'Deposited', jsonb_build_object('amount', i * 1.25))
FROM generate_series(1, 400) i;
SELECT esrc.create_snapshot('public.balances', 'acct', 'public.balance(jsonb, esrc.event)'::regprocedure);
SELECT esrc.create_snapshot('public.merged', 'acct', 'esrc.merge(jsonb, esrc.event)'::regprocedure,
                            '{"opened": true}');
SELECT esrc.append('acct-' || (i % 20), 'Withdrawn', jsonb_build_object('amount', -i, 'note', 'ü'))
FROM generate_series(1, 40) i;
SQL

my $defs = "SELECT string_agg(concat_ws('|', snapshot::text, category, reducer, initial_state::text,"
  . " created_at), E'\\n' ORDER BY snapshot::text) FROM esrc.snapshots";
my $rows = "SET TimeZone = 'UTC';"
  . " SELECT string_agg(concat_ws('|', 'b', stream, version, state::text, updated_at), E'\\n' ORDER BY stream)"
  . " FROM public.balances UNION ALL"
  . " SELECT string_agg(concat_ws('|', 'm', stream, version, state::text, updated_at), E'\\n' ORDER BY stream)"
  . " FROM public.merged";
my %before = (defs => $src->safe_psql('bank', $defs), rows => $src->safe_psql('bank', $rows));
like($before{defs}, qr/^balances\|acct\|.*\nmerged\|acct\|/s, 'two snapshot definitions');

my $dump = "$tmp/bank.dump";
command_ok([ 'pg_dump', '-d', $src->connstr('bank'), '-Fc', '-f', $dump ], 'pg_dump -Fc');
my $dst = esrc_node('snap_target');
$dst->safe_psql('postgres', 'CREATE DATABASE bank');
command_ok([ 'pg_restore', '-d', $dst->connstr('bank'), '--exit-on-error', $dump ],
	'pg_restore into a fresh cluster');

is($dst->safe_psql('bank', $defs), $before{defs}, 'the snapshot definitions are restored');
is($dst->safe_psql('bank', $rows), $before{rows}, 'the snapshot rows are restored identically');
ok_checks($dst, 'restored', 'bank');

# the restored rows agree with the restored log
is($dst->safe_psql('bank', "SELECT esrc.rebuild_snapshot('public.balances')"), '440',
	'rebuild of the restored snapshot applies all 440 events');
is($dst->safe_psql('bank', "SELECT esrc.rebuild_snapshot('public.merged')"), '440',
	'and of the second one');
my $after_rebuild = $dst->safe_psql('bank', $rows);
$after_rebuild =~ s/\|[^|\n]*$//mg;
(my $restored = $before{rows}) =~ s/\|[^|\n]*$//mg;
is($after_rebuild, $restored, 'a rebuild changes no state and no version: the restore was consistent');

# appends keep the snapshots current, in their own transaction
is($dst->safe_psql('bank', <<'SQL'), '22|t|t|22|t', 'an append updates both snapshots');
BEGIN;
SELECT esrc.append('acct-3', 'Deposited', '{"amount": 0.5}', NULL, 21) \gset
SELECT concat_ws('|', b.version,
                 (b.state->>'balance')::numeric = (SELECT sum((data->>'amount')::numeric)
                                                   FROM esrc.events WHERE stream = 'acct-3'),
                 (b.state->>'events')::int = 23, m.version, m.state->>'amount' = '0.5'
                                                  AND m.state->>'opened' = 'true')
FROM public.balances b JOIN public.merged m USING (stream) WHERE stream = 'acct-3';
COMMIT;
SQL
is($dst->safe_psql('bank', <<'SQL'), '1|{"events": 1, "balance": 7}', 'a new stream appears in the snapshot');
SELECT esrc.append('acct-new', 'Deposited', '{"amount": 7}', NULL, -1) \gset
SELECT count(*) || '|' || min(state::text) FROM public.balances WHERE stream = 'acct-new';
SQL
is($dst->safe_psql('bank', <<'SQL'), '0', 'snapshot_at agrees with every restored row');
SELECT count(*) FROM public.balances t
WHERE esrc.snapshot_at('public.balances', t.stream, t.version) IS DISTINCT FROM t.state
SQL

my ($ret, $out, $err) = $dst->psql('bank', 'DROP FUNCTION public.balance(jsonb, esrc.event)');
like($err, qr/cannot drop function balance\(jsonb,event\) because other objects depend on it.*table balances depends on function/s,
	'the reducer of a restored snapshot cannot be dropped: the dependency is back');
$dst->safe_psql('bank', "SELECT esrc.drop_snapshot('public.merged')");
is($dst->safe_psql('bank', "SELECT count(*) FROM esrc.snapshots WHERE snapshot::text = 'public.merged'")
	  . $dst->safe_psql('bank', "SELECT count(*) FROM pg_class WHERE relname = 'merged'"),
	'00', 'drop_snapshot of a restored snapshot removes its definition and its table');
my $n = appends_continue($dst, 'bank');
ok($n >= 21, "appends continue at the right versions in all $n streams");

$src->stop;
$dst->stop;
done_testing();

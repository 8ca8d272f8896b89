# pg_dump and restore of a database that uses esrc.
#
# A source database gets a log with awkward content (unicode stream
# names, deep and large JSON, JSON null versus SQL NULL metadata, batches,
# rolled-back appends that leave holes in the positions) and one append
# still in flight while pg_dump runs.  It is dumped in the custom format
# (restored with pg_restore into a fresh cluster, after pg_dumpall
# --globals-only) and in the plain format (restored with psql into a new
# database of the same cluster).  Each restored log must be byte-for-byte
# the log as of the dump (COPY text of every column, and the stored size of
# every jsonb value), keep the append-only triggers and the privileges,
# continue the position sequence past every position the source handed
# out, and continue every stream at the right version.  The roles that
# esrc's catalogs refer to hold the marker esrc.referenced_role after each
# restore, and after one without the dumped ACLs (pg_restore --no-acl).
#
# Snapshot tables (src/sql/10_snapshot.sql) are dumped with the extension
# if they are configuration tables; this test checks the event log only.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use EsrcTap;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tmp = $PostgreSQL::Test::Utils::tmp_check;
my $src = esrc_node('dump_source');
$src->safe_psql('postgres', 'CREATE DATABASE shop');
$src->safe_psql('shop', <<'SQL');
CREATE EXTENSION esrc;
CREATE ROLE shop_app LOGIN IN ROLE esrc_writer;
SELECT esrc.append('order-1', 'OrderPlaced', '{"total": 42.50, "items": [1, 2, 3]}',
                   '{"user": "ann"}', -1, 'f3b0c1de-0000-4000-8000-000000000001');
SELECT esrc.append('order-1', 'OrderPaid', 'null', 'null', 0);
SELECT esrc.append('order-1', 'OrderShipped', '"a string"', NULL, 1);
SELECT esrc.append('用户-åß∂-🎉', 'Registered', '{"name": "Zoë \"quoted\" \\ back\nslash", "e": 1e-7, "big": 123456789012345678901234567890}');
SELECT esrc.append_batch('cart-1', '[
  {"type": "CartCreated", "data": {"owner": "ann"}},
  {"type": "ItemAdded", "data": {"sku": "x1"}, "metadata": {"by": "ann"}, "id": "f3b0c1de-0000-4000-8000-000000000002"},
  {"type": "ItemAdded", "data": {"sku": "x2"}, "metadata": null}
]', -1);
-- deep and large values
SELECT esrc.append('blob-1', 'Deep', (SELECT (repeat('{"a": ', 200) || '1' || repeat('}', 200))::jsonb));
SELECT esrc.append('blob-1', 'Large', jsonb_build_object('s', repeat('xyz', 100000)), NULL, 0);
-- many streams and events
SELECT esrc.append('bulk-' || (i % 50), 'Bulk', jsonb_build_object('i', i)) FROM generate_series(1, 2000) i;
SQL
# roles that esrc's catalogs refer to hold USAGE on the marker
# esrc.referenced_role (src/projection/rolemarker.c): restored with the dump
$src->safe_psql('shop', <<'SQL');
CREATE ROLE shop_owner IN ROLE esrc_subscriber, esrc_reader;
SET ROLE shop_owner;
SELECT esrc.create_subscription('shop_sub', ARRAY['order']);
RESET ROLE;
SELECT esrc.grant_subscription('shop_sub', 'shop_app');
SQL
# rolled-back appends leave holes in the positions
$src->safe_psql('shop',
	"BEGIN; SELECT esrc.append('rolled-1', 'Gone', '{}'); ROLLBACK;");
$src->safe_psql('shop', <<'SQL');
BEGIN;
SELECT esrc.append('order-1', 'Kept', '{}');
SAVEPOINT s;
SELECT esrc.append_batch('cart-1', '[{"type": "Gone", "data": {}}]');
ROLLBACK TO s;
SELECT esrc.append('cart-1', 'Kept', '{}', NULL, 2);
COMMIT;
SQL

# an append in flight while pg_dump runs
my $holder = $src->background_psql('shop');
$holder->query_safe('BEGIN');
$holder->query_safe("SELECT esrc.append('held-1', 'Held', '{}')");

my $copy = "SET TimeZone = 'UTC'; COPY (SELECT * FROM esrc.events ORDER BY position) TO STDOUT;";
my $sizes = "SELECT string_agg(position || ':' || pg_column_size(data) || ':'"
  . " || coalesce(pg_column_size(metadata)::text, 'null'), ',' ORDER BY position) FROM esrc.events";
my $seq = 'SELECT last_value, is_called FROM esrc.position_seq';
my $acl = "SELECT string_agg(p.oid::regprocedure::text || '=' || coalesce(p.proacl::text, 'default'), ';'"
  . " ORDER BY p.oid::regprocedure::text) FROM pg_proc p"
  . " WHERE p.pronamespace = 'esrc'::regnamespace";
my $triggers = "SELECT string_agg(tgname || '=' || tgenabled::text, ',' ORDER BY tgname)"
  . " FROM pg_trigger WHERE tgrelid = 'esrc.events'::regclass AND NOT tgisinternal";

my $marker = "SELECT array_agg(a.grantee::regrole::text ORDER BY a.grantee::regrole::text)"
  . " FROM pg_type t, aclexplode(t.typacl) a"
  . " WHERE t.oid = 'esrc.referenced_role'::regtype AND a.grantee NOT IN (0, t.typowner)";
my %before = (
	marker => $src->safe_psql('shop', $marker),
	copy => $src->safe_psql('shop', $copy),
	sizes => $src->safe_psql('shop', $sizes),
	seq => $src->safe_psql('shop', $seq),
	acl => $src->safe_psql('shop', $acl),
	triggers => $src->safe_psql('shop', $triggers),
	count => $src->safe_psql('shop', 'SELECT count(*) FROM esrc.events'),
	maxpos => $src->safe_psql('shop', 'SELECT max(position) FROM esrc.events'),
	holes => $src->safe_psql('shop',
		'SELECT max(position) - count(*) FROM esrc.events'),);
ok($before{holes} > 0, "the source log has holes in its positions ($before{holes})");
my ($last_value) = split /\|/, $before{seq};
ok($last_value > $before{maxpos},
	"the in-flight append holds position $last_value above the log's last ($before{maxpos})");

my $custom = "$tmp/shop.dump";
my $plain = "$tmp/shop.sql";
my $globals = "$tmp/globals.sql";
command_ok([ 'pg_dump', '-d', $src->connstr('shop'), '-Fc', '-f', $custom ],
	'pg_dump -Fc while an append is in flight');
command_ok([ 'pg_dump', '-d', $src->connstr('shop'), '-Fp', '-f', $plain ],
	'pg_dump -Fp');
command_ok([ 'pg_dumpall', '-d', $src->connstr('postgres'), '--globals-only', '-f', $globals ],
	'pg_dumpall --globals-only');
$holder->query_safe('COMMIT');
$holder->quit;

# custom format into a fresh cluster; plain format into a new database of
# the source cluster
my $dst = esrc_node('dump_target');
$dst->safe_psql('postgres', 'DROP EXTENSION esrc');
# (the bootstrap superuser exists already: that one error is expected)
$dst->psql('postgres', undef, on_error_stop => 0, extra_params => [ '-q', '-f', $globals ]);
is($dst->safe_psql('postgres', "SELECT pg_has_role('shop_app', 'esrc_writer', 'MEMBER')"),
	't', 'pg_dumpall --globals-only brought the writer role and its membership');
$dst->safe_psql('postgres', 'CREATE DATABASE shop');
command_ok([ 'pg_restore', '-d', $dst->connstr('shop'), '--exit-on-error', $custom ],
	'pg_restore into a fresh cluster');
$src->safe_psql('postgres', 'CREATE DATABASE shop_plain');
command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $src->connstr('shop_plain'), '-f', $plain ],
	'psql -f of the plain dump into a new database');

for my $t ([ $dst, 'shop', 'pg_restore' ], [ $src, 'shop_plain', 'plain dump' ])
{
	my ($node, $db, $what) = @$t;
	my $got_copy = $node->safe_psql($db, $copy);
	ok($got_copy eq $before{copy},
		"$what: the restored log is byte-identical ($before{count} events, "
		  . length($got_copy) . ' bytes of COPY text)');
	is($node->safe_psql($db, $sizes), $before{sizes},
		"$what: every jsonb value has the stored size it had");
	is($node->safe_psql($db, $seq), $before{seq},
		"$what: the position sequence is where the source's was at dump time");
	is($node->safe_psql($db, $acl), $before{acl}, "$what: function privileges restored");
	is($node->safe_psql($db, $marker), $before{marker},
		"$what: the roles of esrc's catalogs hold the marker ($before{marker})");
	is($node->safe_psql($db, $triggers), $before{triggers},
		"$what: the append-only triggers are restored and ENABLE ALWAYS");
	is($node->safe_psql($db, "SELECT count(*) FROM esrc.events WHERE stream = 'held-1'"),
		'0', "$what: the append that was in flight during the dump is not in it");
	ok_checks($node, "$what", $db);

	my ($ok, $out, $err) = $node->psql($db, "UPDATE esrc.events SET type = 'x'");
	like($err, qr/append-only/, "$what: the restored log is still append-only");

	# a retried append (stored id, the same event) returns the stored
	# version, writes nothing
	is($node->safe_psql($db, "SELECT esrc.append('order-1', 'OrderPlaced',"
		. " '{\"total\": 42.50, \"items\": [1, 2, 3]}', '{\"user\": \"ann\"}', 99,"
		. " 'f3b0c1de-0000-4000-8000-000000000001')"),
		'0', "$what: idempotent retry of an event from before the dump");
	($ok, $out, $err) = $node->psql($db, "SELECT esrc.append('order-1', 'Again', '{}', NULL, -1)");
	like($err, qr/expected no stream, actual version 3/,
		"$what: an existing stream is known to the version check");

	my $pos = $node->safe_psql($db, <<'SQL');
SELECT esrc.append('new-1', 'New', '{}', NULL, -1);
SELECT position FROM esrc.events WHERE stream = 'new-1';
SQL
	$pos = (split /\n/, $pos)[-1];
	ok($pos > $last_value,
		"$what: the first new position ($pos) is past every position the source handed out ($last_value)");
	is($node->safe_psql($db, 'SELECT esrc.safe_position()'), $pos,
		"$what: the horizon follows the new append");
	my $n = appends_continue($node, $db);
	ok($n >= 55, "$what: appends continue at the right versions in all $n streams");
	ok_checks($node, "$what, after more appends", $db);
}

# without the dumped ACLs, the COPY of the catalogs grants the marker
# (esrc's triggers), and DROP ROLE from another database is refused
$dst->safe_psql('postgres', 'CREATE DATABASE shop_noacl');
command_ok([ 'pg_restore', '-d', $dst->connstr('shop_noacl'), '--exit-on-error', '--no-acl', $custom ],
	'pg_restore --no-acl');
is($dst->safe_psql('shop_noacl', $marker), $before{marker},
	'pg_restore --no-acl: the roles of esrc\'s catalogs hold the marker');
my ($drop_ok, $drop_out, $drop_err) = $dst->psql('postgres', 'DROP ROLE shop_owner');
like($drop_err, qr/role "shop_owner" cannot be dropped because some objects depend on it.*object.*in database shop/s,
	'restored: DROP ROLE of a subscription owner from another database is refused');

# the writer role came with the globals and works on the restored database
is($dst->safe_psql('shop', "SET ROLE shop_app; SELECT esrc.append('app-1', 'ByApp', '{}', NULL, -1)"),
	'0', 'the writer role restored by pg_dumpall --globals-only can append');

$src->stop;
$dst->stop;
done_testing();

# pg_dump/restore of a database that used the log's life cycle (issue 16):
# stream rules (set_stream_rules), soft and hard deletes (delete_stream),
# an erased stream (erase_stream) in a category with a snapshot table, the
# audit esrc.erasures, subject keys (encrypt) and a forgotten subject
# (forget_subject).
#
# The source is dumped in the custom format and restored with pg_restore
# into a fresh cluster (after pg_dumpall --globals-only; once more with
# pg_restore -j 2 into another database there), and in the plain
# format, restored with psql into a new database of the source cluster.  What the read
# functions return (read_all, read_stream, read_stream_backward,
# read_category, stream_version, load, snapshot_at, decrypt) is compared
# before and after, and so are the life-cycle tables themselves; no event
# count is fixed in advance.  Then the states must still act: the hard-
# deleted and the erased stream refuse appends (55000), the soft-deleted one
# continues at its next version, the rules still hide what they hid, the
# forgotten subject's values stay unreadable while another subject's decrypt,
# and the audit table is still append-only.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use EsrcTap;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tmp = $PostgreSQL::Test::Utils::tmp_check;
my $src = esrc_node('lc_source');
$src->safe_psql('postgres', 'CREATE DATABASE shop');
$src->safe_psql('shop', <<'SQL');
CREATE EXTENSION esrc;
CREATE ROLE lc_admin LOGIN IN ROLE esrc_admin;
CREATE ROLE lc_app LOGIN IN ROLE esrc_writer;
SELECT esrc.create_snapshot('acct_state', 'acct', 'esrc.merge(jsonb, esrc.event)');
-- streams with rules
SELECT esrc.append('sensor-' || s, 'Reading', jsonb_build_object('s', s, 'v', g))
FROM generate_series(1, 3) s, generate_series(1, 20) g ORDER BY s, g;
-- a category with a snapshot, one stream of it erased
SELECT esrc.append('acct-' || a, 'Deposited', jsonb_build_object('amount', g, 'owner', 'person ' || a),
                   jsonb_build_object('ip', '10.0.0.' || a))
FROM generate_series(1, 4) a, generate_series(1, 5) g ORDER BY a, g;
-- carts to delete
SELECT esrc.append('cart-' || c, 'ItemAdded', jsonb_build_object('sku', 'x' || g))
FROM generate_series(1, 3) c, generate_series(1, 4) g ORDER BY c, g;
-- personal data encrypted for two subjects
SELECT esrc.append('customer-' || c, 'Registered',
                   jsonb_build_object('plan', 'pro',
                                      'email', esrc.encrypt('customer-' || c, 'email', to_jsonb('c' || c || '@example.com'))))
FROM generate_series(1, 2) c;
SET ROLE lc_admin;
SELECT esrc.set_stream_rules('sensor-1', max_count => 5, reason => 'keep the last 5');
SELECT esrc.set_stream_rules('sensor-2', truncate_before => 7, reason => 'from version 7 on');
SELECT esrc.set_stream_rules('sensor-3', max_age => '100 years', truncate_before => 2, reason => 'two rules');
SELECT esrc.delete_stream('cart-1', 'abandoned');
SELECT esrc.delete_stream('cart-2', 'fraud', hard => true);
SELECT esrc.erase_stream('acct-3', 'erasure request #1');
SELECT esrc.forget_subject('customer-2', 'erasure request #2');
RESET ROLE;
-- the soft-deleted cart continues
SELECT esrc.append('cart-1', 'ItemAdded', '{"sku": "after delete"}');
SELECT esrc.append('acct-1', 'Deposited', '{"amount": 99}');
SQL

# Every read, as text, by name.  Errors are part of the output (a read of
# an erased stream's state fails, and must still fail the same way).
my @reads = (
	[ read_all => "SELECT string_agg(r::text, E'\\n' ORDER BY r.position) FROM esrc.read_all(0, 100000) r" ],
	[ read_stream => "SELECT string_agg(s.stream || ': ' || (SELECT coalesce(string_agg(r::text, ' ' ORDER BY r.version), '-') FROM esrc.read_stream(s.stream) r), E'\\n' ORDER BY s.stream) FROM esrc.streams s" ],
	[ read_stream_backward => "SELECT string_agg(s.stream || ': ' || (SELECT coalesce(string_agg(r::text, ' '), '-') FROM esrc.read_stream_backward(s.stream) r), E'\\n' ORDER BY s.stream) FROM esrc.streams s" ],
	[ read_category => "SELECT string_agg(c || ': ' || (SELECT coalesce(string_agg(r::text, ' ' ORDER BY r.position), '-') FROM esrc.read_category(c, 0, 100000) r), E'\\n' ORDER BY c) FROM unnest(ARRAY['sensor', 'acct', 'cart', 'customer']) c" ],
	[ stream_version => "SELECT string_agg(s.stream || '=' || esrc.stream_version(s.stream), ' ' ORDER BY s.stream) FROM esrc.streams s" ],
	[ streams => "SELECT string_agg(s::text, E'\\n' ORDER BY s.stream) FROM esrc.streams s" ],
	[ load => "SELECT string_agg(a || ': ' || (SELECT l::text FROM esrc.load('acct_state', a) l), E'\\n' ORDER BY a) FROM unnest(ARRAY['acct-1', 'acct-2', 'acct-4', 'acct-new']) a" ],
	[ snapshot_at => "SELECT esrc.snapshot_at('acct_state', 'acct-2', 2)::text" ],
	[ snapshot_table => "SELECT string_agg(stream || ' ' || version || ' ' || state::text, E'\\n' ORDER BY stream) FROM acct_state" ],
	[ decrypt => "SELECT string_agg(r.stream || '=' || coalesce(esrc.decrypt(r.stream, 'email', r.data->'email')::text, 'NULL'), ' ' ORDER BY r.stream) FROM esrc.read_category('customer', 0, 100000) r" ],
	[ erasures => "SELECT string_agg(e::text, E'\\n' ORDER BY e::text) FROM esrc.erasures e" ],
	[ stream_rules => "SELECT string_agg(r::text, E'\\n' ORDER BY r::text) FROM esrc.stream_rules r" ],
	[ subject_keys => "SELECT string_agg(k::text, E'\\n' ORDER BY k::text) FROM esrc.subject_keys k" ],
	[ events => "SET TimeZone = 'UTC'; SELECT string_agg(e::text, E'\\n' ORDER BY e.position) FROM esrc.events e" ],
	[ load_erased => "SELECT * FROM esrc.load('acct_state', 'acct-3')", 'error' ],
	[ snapshot_at_hidden => "SELECT esrc.snapshot_at('acct_state', 'acct-3', 0)", 'error' ],
);

sub reads
{
	my ($node, $db) = @_;
	$db //= 'shop';
	my %out;
	for my $r (@reads)
	{
		my ($name, $sql, $error) = @$r;
		my ($ret, $stdout, $stderr) = $node->psql($db, $sql,
			extra_params => [ '-v', 'VERBOSITY=terse' ]);
		# the error's detail names a time: keep the code and the message
		$stderr =~ s/\s*DETAIL:.*//s;
		$out{$name} = $error ? "rc=$ret $stderr" : $stdout;
		die "$name failed: $stderr" if !$error && $ret != 0;
	}
	return \%out;
}

my $before = reads($src);
like($before->{load_erased}, qr/was erased/, 'before: load of the erased stream fails');
like($before->{decrypt}, qr/customer-1="c1\@example.com" customer-2=NULL/,
	'before: the forgotten subject is unreadable, the other one decrypts');
like($before->{read_stream}, qr/^cart-2: \([^()]*,cart-2,\d+,esrc\.deleted,[^()]*\)$/m,
	'before: the hard-deleted stream reads as just its tombstone');
like($before->{read_stream}, qr/^cart-1: (?!.*x1).*after delete/m,
	'before: the soft-deleted stream shows only what was appended after the delete');

my $custom = "$tmp/lc.dump";
my $globals = "$tmp/lc_globals.sql";
my $plain = "$tmp/lc.sql";
command_ok([ 'pg_dump', '-d', $src->connstr('shop'), '-Fc', '-f', $custom ], 'pg_dump -Fc');
command_ok([ 'pg_dumpall', '-d', $src->connstr('postgres'), '--globals-only', '-f', $globals ],
	'pg_dumpall --globals-only');

my $dst = esrc_node('lc_target');
$dst->safe_psql('postgres', 'DROP EXTENSION esrc');
$dst->psql('postgres', undef, on_error_stop => 0, extra_params => [ '-q', '-f', $globals ]);
$dst->safe_psql('postgres', 'CREATE DATABASE shop');
command_ok([ 'pg_restore', '-d', $dst->connstr('shop'), '--exit-on-error', $custom ],
	'pg_restore into a fresh cluster');
$dst->safe_psql('postgres', 'CREATE DATABASE shop_j');
command_ok([ 'pg_restore', '-d', $dst->connstr('shop_j'), '-j', '2', '--exit-on-error', $custom ],
	'pg_restore -j 2 into another database');

# the plain format into a new database of the source cluster, before the
# source changes
command_ok([ 'pg_dump', '-d', $src->connstr('shop'), '-Fp', '-f', $plain ], 'pg_dump -Fp');
$src->safe_psql('postgres', 'CREATE DATABASE shop_plain');
command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $src->connstr('shop_plain'), '-f', $plain ],
	'psql -f of the plain dump into a new database');

# the states still act in a restored database
sub acts
{
	my ($node, $db, $what) = @_;
	my ($ret, $out, $err);
	($ret, $out, $err) = $node->psql($db, "SELECT esrc.append('cart-2', 'ItemAdded', '{}')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/55000: stream "cart-2" is deleted permanently/,
		"$what: the hard-deleted stream refuses appends (55000)");
	($ret, $out, $err) = $node->psql($db,
		"SET ROLE lc_admin; SELECT esrc.set_stream_rules('cart-2', max_count => 1, reason => 'x')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/55000/, "$what: the hard-deleted stream's rules stay frozen (55000)");
	($ret, $out, $err) = $node->psql($db, "SELECT esrc.append('acct-3', 'Deposited', '{}')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/55000: stream "acct-3" was erased/, "$what: the erased stream refuses appends (55000)");

	my $v = $node->safe_psql($db, "SELECT esrc.stream_version('cart-1')");
	is($node->safe_psql($db, "SELECT esrc.append('cart-1', 'ItemAdded', '{\"sku\": \"restored\"}', NULL, $v)"),
		$v + 1, "$what: the soft-deleted stream continues at its next version");
	like($node->safe_psql($db, "SELECT string_agg(data->>'sku', ',' ORDER BY version) FROM esrc.read_stream('cart-1')"),
		qr/^after delete,restored$/, "$what: and shows only the events after the delete");

	# the rules still hide: a new event pushes the oldest visible one out of sensor-1's last 5
	my $first = $node->safe_psql($db, "SELECT min(version) FROM esrc.read_stream('sensor-1')");
	$node->safe_psql($db, "SELECT esrc.append('sensor-1', 'Reading', '{\"new\": true}')");
	is($node->safe_psql($db, "SELECT count(*) || ' ' || min(version) FROM esrc.read_stream('sensor-1')"),
		'5 ' . ($first + 1), "$what: max_count still keeps the last 5 of sensor-1");

	is($node->safe_psql($db, "SELECT esrc.decrypt('customer-1', 'email', esrc.encrypt('customer-1', 'email', '\"new\"'))"),
		'"new"', "$what: the remaining subject key still encrypts and decrypts");
	is($node->safe_psql($db, "SET ROLE lc_admin; SELECT esrc.forget_subject('customer-2', 'again')"),
		'f', "$what: forget_subject of the forgotten subject is a no-op (false)");
	is($node->safe_psql($db, "SELECT esrc.decrypt(stream, 'email', data->'email') IS NULL FROM esrc.read_stream('customer-2')"),
		't', "$what: the forgotten subject's value is still unreadable");
	($ret, $out, $err) = $node->psql($db, "UPDATE esrc.erasures SET reason = 'x'");
	isnt($ret, 0, "$what: esrc.erasures is still append-only");
	($ret, $out, $err) = $node->psql($db, "UPDATE esrc.events SET data = '{}' WHERE stream = 'acct-3'");
	like($err, qr/append-only/, "$what: the redacted events cannot be changed back");
	# the log invariants; read_all skips what the rules hide, so the two
	# checks that compare it with the whole table do not apply here (the
	# read_all comparison above covers it)
	for my $c (log_checks($node, $db))
	{
		next if $c->[0] =~ /^read_all_(returns_each_event_once|rows_equal_the_log)$/;
		ok($c->[1], "$what: $c->[0]" . ($c->[2] ne '' ? " ($c->[2])" : ''));
	}
	return;
}

for my $t ([ $dst, 'shop', 'pg_restore' ], [ $dst, 'shop_j', 'pg_restore -j 2' ],
	[ $src, 'shop_plain', 'plain dump' ])
{
	my ($node, $db, $what) = @$t;
	my $after = reads($node, $db);
	for my $r (@reads)
	{
		my $name = $r->[0];
		is($after->{$name}, $before->{$name}, "$what: $name is what it was before the dump");
	}
	acts($node, $db, $what);
}
# the comparison can fail: a change in the source shows
$src->safe_psql('shop', "SELECT esrc.append('sensor-1', 'Reading', '{\"late\": true}')");
my $changed = reads($src);
isnt($changed->{read_stream}, $before->{read_stream},
	'control: one more event in the source makes read_stream differ');


$dst->stop;
$src->stop;
done_testing();

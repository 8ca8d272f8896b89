# Crash matrix for esrc.erase_stream: kill -9 in the middle of the erase of
# a 10,000-event stream, of the erasing backend and of the postmaster.
#
# "In the middle" is made certain, not guessed: a second session holds a
# row lock (SELECT ... FOR SHARE) on the victim's event of version 5000, so
# the erase, which redacts the events in version order, has redacted
# versions 0..4999 in its transaction and waits for that lock (a
# 'transactionid' lock wait in pg_stat_activity) when the process is
# killed.  After the recovery the stream must be all redacted with its
# audit row, or not redacted at all without one (here: not at all, since the
# erase never committed), never part; the log invariants hold
# (EsrcTap::log_checks), the snapshot table equals a fresh replay of the log,
# and the stream and the others take appends.  A last round kills the
# postmaster right after an erase committed: then all 10,000 are redacted,
# with the audit row, the stream has no snapshot row and refuses appends.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use EsrcTap;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = esrc_node('crash_erase');
$node->safe_psql('postgres', <<'SQL');
CREATE ROLE eraser LOGIN IN ROLE esrc_admin;
SELECT esrc.append('acct-other' || i, 'Opened', jsonb_build_object('i', i, 'note', repeat('o', 100)))
FROM generate_series(1, 20) i;
SELECT esrc.create_snapshot('snap', 'acct', 'esrc.merge(jsonb, esrc.event)');
SQL

# the state of the victim's versions 0..$upto: redacted events, original
# events; audit rows, snapshot rows; "r|o|a|s"
sub victim_state
{
	my ($victim, $upto) = @_;
	$upto //= 9999;	# the versions the test wrote (not what esrc may add after an erase)
	return $node->safe_psql('postgres', <<"SQL");
SELECT count(*) FILTER (WHERE data = '{"erased": true}' AND metadata IS NULL) || '|' ||
       count(*) FILTER (WHERE data = jsonb_build_object('g', version, 'pad', md5(version::text))
                        AND metadata = jsonb_build_object('m', version)) || '|' ||
       (SELECT count(*) FROM esrc.erasures WHERE stream = '$victim') || '|' ||
       (SELECT count(*) FROM snap WHERE stream = '$victim')
FROM esrc.events WHERE stream = '$victim' AND version <= $upto
SQL
}

# the snapshot table equals a replay of the log (a second create_snapshot)
sub snapshot_equals_replay
{
	my ($what) = @_;
	my $diff = $node->safe_psql('postgres', <<'SQL');
SELECT esrc.create_snapshot('snap_replay', 'acct', 'esrc.merge(jsonb, esrc.event)');
SELECT (SELECT count(*) FROM (SELECT stream, version, state FROM snap
                              EXCEPT ALL SELECT stream, version, state FROM snap_replay) x)
     + (SELECT count(*) FROM (SELECT stream, version, state FROM snap_replay
                              EXCEPT ALL SELECT stream, version, state FROM snap) x)
     || '|' || (SELECT count(*) FROM snap);
SELECT esrc.drop_snapshot('snap_replay');
SQL
	my ($d, $rows) = split /\|/, (split /\n/, $diff)[1];
	is($d, '0', "$what: the snapshot table ($rows rows) equals a replay of the log");
	return;
}

# other streams take appends at the right version
sub others_append
{
	my ($what) = @_;
	my $out = $node->safe_psql('postgres', <<'SQL');
SELECT count(*) FILTER (WHERE esrc.append(stream, 'Continued', '{"c": 1}', NULL, version) = version + 1)
       || '|' || count(*)
FROM esrc.streams WHERE stream LIKE 'acct-other%';
SQL
	my ($ok, $n) = split /\|/, $out;
	ok($n == 20 && $ok == $n, "$what: the 20 other streams continue at the right versions");
	return;
}

sub seed_victim
{
	my ($victim) = @_;
	$node->safe_psql('postgres', <<"SQL");
SELECT esrc.append('$victim', 'Noted', jsonb_build_object('g', g, 'pad', md5(g::text)),
                   jsonb_build_object('m', g), g - 1)
FROM generate_series(0, 9999) g ORDER BY g;
SQL
	is(victim_state($victim), '0|10000|0|1', "$victim: 10,000 events stored, a snapshot row");
	return;
}

# One round: the erase of $victim stopped at version 5000, then $crash.
sub crash_mid_erase
{
	my (%args) = @_;
	my $victim = $args{victim};
	my $what = $args{label};
	seed_victim($victim);

	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN');
	$holder->query_safe(
		"SELECT 1 FROM esrc.events WHERE stream = '$victim' AND version = 5000 FOR SHARE");
	my $eraser = $node->background_psql('postgres');
	my $eraser_pid = backend_pid($eraser);
	$eraser->query_safe('SET ROLE eraser');
	$eraser->query_until(qr/erasing/,
		"\\echo erasing\nSELECT esrc.erase_stream('$victim', 'crash test');\n");
	wait_for_wait_event($node, $eraser_pid, 'transactionid');
	# what the erase did so far: the old versions of the events it has
	# redacted carry its xid as xmax (visible from here, uncommitted):
	# versions 0..4999, half of the stream
	is($node->safe_psql('postgres', <<"SQL"),
SELECT count(*) || '|' || min(e.version) || '|' || max(e.version)
FROM esrc.events e, pg_stat_activity a
WHERE a.pid = $eraser_pid AND e.stream = '$victim' AND e.xmax::text = a.backend_xid::text
SQL
		'5000|0|4999',
		"$what: the erase has redacted versions 0..4999 and waits for the row lock on version 5000");

	my $log_offset = -s $node->logfile;
	$args{crash}->($eraser_pid);
	$node->poll_query_until('postgres', 'SELECT true')
	  or die "server did not come back";
	ok($node->log_contains($args{log_pattern}, $log_offset),
		"$what: the server log shows the crash and the recovery");
	crashed_session_done($_) for ($holder, $eraser);

	my ($red, $orig, $audit, $snaprow) = split /\|/, victim_state($victim);
	ok(($red == 10000 && $orig == 0 && $audit == 1 && $snaprow == 0)
		  || ($red == 0 && $orig == 10000 && $audit == 0 && $snaprow == 1),
		"$what: all or nothing: $red redacted, $orig as written, $audit audit rows, $snaprow snapshot rows");
	is("$red|$audit", '0|0', "$what: the erase did not commit, so nothing of it is left");
	ok_checks($node, "$what, after recovery");
	snapshot_equals_replay($what);

	is($node->safe_psql('postgres',
			"SELECT esrc.append('$victim', 'After', '{\"x\": 1}', NULL, 9999)"),
		'10000', "$what: the victim takes an append at version 10000");
	others_append($what);

	# and the erase works now
	is($node->safe_psql('postgres',
			"SET ROLE eraser; SELECT esrc.erase_stream('$victim', 'after the crash')"),
		'10001', "$what: erase_stream after recovery redacts all 10,001 events");
	is(victim_state($victim, 10000), '10001|0|1|0', "$what: the victim is erased after recovery");
	snapshot_equals_replay("$what, erased");
	return;
}

my $backend_log =
  qr/was terminated by signal 9: Killed.*all server processes terminated; reinitializing/s;
my $postmaster_log =
  qr/database system was interrupted; last known up at.*database system was not properly shut down; automatic recovery in progress.*database system is ready to accept connections/s;
sub kill_postmaster
{
	my $pm = postmaster_pid($node);
	my @children = postmaster_children($pm);
	$node->kill9;
	ok(wait_gone(120, $pm, @children),
		'every child of the killed postmaster exits by itself');
	$node->start;
	return;
}

crash_mid_erase(
	victim => 'acct-victim1',
	label => 'backend kill -9 mid-erase',
	log_pattern => $backend_log,
	crash => sub {
		my ($pid) = @_;
		kill 'KILL', $pid or die "cannot kill $pid: $!";
	});

crash_mid_erase(
	victim => 'acct-victim2',
	label => 'postmaster kill -9 mid-erase',
	log_pattern => $postmaster_log,
	crash => \&kill_postmaster);

# the other side: an erase that committed survives a crash whole
seed_victim('acct-victim3');
is($node->safe_psql('postgres',
		"SET ROLE eraser; SELECT esrc.erase_stream('acct-victim3', 'committed')"),
	'10000', 'the third erase commits');
my $log_offset = -s $node->logfile;
kill_postmaster();
ok($node->log_contains($postmaster_log, $log_offset),
	'postmaster kill -9 after a committed erase: the log shows the recovery');
is(victim_state('acct-victim3'), '10000|0|1|0',
	'after recovery the committed erase is whole: 10,000 redacted, the audit row, no snapshot row');
my ($ok, $out, $err) = $node->psql('postgres',
	"SELECT esrc.append('acct-victim3', 'Late', '{}')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/55000: stream "acct-victim3" was erased/, 'the erased stream refuses appends (55000)');
others_append('after the committed erase');
ok_checks($node, 'after the committed erase and recovery');
snapshot_equals_replay('after the committed erase and recovery');

$node->stop;
done_testing();

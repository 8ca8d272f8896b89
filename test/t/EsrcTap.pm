# test/t/EsrcTap.pm: helpers shared by the esrc TAP tests (test/t/*.pl).
#
# Owns: starting a PostgreSQL::Test::Cluster node with esrc preloaded, the
# pgbench write load whose acknowledged transactions can be counted after a
# crash, and the checks every crash test ends with (the log invariants, a
# full read_all scan, the horizon, appends continuing at the right
# versions).  test/run-50-tap.sh runs the tests with prove.
package EsrcTap;

use strict;
use warnings;

use Exporter 'import';
use File::Basename ();
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(esrc_node log_checks ok_checks start_load finish_load
  acked_per_client install_gate backend_pid wait_for_wait_event
  appends_continue postmaster_children wait_gone crashed_session_done
  postmaster_pid crash_round);

# A started node with esrc preloaded and the extension created in the
# database "postgres".  Cluster.pm turns restart_after_crash off and logs
# every statement; crash tests need the restart and not the noise.
sub esrc_node
{
	my ($name, @conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf(
		'postgresql.conf', join("\n",
			"shared_preload_libraries = 'esrc'",
			"restart_after_crash = on",
			"log_statement = none",
			"max_connections = 40",
			@conf, ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION esrc');
	return $node;
}

# The invariants of the log, computed on $node, as a list of
# [name, ok, detail].  read_all is scanned from position 0 in pages of 997
# (a page size that divides nothing) and compared row by row with the table.
# Assumes no appending transaction is open (the horizon check needs that).
sub log_checks
{
	my ($node, $db) = @_;
	$db //= 'postgres';
	my $out = $node->safe_psql($db, <<'SQL');
CREATE TEMP TABLE esrc_seen (seq bigint PRIMARY KEY, position bigint, row_text text);
DO $$
DECLARE
    after bigint := 0;
    page int := 0;
    got int;
    max_pages int := (SELECT count(*) FROM esrc.events) / 997 + 5;
BEGIN
    LOOP
        INSERT INTO esrc_seen
            SELECT page::bigint * 100000 + r.o, r.position,
                   ROW(r.position, r.stream, r.version, r.type, r.data, r.metadata,
                       r.id, r.recorded_at)::text
            FROM esrc.read_all(after, 997)
                 WITH ORDINALITY AS r(position, stream, version, type, data, metadata,
                                      id, recorded_at, tags, o);
        GET DIAGNOSTICS got = ROW_COUNT;
        EXIT WHEN got = 0;
        SELECT s.position INTO after FROM esrc_seen s ORDER BY s.seq DESC LIMIT 1;
        page := page + 1;
        IF page > max_pages THEN
            RAISE EXCEPTION 'read_all did not reach the end after % pages', page;
        END IF;
    END LOOP;
END
$$;
SELECT 'no_duplicate_stream_version',
       count(*) = count(DISTINCT (stream, version)), count(*) || ' events'
FROM esrc.events;
SELECT 'no_version_holes', coalesce(bool_and(first = 0 AND last + 1 = n), true),
       count(*) || ' streams'
FROM (SELECT min(version) first, max(version) last, count(*) n
      FROM esrc.events GROUP BY stream) s;
SELECT 'position_order_matches_version_order', coalesce(bool_and(ok), true), ''
FROM (SELECT version = row_number() OVER (PARTITION BY stream ORDER BY position) - 1 AS ok
      FROM esrc.events) s;
SELECT 'event_ids_unique', count(*) = count(DISTINCT id), '' FROM esrc.events;
SELECT 'read_all_in_position_order', coalesce(bool_and(ok), true), ''
FROM (SELECT position > lag(position, 1, 0::bigint) OVER (ORDER BY seq) AS ok
      FROM esrc_seen) s;
SELECT 'read_all_returns_each_event_once',
       (SELECT count(*) FROM esrc_seen) = count(*)
       AND (SELECT count(DISTINCT position) FROM esrc_seen) = count(*),
       (SELECT count(*) FROM esrc_seen) || ' read, ' || count(*) || ' stored'
FROM esrc.events;
SELECT 'read_all_rows_equal_the_log', NOT EXISTS (
         (SELECT row_text FROM esrc_seen
          EXCEPT ALL
          SELECT ROW(position, stream, version, type, data, metadata, id, recorded_at)::text
          FROM esrc.events)
         UNION ALL
         (SELECT ROW(position, stream, version, type, data, metadata, id, recorded_at)::text
          FROM esrc.events
          EXCEPT ALL
          SELECT row_text FROM esrc_seen)), '';
SELECT 'horizon_not_behind_the_log',
       esrc.safe_position() >= coalesce(max(position), 0),
       'safe_position ' || esrc.safe_position() || ', max position ' || coalesce(max(position), 0)
FROM esrc.events;
SQL
	my @checks;
	for my $line (split /\n/, $out)
	{
		my ($name, $ok, $detail) = split /\|/, $line, 3;
		push @checks, [ $name, $ok eq 't', $detail // '' ];
	}
	return @checks;
}

# Run log_checks and report each as a test; $what prefixes the names.
sub ok_checks
{
	my ($node, $what, $db) = @_;
	my @checks = log_checks($node, $db);
	is(scalar(@checks), 8, "$what: all 8 log checks ran");
	ok($_->[1], "$what: $_->[0]" . ($_->[2] ne '' ? " ($_->[2])" : ''))
	  for @checks;
	return;
}

# The write load: pgbench clients that each append to a stream of their own
# ("load<round>-<client>") with the exact expected version, single events
# (weight 3) or 3-event batches (weight 1), and in the same transaction one
# event to the shared hot stream "hot-<round>" carrying (client, tx).  No append can
# fail with 40001, so the k acknowledged transactions of client c are its
# first k, and after a crash its stream must hold them and at most one more.
sub start_load
{
	my ($node, $dir, %opt) = @_;
	my $clients = $opt{clients} // 4;
	my $seconds = $opt{seconds} // 120;
	my $round = $opt{round} // 1;
	mkdir $dir or die "cannot create $dir: $!";
	open my $s, '>', "$dir/single.pgbench" or die $!;
	print $s <<'EOS';
BEGIN;
SELECT esrc.stream_version('load' || :round || '-' || :client_id) AS v \gset
SELECT esrc.append('load' || :round || '-' || :client_id, 'Tick', jsonb_build_object('client', :client_id, 'tx', :v + 1), NULL, :v);
SELECT esrc.append('hot-' || :round, 'Hot', jsonb_build_object('client', :client_id, 'tx', :v + 1));
END;
EOS
	close $s;
	open my $b, '>', "$dir/batch.pgbench" or die $!;
	print $b <<'EOS';
BEGIN;
SELECT esrc.stream_version('load' || :round || '-' || :client_id) AS v \gset
SELECT esrc.append_batch('load' || :round || '-' || :client_id, jsonb_build_array(jsonb_build_object('type', 'Batch', 'data', jsonb_build_object('client', :client_id, 'tx', :v + 1, 'i', 1)), jsonb_build_object('type', 'Batch', 'data', jsonb_build_object('client', :client_id, 'tx', :v + 1, 'i', 2)), jsonb_build_object('type', 'Batch', 'data', jsonb_build_object('client', :client_id, 'tx', :v + 1, 'i', 3), 'metadata', jsonb_build_object('m', 'x'))), :v);
SELECT esrc.append('hot-' || :round, 'Hot', jsonb_build_object('client', :client_id, 'tx', :v + 1));
END;
EOS
	close $b;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'pgbench', '-n', '-h', $node->host, '-p', $node->port,
			'-c', $clients, '-j', 1, '-T', $seconds,
			'--log', "--log-prefix=$dir/tx", '-D', "round=$round",
			'-f', "$dir/single.pgbench\@3", '-f', "$dir/batch.pgbench\@1",
			'postgres'
		],
		'>', \$out, '2>', \$err);
	return {
		h => $h, dir => $dir, out => \$out, err => \$err,
		clients => $clients, round => $round
	};
}

# Wait for pgbench to end (its clients abort when the server crashes).
sub finish_load
{
	my ($load) = @_;
	$load->{h}->finish;
	note "pgbench stdout:\n${$load->{out}}\npgbench stderr (tail):\n"
	  . substr(${ $load->{err} }, -2000);
	return;
}

# Acknowledged transactions and events per client, from pgbench's
# per-transaction log (client_id transaction_no time script_no ...): a
# transaction is logged once its COMMIT returned.
sub acked_per_client
{
	my ($load) = @_;
	my %acked = map { $_ => { tx => 0, events => 0 } } 0 .. $load->{clients} - 1;
	for my $f (glob "$load->{dir}/tx.*")
	{
		open my $fh, '<', $f or die $!;
		while (<$fh>)
		{
			my ($client, undef, $time, $script) = split ' ';
			next if $time eq 'failed' || $time eq 'skipped';
			$acked{$client}{tx}++;
			$acked{$client}{events} += $script == 1 ? 3 : 1;
		}
	}
	return \%acked;
}

# A row trigger on esrc.events that makes the append of version $version of
# stream $stream wait for advisory lock 4242, so a test can stop an append
# in the middle of its INSERT (earlier rows of the batch already written).
sub install_gate
{
	my ($node, $stream, $version) = @_;
	$node->safe_psql('postgres', <<"SQL");
CREATE OR REPLACE FUNCTION public.crash_gate() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    IF NEW.stream = '$stream' AND NEW.version = $version THEN
        PERFORM pg_advisory_xact_lock_shared(4242);
    END IF;
    RETURN NEW;
END
\$\$;
DROP TRIGGER IF EXISTS crash_gate ON esrc.events;
CREATE TRIGGER crash_gate BEFORE INSERT ON esrc.events
    FOR EACH ROW EXECUTE FUNCTION public.crash_gate();
SQL
	return;
}

sub backend_pid
{
	my ($session) = @_;
	my $pid = $session->query_safe('SELECT pg_backend_pid()');
	chomp $pid;
	return $pid;
}

# Wait until backend $pid waits for a lock of type $locktype.
sub wait_for_wait_event
{
	my ($node, $pid, $locktype) = @_;
	$node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Lock' AND wait_event = '$locktype'"
		  . " FROM pg_stat_activity WHERE pid = $pid")
	  or die "backend $pid never waited for a $locktype lock";
	return;
}

# Every stream gets one more event at the right version (expected_version =
# its head), and a stale expected version fails with 40001.  Returns the
# number of streams on success, dies otherwise.
sub appends_continue
{
	my ($node, $db) = @_;
	$db //= 'postgres';
	return $node->safe_psql($db, <<'SQL');
DO $$
DECLARE
    r record;
    v bigint;
    n int := 0;
BEGIN
    FOR r IN SELECT stream, version FROM esrc.streams ORDER BY stream LOOP
        v := esrc.append(r.stream, 'Continued', '{}', NULL, r.version);
        IF v <> r.version + 1 THEN
            RAISE EXCEPTION 'stream % continued at version %, not %', r.stream, v, r.version + 1;
        END IF;
        BEGIN
            PERFORM esrc.append(r.stream, 'Stale', '{}', NULL, r.version);
            RAISE EXCEPTION 'stale expected version % accepted for stream %', r.version, r.stream;
        EXCEPTION WHEN serialization_failure THEN
            NULL;
        END;
        n := n + 1;
    END LOOP;
    PERFORM set_config('esrc_test.continued', n::text, false);
END
$$;
SELECT current_setting('esrc_test.continued');
SQL
}

# The pids of the processes whose parent is $ppid (read from /proc).
sub postmaster_children
{
	my ($ppid) = @_;
	my @pids;
	for my $stat (glob '/proc/[0-9]*/stat')
	{
		open my $fh, '<', $stat or next;
		my $line = <$fh>;
		close $fh;
		next unless defined $line && $line =~ /^(\d+) \(.*\) \S+ (\d+)/s;
		push @pids, $1 if $2 == $ppid;
	}
	return @pids;
}

# Wait until none of @pids exists any more (a zombie counts as gone: it
# holds no shared memory).  Returns true on success.
sub wait_gone
{
	my ($timeout, @pids) = @_;
	my $deadline = time + $timeout;
	while (time < $deadline)
	{
		my @alive = grep {
			my $alive = 0;
			if (open my $fh, '<', "/proc/$_/stat")
			{
				my $line = <$fh>;
				$alive = defined $line && $line !~ /^\d+ \(.*\) Z /s;
			}
			$alive;
		} @pids;
		return 1 unless @alive;
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# End a background psql session whose server process was killed.
sub crashed_session_done
{
	my ($session) = @_;
	eval { $session->{run}->kill_kill; };
	return;
}

sub postmaster_pid
{
	my ($node) = @_;
	my ($pid) = split /\n/,
	  PostgreSQL::Test::Utils::slurp_file($node->data_dir . '/postmaster.pid');
	return $pid;
}

# One round of the crash matrix.  While the pgbench load runs, three
# sessions are caught in the middle of an append:
#   holder  BEGIN; append to held-<r>           (open, holds the horizon)
#   waiter  BEGIN; append_batch to wait-<r>; append to held-<r>
#           (inside esrc.append, waiting for the stream lock)
#   victim  append_batch of 1000 events to victim-<r>, stopped by the gate
#           trigger at version 300, i.e. in the middle of its INSERT
# Then $crash->($node, $victim_pid) crashes the server and brings it back,
# and every promise is checked: acknowledged appends all stored, nothing of
# an unacknowledged transaction half-stored, the log invariants, the
# horizon advancing past the dead transactions, positions never reused,
# and appends continuing at the right versions.
sub crash_round
{
	my ($node, %args) = @_;
	my $r = $args{round};
	my $what = $args{label};
	my $tmp = $PostgreSQL::Test::Utils::tmp_check;

	$node->safe_psql('postgres', "SELECT esrc.append('victim-$r', 'Seed', '{}')");
	install_gate($node, "victim-$r", 300);

	# a directory of this test's own: the acknowledged transactions are
	# counted from every pgbench log in it
	my $test = File::Basename::basename($0, '.pl');
	my $load = start_load($node, "$tmp/${test}_load_$r", round => $r);
	$node->poll_query_until('postgres',
		"SELECT count(*) >= 300 FROM esrc.events WHERE stream LIKE 'load$r-%'")
	  or die "the load did not start";

	my $holder = $node->background_psql('postgres');
	backend_pid($holder);
	$holder->query_safe('BEGIN');
	$holder->query_safe("SELECT esrc.append('held-$r', 'Held', '{}')");
	my $held_pos =
	  $holder->query_safe("SELECT position FROM esrc.events WHERE stream = 'held-$r'");
	chomp $held_pos;
	$node->poll_query_until('postgres',
		"SELECT max(position) > $held_pos + 50 FROM esrc.events")
	  or die "the load stopped";
	my ($horizon, $maxpos) = split /\|/,
	  $node->safe_psql('postgres',
		'SELECT esrc.safe_position(), max(position) FROM esrc.events');
	ok($horizon < $held_pos && $maxpos > $held_pos,
		"$what: before the crash the open append at position $held_pos holds the"
		  . " horizon ($horizon) below committed events (up to $maxpos)");

	my $waiter = $node->background_psql('postgres');
	my $waiter_pid = backend_pid($waiter);
	$waiter->query_safe('BEGIN');
	$waiter->query_safe(
		qq{SELECT esrc.append_batch('wait-$r', '[{"type": "A", "data": {}}, {"type": "B", "data": {}}]')});
	$waiter->query_until(qr/waiting/,
		"\\echo waiting\nSELECT esrc.append('held-$r', 'Second', '{}');\n");
	wait_for_wait_event($node, $waiter_pid, 'advisory');

	my $gate = $node->background_psql('postgres');
	$gate->query_safe('SELECT pg_advisory_lock(4242)');
	my $victim = $node->background_psql('postgres');
	my $victim_pid = backend_pid($victim);
	$victim->query_until(qr/appending/,
		"\\echo appending\nSELECT esrc.append_batch('victim-$r', (SELECT jsonb_agg("
		  . "jsonb_build_object('type', 'V', 'data', jsonb_build_object('i', i)))"
		  . " FROM generate_series(1, 1000) i), 0);\n");
	wait_for_wait_event($node, $victim_pid, 'advisory');

	my $reader_high = $node->safe_psql('postgres',
		'SELECT coalesce(max(position), 0) FROM esrc.read_all(0, NULL)');
	my $last_value = $node->safe_psql('postgres',
		'SELECT last_value FROM esrc.position_seq');
	# the gate stops the victim's batch at its row of version 300 (a BEFORE
	# ROW trigger): it holds the 300 positions of the rows before, all
	# above the held one
	ok($last_value >= $held_pos + 300,
		"$what: the victim took 300 positions before the crash (sequence at $last_value, held position $held_pos)");

	my $log_offset = -s $node->logfile;
	$args{crash}->($node, $victim_pid);
	$node->poll_query_until('postgres', 'SELECT true')
	  or die "server did not come back";
	ok($node->log_contains($args{log_pattern}, $log_offset),
		"$what: the server log shows the crash and the recovery");

	finish_load($load);
	crashed_session_done($_) for ($holder, $waiter, $gate, $victim);
	my $acked = acked_per_client($load);
	my $acked_tx = 0;
	$acked_tx += $acked->{$_}{tx} for keys %$acked;
	ok($acked_tx > 0, "$what: the load had $acked_tx acknowledged transactions");

	# nothing of the transactions that were in flight
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM esrc.events WHERE stream IN ('held-$r', 'wait-$r')"),
		'0', "$what: nothing of the open and the waiting transaction is stored");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM esrc.events WHERE stream = 'victim-$r'"),
		'1', "$what: nothing of the batch killed mid-insert is stored");

	# every acknowledged append is stored; at most one more transaction per
	# client (one whose COMMIT was not acknowledged) is
	for my $c (sort { $a <=> $b } keys %$acked)
	{
		my ($tx, $events) = split /\|/,
		  $node->safe_psql('postgres',
			"SELECT count(DISTINCT data->>'tx'), count(*) FROM esrc.events"
			  . " WHERE stream = 'load$r-$c'");
		my $k = $acked->{$c}{tx};
		my $e = $acked->{$c}{events};
		ok(($tx == $k || $tx == $k + 1) && $events >= $e && $events <= $e + 3,
			"$what: client $c: $k acknowledged transactions ($e events), $tx stored ($events events)");
	}

	# transactions are atomic across the crash: each stored transaction has
	# its hot-stream event and all its batch events, and nothing else
	is($node->safe_psql('postgres', <<"SQL"), '0|0|0', "$what: every stored transaction is complete");
WITH own AS (SELECT DISTINCT data->>'client' c, data->>'tx' t FROM esrc.events
             WHERE stream LIKE 'load$r-%'),
     hot AS (SELECT data->>'client' c, data->>'tx' t FROM esrc.events WHERE stream = 'hot-$r')
SELECT (SELECT count(*) FROM (SELECT * FROM own EXCEPT ALL SELECT * FROM hot) x),
       (SELECT count(*) FROM (SELECT * FROM hot EXCEPT ALL SELECT * FROM own) x),
       (SELECT count(*) FROM (SELECT stream, data->>'tx' FROM esrc.events
                              WHERE stream LIKE 'load$r-%' AND type = 'Batch'
                              GROUP BY 1, 2
                              HAVING count(*) <> 3
                                  OR max(version) - min(version) <> 2) x)
SQL

	ok_checks($node, "$what, after recovery");

	# the horizon is not stuck behind the dead transactions, positions are
	# never reused, and a new event is readable at once
	my $out = $node->safe_psql('postgres', <<"SQL");
SELECT esrc.append('after-$r', 'New', '{}');
SELECT (SELECT position FROM esrc.events WHERE stream = 'after-$r'), esrc.safe_position(),
       (SELECT count(*) FROM esrc.read_all($held_pos, NULL) WHERE stream = 'after-$r');
SQL
	my ($pos, $safe, $seen) = split /\|/, (split /\n/, $out)[-1];
	ok($pos > $last_value && $pos > $reader_high,
		"$what: the first position after recovery ($pos) is above every position taken"
		  . " before the crash ($last_value) and every position read ($reader_high)");
	ok($safe >= $pos && $safe > $held_pos,
		"$what: the horizon advanced after recovery (safe_position $safe, was $horizon"
		  . " behind the open append at $held_pos)");
	is($seen, '1', "$what: read_all returns the new event at once");

	my $n = appends_continue($node);
	ok($n >= $load->{clients} + 3,
		"$what: appends continue at the right versions in all $n streams");
	ok_checks($node, "$what, after more appends");
	return;
}

1;

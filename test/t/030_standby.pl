# A streaming standby: the log, the snapshot tables and stream reads
# replicate; appends are refused (read-only); and the global-order reads
# run at the horizon the primary publishes (src/log/standby.c; under load:
# test/run-66-standby-reads.sh).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'esrc'\n");
$primary->start;
$primary->safe_psql('postgres', q{
CREATE EXTENSION esrc;
SELECT esrc.append('user-a', 'Registered', '{"name": "A"}', expected_version => -1);
SELECT esrc.append('user-a', 'Renamed', '{"name": "B"}', expected_version => 0);
});
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

$primary->safe_psql('postgres',
	q{SELECT esrc.append('user-a', 'Renamed', '{"name": "C"}', expected_version => 1)});
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres',
		q{SELECT string_agg(version || ':' || (data->>'name'), ',' ORDER BY version) FROM esrc.read_stream('user-a')}),
	'0:A,1:B,2:C', 'read_stream on the standby sees the replicated events');
is($standby->safe_psql('postgres', q{SELECT esrc.stream_version('user-a')}),
	'2', 'stream_version on the standby');

my $top = $primary->safe_psql('postgres', q{SELECT esrc.safe_position()});
$standby->poll_query_until('postgres', "SELECT esrc.safe_position() = $top")
  or die 'the standby never reached the primary\'s horizon';
is($standby->safe_psql('postgres', q{SELECT count(*) FROM esrc.read_all()}),
	'3', 'read_all on the standby returns every event up to the published horizon');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM esrc.read_category('user')}),
	'3', 'read_category on the standby too');
my ($ret, $out, $err);
($ret, $out, $err) = $standby->psql('postgres',
	q{SELECT esrc.append('user-a', 'Renamed', '{}')});
isnt($ret, 0, 'appends fail on the standby');
like($err, qr/read-only transaction/, 'because the standby is read-only');

# after promotion the new primary computes its own horizon and appends
# continue at the right version
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'promotion timed out';
is($standby->safe_psql('postgres',
		q{SELECT esrc.append('user-a', 'Renamed', '{"name": "D"}', expected_version => 2)}),
	'3', 'after promotion appends continue at version 3');
is($standby->safe_psql('postgres',
		q{SELECT count(*) FROM esrc.read_all(0, NULL)}),
	'4', 'read_all works on the promoted server');

$standby->stop;
$primary->stop;
done_testing();

# A streaming standby: the log, the snapshot tables and stream reads
# replicate; appends are refused (read-only); and the global-order reads,
# whose commit-safe horizon only the primary can compute, refuse to run
# instead of returning a horizon that could skip events.
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

my ($ret, $out, $err) = $standby->psql('postgres',
	q{SELECT count(*) FROM esrc.read_all()});
isnt($ret, 0, 'read_all fails on the standby');
like($err, qr/the esrc read horizon is not available during recovery/,
	'read_all says why');
($ret, $out, $err) = $standby->psql('postgres',
	q{SELECT count(*) FROM esrc.read_category('user')});
like($err, qr/not available during recovery/, 'read_category refuses too');
($ret, $out, $err) = $standby->psql('postgres', q{SELECT esrc.safe_position()});
like($err, qr/not available during recovery/, 'safe_position refuses too');

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

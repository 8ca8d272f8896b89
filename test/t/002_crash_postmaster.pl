# Crash matrix, rows 2 and 3: kill -9 of the postmaster in the middle of
# appends, then an immediate shutdown in the middle of appends.
#
# After SIGKILL of the postmaster its children notice that it died and
# exit; only when all of them are gone may a new postmaster start (it
# refuses while any of them is attached to the old shared memory).  The
# new postmaster runs crash recovery from the WAL.  "pg_ctl stop -m
# immediate" also skips the shutdown checkpoint, so the next start runs
# crash recovery too.  EsrcTap::crash_round checks every promise afterwards.
#
# TODO (forwarder, not ready yet): kill -9 of the postmaster in the middle
# of a forward to Kafka.
# TODO (snapshots, not ready yet): immediate shutdown during a snapshot
# rebuild.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use EsrcTap;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = esrc_node('crash_postmaster');

crash_round(
	$node,
	round => 1,
	label => 'postmaster kill -9',
	log_pattern =>
	  qr/database system was interrupted; last known up at.*database system was not properly shut down; automatic recovery in progress.*database system is ready to accept connections/s,
	crash => sub {
		my ($node) = @_;
		my $pm = postmaster_pid($node);
		my @children = postmaster_children($pm);
		ok(@children >= 8, "the postmaster ($pm) has " . scalar(@children) . " children");
		$node->kill9;
		ok(wait_gone(120, $pm, @children),
			'every child of the killed postmaster exits by itself');
		$node->start;
	});

crash_round(
	$node,
	round => 2,
	label => 'immediate shutdown',
	log_pattern =>
	  qr/received immediate shutdown request.*database system was not properly shut down; automatic recovery in progress.*database system is ready to accept connections/s,
	crash => sub {
		my ($node) = @_;
		$node->stop('immediate');
		$node->start;
	});

$node->stop;
done_testing();

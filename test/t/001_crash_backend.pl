# Crash matrix, row 1: kill -9 of a backend in the middle of an append.
#
# A backend stopped inside esrc.append_batch (its INSERT half done) is
# killed with SIGKILL while a pgbench load appends and two more sessions
# are mid-append; the postmaster then kills every backend and reinitializes
# shared memory.  EsrcTap::crash_round checks every promise afterwards.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use EsrcTap;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = esrc_node('crash_backend');

crash_round(
	$node,
	round => 1,
	label => 'backend kill -9',
	log_pattern =>
	  qr/was terminated by signal 9: Killed.*all server processes terminated; reinitializing/s,
	crash => sub {
		my ($node, $victim_pid) = @_;
		kill 'KILL', $victim_pid or die "cannot kill $victim_pid: $!";
	});

# a second time on the same cluster: the registry keeps working after a
# reinitialization
crash_round(
	$node,
	round => 2,
	label => 'second backend kill -9',
	log_pattern =>
	  qr/was terminated by signal 9: Killed.*all server processes terminated; reinitializing/s,
	crash => sub {
		my ($node, $victim_pid) = @_;
		kill 'KILL', $victim_pid or die "cannot kill $victim_pid: $!";
	});

$node->stop;
done_testing();

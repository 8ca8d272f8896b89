# Privileges that sql/privileges.sql does not cover: every function,
# table, view and sequence of schema esrc, whatever file created it
# (snapshots and the forwarder included), is refused to a login role that
# holds neither esrc_reader nor esrc_writer, both without USAGE on the
# schema (the first barrier) and with USAGE granted by mistake (then
# EXECUTE and SELECT must still be refused, with SQLSTATE 42501).  The
# list is read from the catalog, so objects added later are covered too.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use EsrcTap;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = esrc_node('privileges');
$node->safe_psql('postgres', <<'SQL');
SELECT esrc.append('secret-1', 'Created', '{"pin": 1234}');
CREATE ROLE nobody LOGIN;
CREATE ROLE usage_only LOGIN;
GRANT USAGE ON SCHEMA esrc TO usage_only;
CREATE ROLE reader LOGIN IN ROLE esrc_reader;
-- run a statement with the caller's privileges and report its SQLSTATE
CREATE FUNCTION public.try_sql(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END
$$;
-- one call per function, one SELECT per relation.  The arguments are NULLs
-- of the declared types behind a sub-select: a plain NULL constant would
-- let the planner fold a STRICT function away before the executor checks
-- EXECUTE.  (The test superuser is "esrc", so "$user" would put schema
-- esrc on the search_path and format_type would not qualify esrc.event.)
SET search_path = pg_catalog;
CREATE TABLE public.probes AS
SELECT 'function ' || p.oid::regprocedure::text AS object,
       CASE WHEN p.prokind = 'p' THEN 'CALL ' ELSE 'SELECT ' END
       || 'esrc.' || quote_ident(p.proname) || '('
       || coalesce((SELECT string_agg('(SELECT NULL::' || format_type(t, NULL) || ')', ', ' ORDER BY o)
                    FROM unnest(p.proargtypes) WITH ORDINALITY AS a(t, o)), '')
       || ')' AS sql
FROM pg_proc p WHERE p.pronamespace = 'esrc'::regnamespace
UNION ALL
SELECT CASE c.relkind WHEN 'S' THEN 'sequence ' WHEN 'v' THEN 'view ' ELSE 'table ' END
       || c.relname,
       'SELECT * FROM esrc.' || quote_ident(c.relname) || ' LIMIT 1'
FROM pg_class c WHERE c.relnamespace = 'esrc'::regnamespace
  AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f');
GRANT SELECT ON public.probes TO PUBLIC;
SQL

my $nfunc = $node->safe_psql('postgres',
	"SELECT count(*) FROM public.probes WHERE object LIKE 'function %'");
my $nrel = $node->safe_psql('postgres',
	"SELECT count(*) FROM public.probes WHERE object NOT LIKE 'function %'");
ok($nfunc >= 10 && $nrel >= 3, "probing $nfunc functions and $nrel relations of schema esrc");

# the harness can tell success from refusal: a reader reads
is($node->safe_psql('postgres',
		"SELECT public.try_sql('SELECT * FROM esrc.read_stream(''secret-1'')')",
		extra_params => [ '-U', 'reader' ]),
	'ok', 'control: a member of esrc_reader can call read_stream');

for my $t ([ 'nobody', qr/^42501 permission denied for schema esrc$/ ],
	[ 'usage_only', qr/^42501 permission denied for (function|table|view|sequence) / ])
{
	my ($role, $expect) = @$t;
	my $out = $node->safe_psql('postgres',
		'SELECT object, public.try_sql(sql) FROM public.probes ORDER BY object',
		extra_params => [ '-U', $role ]);
	my @rows = map { [ split /\|/, $_, 2 ] } split /\n/, $out;
	is(scalar(@rows), $nfunc + $nrel, "$role: every probe ran");
	my @bad = grep { $_->[1] !~ $expect } @rows;
	ok(!@bad, "$role: all " . scalar(@rows) . " functions and relations refused with 42501")
	  or diag(join("\n", map { "$_->[0]: $_->[1]" } @bad));
}

$node->stop;
done_testing();

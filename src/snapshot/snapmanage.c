/*-------------------------------------------------------------------------
 *
 * snapmanage.c
 *	  What managing snapshots from application start-up code and from a
 *	  migration role needs: the if_not_exists form of
 *	  esrc.create_snapshot (an existing snapshot of the same definition is
 *	  a notice, one of another definition an error that says what
 *	  differs), and the grants a new snapshot's readers need.
 *
 * Who may manage snapshots is the role esrc_snapshot_manager
 * (src/sql/00_core.sql creates it, 10_snapshot.sql grants it EXECUTE on
 * create/rebuild/drop_snapshot); snapbuild.c and snaprebuild.c check the
 * rest (ownership of the table, the right to read the log).  A reader of
 * a snapshot needs SELECT on its table and USAGE on its schema, besides
 * esrc_reader for esrc.load: create_snapshot grants SELECT to esrc_reader,
 * and USAGE on the schema when the caller may grant it; otherwise a
 * NOTICE says exactly what to grant (snap_grant_readers).
 *
 * Talks to: snapbuild.c (esrc_create_snapshot), snapshot.c (the cache of
 * definitions).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"

#include "snapshotint.h"

/* The cached definition of the snapshot table relid; NULL if it is none. */
static SnapshotDef *
find_definition(Oid relid)
{
	int			i;

	snap_ensure_cache();
	for (i = 0; i < snap_cache.ndefs; i++)
		if (snap_cache.defs[i].relid == relid)
			return &snap_cache.defs[i];
	return NULL;
}

static char *
jsonb_text(Jsonb *j)
{
	return JsonbToCString(NULL, &j->root, VARSIZE(j));
}

/*
 * The if_not_exists form of create_snapshot: is there already a table
 * called relname in nsp?  None: false (the caller creates it).  A snapshot
 * of the same category, reducer and initial state: a NOTICE, true (the
 * caller changes nothing).  Anything else: the error create_snapshot
 * would raise (42P07), with what differs in errdetail.
 */
bool
snap_exists_same(Oid nsp, const char *relname, const char *category, Oid reducer,
				 Jsonb *initial_state)
{
	Oid			relid = get_relname_relid(relname, nsp);
	SnapshotDef *def;
	StringInfoData diff;
	char	   *reducer_name;

	if (!OidIsValid(relid))
		return false;
	def = find_definition(relid);
	if (def == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("relation \"%s\" already exists", relname),
				 errdetail("It is not a snapshot: esrc.snapshots has no definition for it."),
				 errhint("Choose another name for the snapshot.")));

	initStringInfo(&diff);
	reducer_name = format_procedure_qualified(reducer);
	if (strcmp(def->category, category) != 0)
		appendStringInfo(&diff, " It follows category \"%s\", not \"%s\".",
						 def->category, category);
	if (strcmp(def->reducer_name, reducer_name) != 0)
		appendStringInfo(&diff, " Its reducer is %s, not %s.",
						 def->reducer_name, reducer_name);
	if (!DatumGetBool(DirectFunctionCall2(jsonb_eq, JsonbPGetDatum(def->initial_state),
										  JsonbPGetDatum(initial_state))))
		appendStringInfo(&diff, " Its initial state is %s, not %s.",
						 jsonb_text(def->initial_state), jsonb_text(initial_state));
	if (diff.len > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("snapshot \"%s\" already exists with another definition", relname),
				 errdetail("%s", diff.data + 1),
				 errhint("To change a snapshot, drop it with esrc.drop_snapshot() and create it again.")));
	ereport(NOTICE,
			(errcode(ERRCODE_DUPLICATE_TABLE),
			 errmsg("snapshot \"%s\" already exists, skipping", relname)));
	return true;
}

/*
 * What the readers of a new snapshot table need (SPI connected, as the
 * caller, who owns the table): SELECT on it for esrc_reader, and USAGE on
 * its schema.  The latter is granted to esrc_reader when it lacks it and
 * the caller may grant it (owner of the schema or grant option); if not,
 * a NOTICE names the statement to run.
 */
void
snap_grant_readers(Oid nsp, const char *qualname)
{
	Oid			reader = get_role_oid("esrc_reader", false);
	char	   *nspname = get_namespace_name(nsp);
	int			rc;

	rc = SPI_execute(psprintf("GRANT SELECT ON TABLE %s TO esrc_reader", qualname), false, 0);
	if (rc != SPI_OK_UTILITY)
		elog(ERROR, "GRANT SELECT on %s failed: %s", qualname, SPI_result_code_string(rc));

	if (esrc_namespace_aclcheck(nsp, reader, ACL_USAGE) == ACLCHECK_OK)
		return;
	if (esrc_namespace_aclcheck(nsp, GetUserId(), ACL_GRANT_OPTION_FOR(ACL_USAGE)) == ACLCHECK_OK)
	{
		rc = SPI_execute(psprintf("GRANT USAGE ON SCHEMA %s TO esrc_reader",
								  quote_identifier(nspname)), false, 0);
		if (rc != SPI_OK_UTILITY)
			elog(ERROR, "GRANT USAGE on schema %s failed: %s", nspname,
				 SPI_result_code_string(rc));
		ereport(NOTICE,
				(errmsg("granted USAGE on schema \"%s\" to esrc_reader", nspname),
				 errdetail("The readers of snapshot %s (esrc.load, SELECT) need it; they see no other object of the schema without privileges on it.",
						   qualname)));
		return;
	}
	ereport(NOTICE,
			(errmsg("esrc_reader has no USAGE on schema \"%s\": readers cannot load snapshot %s yet",
					nspname, qualname),
			 errdetail("A reader of a snapshot needs esrc_reader (SELECT on the table, granted) and USAGE on its schema."),
			 errhint("Have the schema's owner run: GRANT USAGE ON SCHEMA %s TO esrc_reader;",
					 quote_identifier(nspname))));
}

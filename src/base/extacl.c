/*-------------------------------------------------------------------------
 *
 * extacl.c
 *	  GRANT and REVOKE that must not become an extension's initial
 *	  privileges.  Inside an extension script (CREATE or ALTER EXTENSION)
 *	  PostgreSQL records every privilege change on a member object in
 *	  pg_init_privs, and pg_dump then leaves it out, as part of what
 *	  CREATE EXTENSION recreates; on 15 and 16 the role in it is not even a
 *	  shared dependency, so a DROP ROLE leaves its OID there.  Grants made
 *	  for a user's role (the roles esrc's catalogs refer to, rolemarker.c;
 *	  a user's EXECUTE carried over to a function whose signature an
 *	  upgrade changed, esrc_carry_over_execute) are the user's, not the
 *	  extension's: they run here with creating_extension off, so that they
 *	  are dumped and restored like any grant.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_proc.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/regproc.h"

#include "base/base.h"

PG_FUNCTION_INFO_V1(esrc_carry_over_execute);

/*
 * Run one GRANT or REVOKE through SPI (connected by the caller), not
 * recorded as an initial privilege.
 */
void
esrc_run_acl_outside_extension(const char *sql)
{
	bool		save_creating = creating_extension;
	int			rc;

	creating_extension = false;
	PG_TRY();
	{
		rc = SPI_execute(sql, false, 0);
		if (rc != SPI_OK_UTILITY)
			elog(ERROR, "\"%s\" failed: %s", sql, SPI_result_code_string(rc));
	}
	PG_FINALLY();
	{
		creating_extension = save_creating;
	}
	PG_END_TRY();
}

/*
 * esrc_carry_over_execute(old regprocedure, new regprocedure) -> integer,
 * for upgrade scripts only: grant EXECUTE on new to every role (PUBLIC
 * included) that holds it on old, but old's owner, with the grant option
 * where it was held; returns the number of grants.  An upgrade that
 * changes a function's signature creates a new function, and without
 * this a role granted the old one by the user would lose it.
 */
Datum
esrc_carry_over_execute(PG_FUNCTION_ARGS)
{
	static const char *sql =
		"SELECT a.grantee OPERATOR(pg_catalog.=) 0, "
		"       pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)), a.is_grantable "
		"FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a "
		"WHERE p.oid OPERATOR(pg_catalog.=) $1 "
		"  AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE' "
		"  AND a.grantee OPERATOR(pg_catalog.<>) p.proowner "
		"ORDER BY 2";
	Oid			oldfn = PG_GETARG_OID(0);
	Oid			newfn = PG_GETARG_OID(1);
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	char	   *target;
	uint64		i;
	int32		n;
	int			rc;

	if (!creating_extension ||
		CurrentExtensionObject != get_extension_oid("esrc", true))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("esrc_carry_over_execute() may only be called by esrc's upgrade scripts")));
	target = format_procedure_qualified(newfn);
	values[0] = ObjectIdGetDatum(oldfn);
	SPI_connect();
	rc = SPI_execute_with_args(sql, 1, argtypes, values, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "the grants of function %u: %s", oldfn, SPI_result_code_string(rc));
	n = (int32) SPI_processed;
	{
		SPITupleTable *tt = SPI_tuptable;

		for (i = 0; i < (uint64) n; i++)
		{
			bool		isnull;
			bool		public = DatumGetBool(SPI_getbinval(tt->vals[i], tt->tupdesc, 1, &isnull));
			char	   *role = SPI_getvalue(tt->vals[i], tt->tupdesc, 2);
			bool		grantable = DatumGetBool(SPI_getbinval(tt->vals[i], tt->tupdesc, 3, &isnull));

			esrc_run_acl_outside_extension(psprintf("GRANT EXECUTE ON FUNCTION %s TO %s%s",
													target, public ? "PUBLIC" : role,
													grantable ? " WITH GRANT OPTION" : ""));
		}
	}
	SPI_finish();
	PG_RETURN_INT32(n);
}

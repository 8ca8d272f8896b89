/*-------------------------------------------------------------------------
 *
 * namecheck.c
 *	  The warning of create_projection and create_snapshot about table
 *	  names without their schema in a handler's or reducer's body.  They
 *	  run with search_path = pg_catalog, pg_temp (the owner context,
 *	  ownerctx.c), so "INSERT INTO counts" fails there with 'relation
 *	  "counts" does not exist' although the table exists: say it when the
 *	  function is declared, not at its first event.
 *
 * Where it can tell cheaply, and conservatively (a warning on a correct
 * function is worse than none): SQL and PL/pgSQL bodies given as text
 * (not a SQL-standard body, whose names were resolved when it was
 * created), without a search_path of their own (SET search_path).  The
 * body is cut into words and punctuation -- comments, string literals and
 * dollar-quoted strings skipped -- and these are taken as table names:
 * INSERT INTO t, UPDATE t (not DO UPDATE / FOR UPDATE), DELETE FROM t,
 * JOIN t, and FROM t when what follows t ends a FROM item (WHERE, JOIN,
 * ORDER, ';', ... maybe after an alias; not ')' nor FOR, which end
 * extract(epoch FROM ts) and substring(s FROM n FOR m) too).  A name followed by "." or "("
 * is qualified or a function; a CTE's name (name AS ( ... )) and a
 * relation of pg_catalog are not reported.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_language.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "base/base.h"

#define MAX_TOKENS 20000

typedef struct Token
{
	char	   *text;			/* lower-cased word, or one punctuation char */
	bool		word;
} Token;

/* Cut src into tokens; comments and literals are dropped. */
static int
tokenize(const char *src, Token *tokens, int max)
{
	int			n = 0;
	const char *p = src;

	while (*p && n < max)
	{
		if (isspace((unsigned char) *p))
			p++;
		else if (p[0] == '-' && p[1] == '-')
			while (*p && *p != '\n')
				p++;
		else if (p[0] == '/' && p[1] == '*')
		{
			const char *end = strstr(p + 2, "*/");

			p = end ? end + 2 : p + strlen(p);
		}
		else if (*p == '\'')
		{
			for (p++; *p; p++)
				if (*p == '\'' && *++p != '\'')
					break;
		}
		else if (*p == '$' && (p[1] == '$' || isalpha((unsigned char) p[1]) || p[1] == '_'))
		{
			const char *q = p + 1;
			char	   *tag;
			const char *end;

			while (*q && *q != '$' && (isalnum((unsigned char) *q) || *q == '_'))
				q++;
			if (*q != '$')
			{
				p++;
				continue;
			}
			tag = pnstrdup(p, q - p + 1);
			end = strstr(q + 1, tag);
			p = end ? end + strlen(tag) : p + strlen(p);
		}
		else if (isalnum((unsigned char) *p) || *p == '_' || *p == '"')
		{
			const char *start = p;
			bool		quoted = *p == '"';

			if (quoted)
			{
				for (p++; *p && *p != '"'; p++)
					;
				tokens[n].text = pnstrdup(start + 1, p - start - 1);
				if (*p)
					p++;
			}
			else
			{
				char	   *c;

				while (isalnum((unsigned char) *p) || *p == '_' || *p == '$')
					p++;
				tokens[n].text = pnstrdup(start, p - start);
				for (c = tokens[n].text; *c; c++)
					*c = pg_ascii_tolower((unsigned char) *c);
			}
			tokens[n++].word = true;
		}
		else
		{
			tokens[n].text = pnstrdup(p, 1);
			tokens[n++].word = false;
			p++;
		}
	}
	return n;
}

static bool
in_list(List *l, const char *s)
{
	ListCell   *lc;

	foreach(lc, l)
		if (strcmp(lfirst(lc), s) == 0)
			return true;
	return false;
}

static bool
is(Token *t, int i, int n, const char *text)
{
	return i >= 0 && i < n && strcmp(t[i].text, text) == 0;
}

/* Does token i end a FROM item (so that the word before it is a table)? */
static bool
ends_from_item(Token *t, int i, int n)
{
	static const char *const ends[] = {";", "where", "join", "inner", "left", "right",
		"cross", "full", "natural", "group", "order", "limit", "offset", "union",
	"except", "intersect", "having", "window", NULL};
	int			k;

	if (i >= n)
		return true;
	for (k = 0; ends[k] != NULL; k++)
		if (is(t, i, n, ends[k]))
			return true;
	return false;
}

/* The table name at token i (after INSERT INTO, FROM, ...), or NULL. */
static const char *
table_at(Token *t, int i, int n, bool from)
{
	static const char *const not_tables[] = {"set", "of", "nowait", "skip", "only",
	"lateral", "select", "values", NULL};
	int			k;

	if (i >= n || !t[i].word || isdigit((unsigned char) t[i].text[0]) ||
		is(t, i + 1, n, ".") || is(t, i + 1, n, "("))
		return NULL;
	for (k = 0; not_tables[k] != NULL; k++)
		if (is(t, i, n, not_tables[k]))
			return NULL;
	if (from && !ends_from_item(t, i + 1, n) &&
		!(is(t, i + 1, n, "as") || (i + 1 < n && t[i + 1].word && ends_from_item(t, i + 2, n))))
		return NULL;
	return t[i].text;
}

/* The unqualified table names of a body, as "a, b"; "" for none. */
static char *
unqualified_tables(const char *src)
{
	Token	   *t = palloc(sizeof(Token) * MAX_TOKENS);
	int			n = tokenize(src, t, MAX_TOKENS);
	List	   *ctes = NIL;
	List	   *found = NIL;
	StringInfoData s;
	ListCell   *lc;
	int			i;

	for (i = 0; i + 2 < n; i++)
		if (t[i].word && is(t, i + 1, n, "as") && is(t, i + 2, n, "("))
			ctes = lappend(ctes, t[i].text);
	for (i = 0; i < n; i++)
	{
		const char *name = NULL;

		if (is(t, i, n, "insert") && is(t, i + 1, n, "into"))
			name = table_at(t, i + 2, n, false);
		else if (is(t, i, n, "update") && !is(t, i - 1, n, "do") && !is(t, i - 1, n, "for"))
			name = table_at(t, i + 1, n, false);
		else if (is(t, i, n, "delete") && is(t, i + 1, n, "from"))
			name = table_at(t, i + 2, n, false);
		else if (is(t, i, n, "join"))
			name = table_at(t, i + 1, n, false);
		else if (is(t, i, n, "from") && !is(t, i - 1, n, "distinct") && !is(t, i - 1, n, "delete"))
			name = table_at(t, i + 1, n, true);
		if (name == NULL || in_list(ctes, name) || in_list(found, name) ||
			OidIsValid(get_relname_relid(name, PG_CATALOG_NAMESPACE)))
			continue;
		found = lappend(found, (char *) name);
	}
	initStringInfo(&s);
	foreach(lc, found)
		appendStringInfo(&s, "%s%s", s.len > 0 ? ", " : "", (char *) lfirst(lc));
	return s.data;
}

/* Does the function set its own search_path (proconfig)? */
static bool
sets_search_path(HeapTuple tp)
{
	bool		isnull;
	Datum		d = SysCacheGetAttr(PROCOID, tp, Anum_pg_proc_proconfig, &isnull);
	Datum	   *elems;
	int			n;
	int			i;

	if (isnull)
		return false;
	deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, NULL, &n);
	for (i = 0; i < n; i++)
		if (strncmp(TextDatumGetCString(elems[i]), "search_path=", 12) == 0)
			return true;
	return false;
}

/*
 * WARNING when the body of funcoid (what: "the handler of projection
 * \"x\"") names tables without their schema, where that can be told.
 */
void
esrc_warn_unqualified_names(Oid funcoid, const char *what)
{
	HeapTuple	tp = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcoid));
	bool		isnull;
	char	   *lang;
	char	   *names = "";
	Datum		d;

	if (!HeapTupleIsValid(tp))
		return;
	lang = get_language_name(((Form_pg_proc) GETSTRUCT(tp))->prolang, true);
	(void) SysCacheGetAttr(PROCOID, tp, Anum_pg_proc_prosqlbody, &isnull);
	if (lang != NULL && (strcmp(lang, "sql") == 0 || strcmp(lang, "plpgsql") == 0) &&
		isnull && !sets_search_path(tp))
	{
		d = SysCacheGetAttr(PROCOID, tp, Anum_pg_proc_prosrc, &isnull);
		if (!isnull)
			names = unqualified_tables(TextDatumGetCString(d));
	}
	ReleaseSysCache(tp);
	if (names[0] == '\0')
		return;
	ereport(WARNING,
			(errmsg("function %s names tables without their schema: %s",
					format_procedure(funcoid), names),
			 errdetail("%s runs with search_path = pg_catalog, pg_temp, where such a name is not found.",
					   what),
			 errhint("Qualify the names with their schema (app.counts), or give the function its own SET search_path.")));
}

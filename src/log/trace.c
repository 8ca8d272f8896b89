/*-------------------------------------------------------------------------
 *
 * trace.c
 *	  W3C trace context: the settings esrc.traceparent and esrc.tracestate,
 *	  the check of a traceparent, and the trace context of an event.
 *
 * An event carries its trace context in its metadata, as the top-level
 * string keys "traceparent" and "tracestate" (W3C Trace Context,
 * https://www.w3.org/TR/trace-context/).  Two ways in:
 *	 - the application writes them into the metadata itself;
 *	 - it sets esrc.traceparent (and esrc.tracestate) for a transaction,
 *	   SET LOCAL esrc.traceparent = '00-<trace-id>-<parent-id>-01', and
 *	   esrc.append/append_batch copy them into the metadata of every event
 *	   whose metadata has no "traceparent" key (esrc_trace_metadata, called
 *	   by append.c before its size check).  NULL metadata becomes an object
 *	   with the keys; metadata that is not an object is left alone.
 * One way out: the forwarder sends them as the record headers
 * ce_traceparent and ce_tracestate (the CloudEvents distributed tracing
 * extension, Kafka binding), esrc_trace_of_event, called by fwdread.c.
 *
 * Invariants: the settings only ever hold a valid traceparent (their
 * check hooks refuse anything else with SQLSTATE 22023), so what an
 * append copies is valid.  Metadata is the application's: a malformed
 * traceparent there is stored as given but never forwarded as a header
 * (nor is the tracestate that goes with it), so it can never make a
 * record Kafka or a consumer refuses.
 *
 * Talks to: append.c (esrc_trace_metadata), fwdread.c
 * (esrc_trace_of_event), esrc.c (esrc_trace_init from _PG_init).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/jsonb.h"

#include "log/log.h"

/* GUC variables */
char	   *esrc_traceparent = NULL;
char	   *esrc_tracestate = NULL;

/*
 * Is s[0 .. n-1] n lowercase hex digits?  *allzero: are they all "0"?
 */
static bool
lower_hex(const char *s, int n, bool *allzero)
{
	int			i;

	*allzero = true;
	for (i = 0; i < n; i++)
	{
		char		c = s[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
		if (c != '0')
			*allzero = false;
	}
	return true;
}

/*
 * Is s[0 .. len-1] a valid W3C traceparent?
 *	 version "-" trace-id "-" parent-id "-" trace-flags
 * version: 2 lowercase hex digits, not "ff"; trace-id: 32, not all zero;
 * parent-id: 16, not all zero; trace-flags: 2.  Version 00 has exactly
 * these 55 characters; a later version may append "-" and more fields,
 * which are kept as they are (the specification's rule for a parser that
 * knows only version 00), up to ESRC_TRACEPARENT_MAX bytes in all (so
 * that the headers fit in fwdconf.c's RECORD_RESERVE).
 */
bool
esrc_traceparent_valid(const char *s, int len)
{
	bool		zero;

	if (len < 55 || len > ESRC_TRACEPARENT_MAX)
		return false;
	if (!lower_hex(s, 2, &zero) || (s[0] == 'f' && s[1] == 'f'))
		return false;
	if (s[2] != '-' || s[35] != '-' || s[52] != '-')
		return false;
	if (!lower_hex(s + 3, 32, &zero) || zero)
		return false;
	if (!lower_hex(s + 36, 16, &zero) || zero)
		return false;
	if (!lower_hex(s + 53, 2, &zero))
		return false;
	if (len == 55)
		return true;
	/* longer: only for a version after 00, and then "-" and more */
	return !(s[0] == '0' && s[1] == '0') && s[55] == '-';
}

/* tracestate as a setting: at most 512 printable ASCII characters */
static bool
tracestate_valid(const char *s, int len)
{
	int			i;

	if (len > ESRC_TRACESTATE_MAX)
		return false;
	for (i = 0; i < len; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
	return true;
}

static bool
check_traceparent(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0' ||
		esrc_traceparent_valid(*newval, strlen(*newval)))
		return true;
	GUC_check_errdetail("A traceparent is version-traceid-parentid-flags in lowercase hex: 2, 32 (not all zero), 16 (not all zero) and 2 digits, version not ff.");
	GUC_check_errhint("For example: SET LOCAL esrc.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'.");
	return false;
}

static bool
check_tracestate(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || tracestate_valid(*newval, strlen(*newval)))
		return true;
	GUC_check_errdetail("A tracestate is at most %d printable ASCII characters.",
						ESRC_TRACESTATE_MAX);
	GUC_check_errhint("For example: SET LOCAL esrc.tracestate = 'vendor1=opaque1,vendor2=opaque2'.");
	return false;
}

/* Called by _PG_init (esrc.c), before MarkGUCPrefixReserved. */
void
esrc_trace_init(void)
{
	DefineCustomStringVariable("esrc.traceparent",
							   "W3C traceparent that esrc.append and esrc.append_batch add to the metadata of events without one.",
							   "Set it for a transaction with SET LOCAL; empty (the default) adds nothing.",
							   &esrc_traceparent,
							   "",
							   PGC_USERSET, 0,
							   check_traceparent, NULL, NULL);
	DefineCustomStringVariable("esrc.tracestate",
							   "W3C tracestate added with esrc.traceparent to the metadata of events without a traceparent.",
							   "Ignored while esrc.traceparent is empty.",
							   &esrc_tracestate,
							   "",
							   PGC_USERSET, 0,
							   check_tracestate, NULL, NULL);
}

/* the value of top-level key "key" of object jb, NULL if none */
static JsonbValue *
object_key(Jsonb *jb, const char *key)
{
	JsonbValue	k;

	if (!JB_ROOT_IS_OBJECT(jb))
		return NULL;
	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	return findJsonbValueFromContainer(&jb->root, JB_FOBJECT, &k);
}

/*
 * The metadata an append stores for an event given "metadata" (NULL =
 * none): with esrc.traceparent (and esrc.tracestate, when set) added when
 * the setting is set and the metadata is NULL or an object without a
 * "traceparent" key; else metadata itself.  Costs one test when the
 * setting is empty.  May ereport (out of memory).
 */
Jsonb *
esrc_trace_metadata(Jsonb *metadata)
{
	JsonbParseState *state = NULL;
	JsonbValue	k;
	JsonbValue	v;
	Jsonb	   *add;

	if (esrc_traceparent == NULL || esrc_traceparent[0] == '\0')
		return metadata;
	if (metadata != NULL &&
		(!JB_ROOT_IS_OBJECT(metadata) || object_key(metadata, "traceparent") != NULL))
		return metadata;

	(void) pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	k.type = jbvString;
	v.type = jbvString;
	k.val.string.val = "traceparent";
	k.val.string.len = strlen("traceparent");
	v.val.string.val = esrc_traceparent;
	v.val.string.len = strlen(esrc_traceparent);
	(void) pushJsonbValue(&state, WJB_KEY, &k);
	(void) pushJsonbValue(&state, WJB_VALUE, &v);
	if (esrc_tracestate != NULL && esrc_tracestate[0] != '\0')
	{
		k.val.string.val = "tracestate";
		k.val.string.len = strlen("tracestate");
		v.val.string.val = esrc_tracestate;
		v.val.string.len = strlen(esrc_tracestate);
		(void) pushJsonbValue(&state, WJB_KEY, &k);
		(void) pushJsonbValue(&state, WJB_VALUE, &v);
	}
	add = JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
	if (metadata == NULL)
		return add;
	/* a "tracestate" of the metadata gives way to esrc.tracestate, if set */
	return DatumGetJsonbP(DirectFunctionCall2(jsonb_concat,
											  JsonbPGetDatum(metadata),
											  JsonbPGetDatum(add)));
}

/*
 * The trace context of an event to forward, from its metadata: its
 * "traceparent" when that is a valid traceparent string, and then its
 * "tracestate" when that is a string of at most ESRC_TRACESTATE_MAX
 * bytes (as it is, unchecked otherwise).  Each is NULL when not
 * forwarded: a malformed traceparent drops both, a tracestate without a
 * valid traceparent means nothing.  The strings are palloc'd in the
 * current memory context.
 */
void
esrc_trace_of_event(Jsonb *metadata, char **traceparent, char **tracestate)
{
	JsonbValue *v;

	*traceparent = NULL;
	*tracestate = NULL;
	v = object_key(metadata, "traceparent");
	if (v == NULL || v->type != jbvString ||
		!esrc_traceparent_valid(v->val.string.val, v->val.string.len))
		return;
	*traceparent = pnstrdup(v->val.string.val, v->val.string.len);
	v = object_key(metadata, "tracestate");
	if (v != NULL && v->type == jbvString &&
		v->val.string.len <= ESRC_TRACESTATE_MAX)
		*tracestate = pnstrdup(v->val.string.val, v->val.string.len);
}

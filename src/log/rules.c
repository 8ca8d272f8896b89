/*-------------------------------------------------------------------------
 *
 * rules.c
 *	  The stream rules of the log's life cycle (issue 16), as the log
 *	  applies them: which events of a stream the read functions hide, and
 *	  which streams refuse appends.  retention.c's esrc.set_stream_rules()
 *	  and esrc.delete_stream() write them.
 *
 * This file owns:
 *	 - the trigger esrc.stream_rules_changed(), which turns every change of
 *	   esrc.stream_rules into a relcache invalidation of the table, sent to
 *	   every backend when the change commits;
 *	 - a backend-local cache of esrc.stream_rules (all of it: one entry per
 *	   stream with rules), loaded with a new snapshot when a read or an
 *	   append first needs it after such an invalidation;
 *	 - the filters the read paths apply (read.c, subscription.c,
 *	   snapread.c) and the hard-delete check of appends (append.c);
 *	 - the same first-visible computation from the table itself, not the
 *	   cache, for the scavenger (esrc_rules_first_visible_now, scavenge.c);
 *	 - a stream's current rules from the cache, for retention.c
 *	   (esrc_rules_current).
 *
 * The rules, exactly (docs/lifecycle.md is the reference):
 *	 - truncate_before T hides versions < T;
 *	 - max_count N hides versions <= head - N, head being the stream's last
 *	   version under the read's snapshot;
 *	 - max_age A hides every version up to the last one whose recorded_at is
 *	   before statement_timestamp() - A.  recorded_at is not strictly
 *	   ordered by version (an append takes its clock before the stream
 *	   lock), so "the events older than A" could leave a hole; this
 *	   definition cannot;
 *	 - a stream's first visible version is the highest of these bounds, and
 *	   every version from it to the head is visible.  So versions never
 *	   change and a read never shows a hole.
 *
 * Invariants kept:
 *	 - a read takes the cache as it is when the read starts and uses it to
 *	   the end: the invalidation callback only marks the cache stale, and it
 *	   is reloaded only at the start of the next read or append
 *	   (rules_refresh), never while a filter uses it;
 *	 - an append checks the cache after it holds the stream lock, which
 *	   esrc.delete_stream also takes; a committing transaction sends its
 *	   invalidations before it releases its locks, so an append that waited
 *	   for a hard delete sees it;
 *	 - when no stream has rules, a read costs AcceptInvalidationMessages()
 *	   and one test, and an append the same;
 *	 - a read that took its snapshot after esrc_rules_prepare() reuses the
 *	   bound an earlier read computed for a stream with max_count or
 *	   max_age (kept in the stream's StreamRule, so a reload drops it) when
 *	   rulebound.c says the two reads see the same events of the stream;
 *	   an append to such a stream marks it there (esrc_rules_check_append),
 *	   under the stream lock.
 *
 * Talks to: read.c (the index scans of a stream), append.c (the stream
 * lock tag), rulebound.c (append marks, the bounds kept between reads).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"
#include "logint.h"

PG_FUNCTION_INFO_V1(esrc_stream_rules_changed);

/* the columns of esrc.stream_rules, in the order of src/sql/50_lifecycle.sql */
#define Anum_rules_stream			1
#define Anum_rules_truncate_before	2
#define Anum_rules_max_count		3
#define Anum_rules_max_age			4
#define Anum_rules_hard_deleted		5
#define Natts_rules					6

/* The rules of one stream.  -1: no such rule. */
typedef struct StreamRule
{
	struct StreamRule *next;	/* another stream in the same bucket */
	uint32		hash;			/* hash_bytes() of the name */
	char	   *stream;
	int			len;
	int64		truncate_before;
	int64		max_count;
	bool		has_max_age;
	Interval	max_age;
	bool		hard_deleted;
	EsrcBound	bound;			/* max_count, max_age: rulebound.c */
} StreamRule;

/*
 * The rules by stream: a chained hash table of nbuckets (a power of two)
 * heads, indexed by hash_bytes() of the name.  Not dynahash: a global read
 * looks up every event's stream, and one hash and one index is what that
 * costs here.
 */
typedef struct RuleTable
{
	uint32		mask;			/* nbuckets - 1 */
	StreamRule **buckets;
	/*
	 * A bitmap by quick_hash() of the names with rules, at least 16 bits per
	 * rule: most events of a global read belong to streams without rules,
	 * and the bitmap turns most of them away before the real lookup.
	 */
	uint32		bitmask;		/* nbits - 1 */
	uint64	   *bits;
} RuleTable;

/*
 * The backend's copy of esrc.stream_rules.  valid is cleared by the
 * relcache callback (any invalidation of the table, or of all relations);
 * the cache is rebuilt by rules_refresh() only.
 */
static struct
{
	bool		valid;
	bool		callback_registered;
	Oid			relid;			/* esrc.stream_rules when loaded */
	MemoryContext cxt;			/* holds rules and its entries */
	RuleTable  *rules;			/* NULL when empty */
	StreamRule *loaded;			/* the rules as loaded, before indexing */
	int			nrules;
	int			nhard;			/* streams deleted permanently */
	uint64		generation;		/* + 1 at every load */
} rules_cache;

/* One read's view of the rules (log.h). */
struct EsrcRuleFilter
{
	Snapshot	snap;			/* the read's snapshot */
	TimestampTz now;			/* statement_timestamp(), for max_age */
	RuleTable  *rules;			/* rules_cache.rules when the read began */
	uint64		generation;
	/* the last stream looked up, and its rule: events come in runs */
	bool		has_last;
	int			last_len;
	StreamRule *last_rule;
	char		last_name[ESRC_MAX_STREAM_NAME + 1];
	HTAB	   *bounds;			/* first visible version by StreamRule *,
								 * computed in this read */
	bool		checked;		/* scans check the caller's privileges */
	EsrcLogScan *scan;			/* of (stream, version), for the bounds */
	StreamRule *last_bound_rule;	/* the last rule bound_of() answered for */
	int64		last_bound;
	/* reads that may reuse bounds (esrc_rules_begin_fresh) */
	uint64		serial;			/* esrc_bound_serial(); 0: they may not */
	uint64		clock;			/* esrc_mark_clock() before the snapshot */
	bool		cutoff_known;	/* for the last max_age computed: */
	Interval	cutoff_age;
	TimestampTz cutoff;
};

typedef struct RuleBound
{
	StreamRule *rule;			/* key */
	int64		first_visible;
} RuleBound;

static void
rules_relcache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == rules_cache.relid)
		rules_cache.valid = false;
}

/* A cheap hash of a name (its length and last 8 bytes), for the bitmap. */
static inline uint32
quick_hash(const char *name, int len)
{
	uint64		tail = 0;
	int			n = Min(len, 8);

	memcpy(&tail, name + len - n, n);
	return (uint32) (((tail ^ (uint64) len) * UINT64CONST(0x9E3779B97F4A7C15)) >> 32);
}

static inline bool
maybe_has_rule(RuleTable *t, const char *name, int len)
{
	uint32		q = quick_hash(name, len) & t->bitmask;

	return (t->bits[q >> 6] & (UINT64CONST(1) << (q & 63))) != 0;
}

static StreamRule *
find_rule(RuleTable *rules, const char *name, int len)
{
	uint32		h;
	StreamRule *r;

	if (rules == NULL)
		return NULL;
	h = hash_bytes((const unsigned char *) name, len);
	for (r = rules->buckets[h & rules->mask]; r != NULL; r = r->next)
		if (r->hash == h && r->len == len && memcmp(r->stream, name, len) == 0)
			return r;
	return NULL;
}

/* Index the rules loaded (rules_cache.loaded) in a table of their own. */
static void
index_rules(void)
{
	RuleTable  *t;
	StreamRule *r;
	StreamRule *next;
	uint32		n = 16;
	uint32		nbits = 64;

	if (rules_cache.nrules == 0)
		return;
	while (n < (uint32) rules_cache.nrules * 2 && n < (1U << 30))
		n <<= 1;
	while (nbits < (uint32) rules_cache.nrules * 16 && nbits < (1U << 31))
		nbits <<= 1;
	t = MemoryContextAlloc(rules_cache.cxt, sizeof(RuleTable));
	t->mask = n - 1;
	t->buckets = MemoryContextAllocZero(rules_cache.cxt, sizeof(StreamRule *) * n);
	t->bitmask = nbits - 1;
	t->bits = MemoryContextAllocZero(rules_cache.cxt, nbits / 8);
	for (r = rules_cache.loaded; r != NULL; r = next)
	{
		uint32		q = quick_hash(r->stream, r->len) & t->bitmask;

		t->bits[q >> 6] |= UINT64CONST(1) << (q & 63);
		next = r->next;
		r->next = t->buckets[r->hash & t->mask];
		t->buckets[r->hash & t->mask] = r;
	}
	rules_cache.loaded = NULL;
	rules_cache.rules = t;
}

/* The rule of the row in slot (a row of esrc.stream_rules), its name in cxt. */
static void
rule_from_slot(TupleTableSlot *slot, StreamRule *r, MemoryContext cxt)
{
	Datum	   *v = slot->tts_values;
	bool	   *n = slot->tts_isnull;
	char	   *name = TextDatumGetCString(v[Anum_rules_stream - 1]);

	memset(r, 0, sizeof(StreamRule));
	r->len = strlen(name);
	r->stream = MemoryContextStrdup(cxt, name);
	r->truncate_before = n[Anum_rules_truncate_before - 1] ? -1 :
		DatumGetInt64(v[Anum_rules_truncate_before - 1]);
	r->max_count = n[Anum_rules_max_count - 1] ? -1 :
		DatumGetInt64(v[Anum_rules_max_count - 1]);
	r->has_max_age = !n[Anum_rules_max_age - 1];
	if (r->has_max_age)
		r->max_age = *DatumGetIntervalP(v[Anum_rules_max_age - 1]);
	r->hard_deleted = !n[Anum_rules_hard_deleted - 1] &&
		DatumGetBool(v[Anum_rules_hard_deleted - 1]);
	r->hash = hash_bytes((const unsigned char *) r->stream, r->len);
}

/* Add the row in slot to the cache (in rules_cache.cxt). */
static void
cache_row(TupleTableSlot *slot)
{
	StreamRule *r = MemoryContextAllocZero(rules_cache.cxt, sizeof(StreamRule));

	rule_from_slot(slot, r, rules_cache.cxt);
	r->next = rules_cache.loaded;
	rules_cache.loaded = r;
	rules_cache.nrules++;
	if (r->hard_deleted)
		rules_cache.nhard++;
}

/*
 * Load esrc.stream_rules into the cache under a new snapshot (which sees
 * this transaction's own changes).  Without the table (the extension is
 * not installed, or not updated to 0.2.0) the cache is empty and stays
 * stale, so that the next call looks again.
 */
static void
rules_load(void)
{
	Oid			nsp;
	Relation	rel;
	Snapshot	snap;
	TableScanDesc scan;
	TupleTableSlot *slot;

	if (!rules_cache.callback_registered)
	{
		CacheRegisterRelcacheCallback(rules_relcache_callback, (Datum) 0);
		rules_cache.callback_registered = true;
	}
	if (rules_cache.cxt != NULL)
		MemoryContextDelete(rules_cache.cxt);
	rules_cache.cxt = AllocSetContextCreate(CacheMemoryContext, "esrc stream rules",
											ALLOCSET_SMALL_SIZES);
	rules_cache.rules = NULL;
	rules_cache.loaded = NULL;
	rules_cache.nrules = 0;
	rules_cache.nhard = 0;
	rules_cache.generation++;

	nsp = get_namespace_oid("esrc", true);
	rules_cache.relid = OidIsValid(nsp) ? get_relname_relid("stream_rules", nsp) : InvalidOid;
	if (!OidIsValid(rules_cache.relid))
		return;

	/* an invalidation that arrives while this runs makes it stale again */
	rules_cache.valid = true;
	PG_TRY();
	{
		rel = table_open(rules_cache.relid, AccessShareLock);
		if (RelationGetDescr(rel)->natts != Natts_rules)
			elog(ERROR, "esrc.stream_rules has an unexpected row type");
		snap = RegisterSnapshot(GetLatestSnapshot());
		slot = table_slot_create(rel, NULL);
		scan = table_beginscan(rel, snap, 0, NULL);
		while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
		{
			slot_getallattrs(slot);
			cache_row(slot);
		}
		table_endscan(scan);
		ExecDropSingleTupleTableSlot(slot);
		UnregisterSnapshot(snap);
		table_close(rel, AccessShareLock);
		index_rules();
	}
	PG_CATCH();
	{
		rules_cache.valid = false;
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* Bring the cache up to date with every change committed so far. */
static void
rules_refresh(void)
{
	AcceptInvalidationMessages();
	if (!rules_cache.valid)
		rules_load();
}

/*
 * A filter for one read under snap, or NULL when no stream has rules.
 * Allocated in CurrentMemoryContext; valid until the read ends, when the
 * caller calls esrc_rules_end().
 */
EsrcRuleFilter *
esrc_rules_begin(Snapshot snap)
{
	EsrcRuleFilter *f;

	rules_refresh();
	if (rules_cache.nrules == 0)
		return NULL;
	f = palloc0(sizeof(EsrcRuleFilter));
	f->snap = snap;
	f->now = GetCurrentStatementStartTimestamp();
	f->rules = rules_cache.rules;
	f->generation = rules_cache.generation;
	f->checked = true;
	return f;
}

/*
 * Before a read takes a new snapshot: bring the rules cache up to date and
 * read the append marks' clock (rulebound.c).  Both must precede the
 * snapshot: an append that did not mark its stream committed before the
 * stream's rule did, so before the cache was loaded.
 */
void
esrc_rules_prepare(EsrcRulesToken *tok)
{
	rules_refresh();
	tok->generation = rules_cache.generation;
	tok->ok = rules_cache.nrules > 0;
	tok->clock = tok->ok ? esrc_mark_clock() : 0;
}

/*
 * esrc_rules_begin for a read whose snapshot was taken after
 * esrc_rules_prepare(tok): it may reuse the bounds of earlier reads, and
 * keeps those it computes, unless the rules changed in between.
 */
EsrcRuleFilter *
esrc_rules_begin_fresh(Snapshot snap, const EsrcRulesToken *tok)
{
	EsrcRuleFilter *f = esrc_rules_begin(snap);

	if (f != NULL && tok->ok && tok->generation == f->generation)
	{
		f->serial = esrc_bound_serial();
		f->clock = tok->clock;
	}
	return f;
}

/*
 * The first version of the stream that rule r leaves visible under the
 * filter's snapshot: the highest of its bounds (see the header comment).
 * Scans the stream backward from its head only for max_count and max_age,
 * down to the bound (for max_age, the visible events and one more).
 */
static int64
rule_first_visible(EsrcRuleFilter *f, StreamRule *r, text *stream,
				   TimestampTz cutoff, TimestampTz *cut_after,
				   TimestampTz *cut_until)
{
	int64		lo = Max(r->truncate_before, 0);
	EsrcLogScan *scan;
	TupleTableSlot *slot;
	bool		first = true;

	/* the result holds for every cutoff in (cut_after, cut_until] */
	*cut_after = DT_NOBEGIN;
	*cut_until = DT_NOEND;
	if (r->max_count < 0 && !r->has_max_age)
		return lo;
	/* one scan per read, restarted for each stream */
	if (f->scan != NULL)
		esrc_log_rescan_stream(f->scan, PointerGetDatum(stream), 0, PG_INT64_MAX);
	else if (f->checked)
		f->scan = esrc_log_begin(ESRC_LOG_BY_STREAM, PointerGetDatum(stream), 0,
								 PG_INT64_MAX, BackwardScanDirection, f->snap);
	else
		f->scan = esrc_log_begin_unchecked(ESRC_LOG_BY_STREAM, PointerGetDatum(stream), 0,
										   PG_INT64_MAX, BackwardScanDirection, f->snap);
	scan = f->scan;
	while ((slot = esrc_log_next(scan)) != NULL)
	{
		int64		v = DatumGetInt64(slot->tts_values[Anum_events_version - 1]);
		TimestampTz ts;

		if (first)
		{
			first = false;
			if (r->max_count > 0 && v - r->max_count + 1 > lo)
				lo = v - r->max_count + 1;
			if (!r->has_max_age)
				break;
		}
		if (v < lo)
			break;
		ts = DatumGetTimestampTz(slot->tts_values[Anum_events_recorded_at - 1]);
		if (ts < cutoff)
		{
			lo = v + 1;
			*cut_after = ts;
			break;
		}
		*cut_until = Min(*cut_until, ts);
	}
	return lo;
}

/* statement_timestamp() - max_age of rule r, for the read of f */
static TimestampTz
rule_cutoff(EsrcRuleFilter *f, StreamRule *r)
{
	if (!r->has_max_age)
		return 0;
	if (!f->cutoff_known || memcmp(&f->cutoff_age, &r->max_age, sizeof(Interval)) != 0)
	{
		f->cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
															TimestampTzGetDatum(f->now),
															IntervalPGetDatum(&r->max_age)));
		f->cutoff_age = r->max_age;
		f->cutoff_known = true;
	}
	return f->cutoff;
}

/*
 * bound_of for a read that may reuse bounds: the rule's EsrcBound, if
 * rulebound.c says it holds for this read, else computed and kept there.
 */
static int64
bound_cached(EsrcRuleFilter *f, StreamRule *r, text *stream)
{
	TimestampTz cutoff = rule_cutoff(f, r);
	TimestampTz after;
	TimestampTz until;
	uint64		mark;
	bool		quiet;
	int64		lo;

	lo = esrc_bound_lookup(&r->bound, r->hash, f->serial, f->clock, cutoff,
						   &mark, &quiet);
	if (lo < 0)
	{
		lo = rule_first_visible(f, r, stream, cutoff, &after, &until);
		esrc_bound_store(&r->bound, f->serial, mark, quiet, lo, after, until);
	}
	f->last_bound_rule = r;
	f->last_bound = lo;
	return lo;
}

/* The first visible version of the stream of rule r, once per read. */
static int64
bound_of(EsrcRuleFilter *f, StreamRule *r, text *stream)
{
	RuleBound  *b;
	bool		found;

	if (r->max_count < 0 && !r->has_max_age)
		return Max(r->truncate_before, 0);
	if (r == f->last_bound_rule)
		return f->last_bound;
	if (f->serial != 0)
		return bound_cached(f, r, stream);
	if (f->bounds == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(StreamRule *);
		ctl.entrysize = sizeof(RuleBound);
		ctl.hcxt = CurrentMemoryContext;
		f->bounds = hash_create("esrc stream bounds", 64, &ctl,
								HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	b = hash_search(f->bounds, &r, HASH_ENTER, &found);
	if (!found)
	{
		TimestampTz after;
		TimestampTz until;

		b->first_visible = rule_first_visible(f, r, stream, rule_cutoff(f, r),
											  &after, &until);
	}
	f->last_bound_rule = r;
	f->last_bound = b->first_visible;
	return b->first_visible;
}

static StreamRule *
filter_rule(EsrcRuleFilter *f, text *stream)
{
	const char *name = VARDATA_ANY(stream);
	int			len = VARSIZE_ANY_EXHDR(stream);

	if (f->generation != rules_cache.generation)
		elog(ERROR, "the stream rules were reloaded during a read");
	if (!maybe_has_rule(f->rules, name, len))
		return NULL;
	if (f->has_last && len == f->last_len && memcmp(name, f->last_name, len) == 0)
		return f->last_rule;
	f->last_rule = find_rule(f->rules, name, len);
	f->has_last = len <= ESRC_MAX_STREAM_NAME;
	if (f->has_last)
		memcpy(f->last_name, name, len);
	f->last_len = len;
	return f->last_rule;
}

/* The first version of stream the read may show (0: no rules). */
int64
esrc_rules_first_visible(EsrcRuleFilter *f, text *stream)
{
	StreamRule *r = filter_rule(f, stream);

	return r == NULL ? 0 : bound_of(f, r, stream);
}

/* May the read show the event in slot (a row of esrc.events)? */
bool
esrc_rules_visible(EsrcRuleFilter *f, TupleTableSlot *slot)
{
	text	   *stream = DatumGetTextPP(slot->tts_values[Anum_events_stream - 1]);
	StreamRule *r = filter_rule(f, stream);

	if (r == NULL)
		return true;
	return DatumGetInt64(slot->tts_values[Anum_events_version - 1]) >=
		bound_of(f, r, stream);
}

/* End a read's use of the rules: close its scan, if it made one. */
void
esrc_rules_end(EsrcRuleFilter *f)
{
	if (f->scan != NULL)
		esrc_log_end(f->scan);
	f->scan = NULL;
}

/*
 * The first visible version of stream under snap, from the stream's row of
 * esrc.stream_rules as snap sees it -- not from the cache, which may be
 * older -- by the same rule_first_visible() the reads use, with now in
 * place of the read's statement_timestamp() for max_age.  For the
 * scavenger (scavenge.c), which holds the stream lock, so the rules
 * cannot change under it.  Returns false when the stream has no rules.
 * Reads the table and the log as catalogs are read: no privilege checks.
 */
bool
esrc_rules_first_visible_now(const char *stream, Snapshot snap, TimestampTz now,
							 int64 *first_visible)
{
	Relation	rel = esrc_open_relation("stream_rules", AccessShareLock);
	Relation	idx;
	TupleTableSlot *slot;
	ScanKeyData key;
	IndexScanDesc scan;
	bool		found = false;
	StreamRule	r;

	if (RelationGetDescr(rel)->natts != Natts_rules)
		elog(ERROR, "esrc.stream_rules has an unexpected row type");
	idx = index_open(esrc_relation_oid("stream_rules_pkey"), AccessShareLock);
	slot = table_slot_create(rel, NULL);
	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[0], F_TEXTEQ,
						   CStringGetTextDatum(stream));
	scan = esrc_index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		slot_getallattrs(slot);
		rule_from_slot(slot, &r, CurrentMemoryContext);
		found = true;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	if (found)
	{
		EsrcRuleFilter f;
		TimestampTz after;
		TimestampTz until;

		memset(&f, 0, sizeof(f));
		f.snap = snap;
		f.now = now;
		f.checked = false;

		*first_visible = rule_first_visible(&f, &r, cstring_to_text(stream),
											rule_cutoff(&f, &r), &after, &until);
		esrc_rules_end(&f);
	}
	return found;
}

/*
 * Mark an append to a stream whose max_count or max_age rule depends on its
 * newest events (rulebound.c), and return the stream's rule (NULL: none).
 * The caller holds the stream lock, has made its earlier commands visible,
 * and has not inserted the events yet.
 */
static StreamRule *
mark_append(const char *stream)
{
	StreamRule *r;

	rules_refresh();
	if (rules_cache.nrules == 0 ||
		!maybe_has_rule(rules_cache.rules, stream, strlen(stream)))
		return NULL;
	r = find_rule(rules_cache.rules, stream, strlen(stream));
	/* readers that keep the stream's bound must compute it again */
	if (r != NULL && (r->max_count >= 0 || r->has_max_age))
		esrc_mark_append(r->hash);
	return r;
}

/*
 * Only the marking of esrc_rules_check_append: for esrc's own events (the
 * tombstones of erase_stream and delete_stream), which a hard delete does
 * not refuse.  Same conditions.
 */
void
esrc_rules_mark_append(const char *stream)
{
	(void) mark_append(stream);
}

/*
 * Refuse an append to a stream deleted permanently, and mark it as
 * mark_append does.  Same conditions.
 */
void
esrc_rules_check_append(const char *stream)
{
	StreamRule *r = mark_append(stream);

	if (r != NULL && r->hard_deleted)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s\" is deleted permanently", stream),
				 errdetail("esrc.delete_stream() deleted it with hard => true; every append to it is refused."),
				 errhint("Append to a stream of another name.")));
}

/*
 * The stream's current rules, from the cache (brought up to date): for
 * esrc.set_stream_rules and esrc.delete_stream (retention.c), which hold
 * the stream lock.
 */
void
esrc_rules_current(const char *stream, EsrcStreamRules *rv)
{
	StreamRule *r;

	rules_refresh();
	r = find_rule(rules_cache.rules, stream, strlen(stream));
	memset(rv, 0, sizeof(EsrcStreamRules));
	rv->truncate_before = r ? r->truncate_before : -1;
	rv->max_count = r ? r->max_count : -1;
	rv->has_max_age = r ? r->has_max_age : false;
	if (rv->has_max_age)
		rv->max_age = r->max_age;
	rv->hard_deleted = r ? r->hard_deleted : false;
}

/*
 * Trigger of esrc.stream_rules (AFTER, FOR EACH STATEMENT, any change):
 * every backend drops its cache of the rules when this transaction
 * commits, and this backend at its next command.
 */
Datum
esrc_stream_rules_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("esrc.stream_rules_changed() must be called as a trigger")));
	CacheInvalidateRelcacheByRelid(RelationGetRelid(trigdata->tg_relation));
	return PointerGetDatum(NULL);
}

/*-------------------------------------------------------------------------
 *
 * names.c
 *	  What names in the log may be, checked wherever one comes in (appends,
 *	  reads, reads by query, the life cycle): a stream name, event type or
 *	  category as text (not null, not empty, within its limit, no control
 *	  characters), a stream name's category (before its first "-"), and
 *	  esrc's own event types (the "esrc." prefix, the tombstones).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"

#include "base/base.h"
#include "log/log.h"
#include "logint.h"

/*
 * Check a stream name, event type or category given as text and return it
 * as a C string.  NULL, empty, overlong names and control characters are
 * refused with a clear error.
 */
char *
esrc_check_name(text *value, const char *what, int maxlen)
{
	char	   *s;
	int			len;
	int			i;

	if (value == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	len = VARSIZE_ANY_EXHDR(value);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", what),
				 errdetail("The limit is %d bytes; the value has %d bytes.",
						   maxlen, len)));
	s = text_to_cstring(value);
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c < 0x20 || c == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain control characters", what),
					 errdetail("Byte %d of the value is 0x%02x.", i + 1, c)));
	}
	return s;
}

/*
 * The category of a stream: the part of its name before the first "-".
 */
char *
esrc_stream_category(const char *stream)
{
	const char *dash = strchr(stream, '-');

	if (dash == NULL)
		return pstrdup(stream);
	return pnstrdup(stream, dash - stream);
}

char *
esrc_check_stream_name(text *value)
{
	char	   *stream = esrc_check_name(value, "stream name", ESRC_MAX_STREAM_NAME);

	if (stream[0] == '-')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stream name must not start with \"-\""),
				 errdetail("The category of a stream is the part of its name before the first \"-\", and it must not be empty.")));
	return stream;
}

/*
 * Event types that begin with "esrc." are esrc's own (the tombstones of
 * esrc.erase_stream and esrc.delete_stream, log.h): a user's append of
 * one is refused, so that no user event can pass for a tombstone (the
 * Kafka forwarder sends those with a null value).
 */
bool
esrc_is_system_type(const char *type, int len)
{
	int			plen = strlen(ESRC_RESERVED_TYPE_PREFIX);

	return len >= plen && memcmp(type, ESRC_RESERVED_TYPE_PREFIX, plen) == 0;
}

/* Is type (len bytes) the type of a tombstone (esrc.erased, esrc.deleted)? */
bool
esrc_is_tombstone_type(const char *type, int len)
{
	return (len == strlen(ESRC_TYPE_ERASED) &&
			memcmp(type, ESRC_TYPE_ERASED, len) == 0) ||
		(len == strlen(ESRC_TYPE_DELETED) &&
		 memcmp(type, ESRC_TYPE_DELETED, len) == 0);
}

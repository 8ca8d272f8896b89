/*-------------------------------------------------------------------------
 *
 * jsonsize.c
 *	  The exact length of a jsonb value as JSON text, computed from the
 *	  binary value without building the text: what append.c bounds at
 *	  append time (esrc.max_event_size and the 1 GB limit of a text) and
 *	  what fwdread.c checks for events stored before that bound existed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "log/log.h"

/*
 * The length of the text of one numeric as numeric_out() writes it, from
 * its header alone: an optional "-", the integer part (one "0" when the
 * weight is negative, else the decimal digits of the first base-10000
 * digit without leading zeros and 4 per further digit up to the weight),
 * then "." and dscale digits.  The header layout is numeric.c's on-disk
 * format (short and long forms), which pg_upgrade keeps stable; NaN and
 * the infinities, which jsonb never holds, take numeric_out() itself.
 */
static Size
numeric_text_size(Numeric num)
{
	const char *p = VARDATA_ANY(num);
	Size		datalen = VARSIZE_ANY_EXHDR(num);
	uint16		header;
	int			weight;
	int			dscale;
	bool		neg;
	const int16 *digits;
	int			ndigits;
	Size		len;

	memcpy(&header, p, sizeof(uint16));
	if ((header & 0xC000) == 0xC000)
		return strlen(DatumGetCString(DirectFunctionCall1(numeric_out,
														  NumericGetDatum(num))));
	if ((header & 0x8000) != 0)
	{
		/* short: sign 0x2000, dscale 0x1F80, weight 0x003F with sign 0x0040 */
		neg = (header & 0x2000) != 0;
		dscale = (header & 0x1F80) >> 7;
		weight = (header & 0x0040) ? (int) (int16) (header | 0xFFC0) : (int) (header & 0x003F);
		digits = (const int16 *) (p + sizeof(uint16));
		ndigits = (datalen - sizeof(uint16)) / sizeof(int16);
	}
	else
	{
		int16		w;

		neg = (header & 0xC000) == 0x4000;
		dscale = header & 0x3FFF;
		memcpy(&w, p + sizeof(uint16), sizeof(int16));
		weight = w;
		digits = (const int16 *) (p + 2 * sizeof(uint16));
		ndigits = (datalen - 2 * sizeof(uint16)) / sizeof(int16);
	}

	len = neg ? 1 : 0;
	if (weight < 0)
		len += 1;
	else
	{
		int			first = ndigits > 0 ? digits[0] : 0;

		len += (Size) weight * 4 +
			(first >= 1000 ? 4 : first >= 100 ? 3 : first >= 10 ? 2 : 1);
	}
	if (dscale > 0)
		len += 1 + dscale;
	return len;
}

/* The length of a jsonb string or key as escape_json() writes it. */
static Size
string_text_size(const char *s, int n)
{
	Size		len = 2;		/* the quotes */
	int			i;

	for (i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t' ||
			c == '"' || c == '\\')
			len += 2;
		else if (c < ' ')
			len += 6;			/* \u00XX */
		else
			len += 1;
	}
	return len;
}

static Size
scalar_text_size(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return 4;
		case jbvBool:
			return v->val.boolean ? 4 : 5;
		case jbvString:
			return string_text_size(v->val.string.val, v->val.string.len);
		case jbvNumeric:
			return numeric_text_size(v->val.numeric);
		default:
			elog(ERROR, "unexpected jsonb value type %d", (int) v->type);
	}
	return 0;					/* not reached */
}

/*
 * The exact length of jb as JSON text (jsonb_out, what data::text gives
 * and what the forwarder sends), computed without building the text: the
 * walk of JsonbToCString() with lengths instead of characters.  It stops
 * as soon as the length exceeds "limit" and then returns some value above
 * it, so the cost is one pass over the binary value whatever its text
 * would expand to.  Without this, a 100 kB value such as an array of
 * 9,000 numbers 1e131071 (10 bytes each in jsonb, 131,072 characters as
 * text) could be stored and then never be read as text again.
 * fwdread.c uses it too, for events stored before this check existed.
 */
Size
esrc_jsonb_text_size(Jsonb *jb, Size limit)
{
	JsonbIterator *it = JsonbIteratorInit(&jb->root);
	JsonbValue	v;
	JsonbIteratorToken type = WJB_DONE;
	bool		first = true;
	bool		redo = false;
	bool		raw_scalar = false;
	Size		len = 0;

	while (redo || (type = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		redo = false;
		switch (type)
		{
			case WJB_BEGIN_ARRAY:
				if (!first)
					len += 2;	/* ", " */
				if (!v.val.array.rawScalar)
					len += 1;
				else
					raw_scalar = true;
				first = true;
				break;
			case WJB_BEGIN_OBJECT:
				if (!first)
					len += 2;
				len += 1;
				first = true;
				break;
			case WJB_KEY:
				if (!first)
					len += 2;
				first = true;
				len += scalar_text_size(&v) + 2;	/* key ": " */
				type = JsonbIteratorNext(&it, &v, false);
				if (type == WJB_VALUE)
				{
					first = false;
					len += scalar_text_size(&v);
				}
				else
					redo = true;	/* a container: its opening next */
				break;
			case WJB_ELEM:
				if (!first)
					len += 2;
				first = false;
				len += scalar_text_size(&v);
				break;
			case WJB_END_ARRAY:
				if (!raw_scalar)
					len += 1;
				first = false;
				break;
			case WJB_END_OBJECT:
				len += 1;
				first = false;
				break;
			default:
				elog(ERROR, "unexpected jsonb token %d", (int) type);
		}
		if (len > limit)
			return len;			/* the iterator's memory is the caller's */
	}
	return len;
}

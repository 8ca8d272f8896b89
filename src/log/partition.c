/*-------------------------------------------------------------------------
 *
 * partition.c
 *	  The partition of a stream among N: what subscriptions and projections
 *	  assign their members by (esrc.stream_partition), what Kafka's
 *	  murmur2 partitioners compute for the record key, and what
 *	  esrc.read_category's member filter (read.c) selects by.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "log/log.h"

/*
 * MurmurHash2 as Kafka's Java client computes it for record keys
 * (org.apache.kafka.common.utils.Utils.murmur2: seed 0x9747b28c, 4-byte
 * little-endian blocks), which librdkafka's "murmur2" partitioners use
 * too.
 */
static uint32
murmur2(const unsigned char *data, int len)
{
	const uint32 m = 0x5bd1e995;
	const int	r = 24;
	uint32		h = 0x9747b28c ^ (uint32) len;
	int			i = 0;

	for (; i + 4 <= len; i += 4)
	{
		uint32		k = (uint32) data[i] | ((uint32) data[i + 1] << 8) |
			((uint32) data[i + 2] << 16) | ((uint32) data[i + 3] << 24);

		k *= m;
		k ^= k >> r;
		k *= m;
		h *= m;
		h ^= k;
	}
	switch (len - i)
	{
		case 3:
			h ^= (uint32) data[i + 2] << 16;
			/* FALLTHROUGH */
		case 2:
			h ^= (uint32) data[i + 1] << 8;
			/* FALLTHROUGH */
		case 1:
			h ^= (uint32) data[i];
			h *= m;
	}
	h ^= h >> 13;
	h *= m;
	h ^= h >> 15;
	return h;
}

/* The partition (0 .. npartitions - 1) of stream (len bytes). */
int
esrc_stream_partition_of(const char *stream, int len, int npartitions)
{
	return (int) ((murmur2((const unsigned char *) stream, len) & 0x7fffffff) %
				  (uint32) npartitions);
}

/*-------------------------------------------------------------------------
 *
 * projnarrow.c
 *	  Narrowing a failed batch (projworker.c): the projections whose
 *	  batches take one event at a time up to a position, after a batch of
 *	  several failed outside the handler (at commit, in the checkpoint
 *	  write), so that the first of them that fails is the event that
 *	  failed it.  Per worker; forgotten at exit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "projectionint.h"

#define MAX_NARROWED	16

typedef struct Narrowed
{
	int64		id;				/* the projection, 0 = free */
	int64		until;
} Narrowed;

static Narrowed narrowed[MAX_NARROWED];

/* The position up to which projection id takes one event a batch; 0: none. */
int64
esrc_projection_narrowed_until(int64 id)
{
	int			i;

	for (i = 0; i < MAX_NARROWED; i++)
		if (narrowed[i].id == id)
			return narrowed[i].until;
	return 0;
}

/* Projection id takes one event a batch up to until (0: no longer). */
void
esrc_projection_set_narrowed(int64 id, int64 until)
{
	int			i;
	int			free_slot = -1;

	for (i = 0; i < MAX_NARROWED; i++)
	{
		if (narrowed[i].id == id)
			break;
		if (narrowed[i].id == 0 && free_slot < 0)
			free_slot = i;
	}
	if (i == MAX_NARROWED)
	{
		if (until == 0)
			return;
		/* full: another projection's search starts over at its next failure */
		i = free_slot >= 0 ? free_slot : (int) (id % MAX_NARROWED);
	}
	narrowed[i].id = until == 0 ? 0 : id;
	narrowed[i].until = until;
}

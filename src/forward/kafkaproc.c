/*-------------------------------------------------------------------------
 *
 * kafkaproc.c
 *	  What the librdkafka clients of this process share, whatever they do
 *	  (the producers of kafka.c, the consumer of kafkapos.c, the admin
 *	  calls of kafkatopic.c): their creation (kafka_new_rk: every signal
 *	  blocked, librdkafka's main thread at a lower priority), the handle
 *	  being connected or in use, which esrc_kafka_shutdown() closes at
 *	  exit, and the waits between two slices of a blocking call
 *	  (kafka_between_slices: interrupts, postmaster death, the worker's
 *	  wait hook, and while connecting the producers' error callbacks).
 *	  kafka.c's header says why each wait is sliced.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"

#include "kafka.h"
#include "kafkaint.h"

EsrcKafkaWaitHook esrc_kafka_wait_hook = NULL;

int64
kafka_elapsed_ms(instr_time start)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	return (int64) INSTR_TIME_GET_MILLISEC(now);
}

/*
 * The clients of this process that esrc_kafka_shutdown() closes at exit:
 * the handle being connected or in use (one at a time) and (kafkapos.c)
 * the consumer of kafka_read_position() while it exists.
 */
static EsrcKafka *live_handle = NULL;
static bool live_connecting = false;	/* live_handle is in connect */
static bool connect_given_up = false;	/* the wait hook said so */

/* connect (kafka.c) begins with k, the handle of this process from now */
void
kafka_live_begin(EsrcKafka *k)
{
	Assert(live_handle == NULL);
	live_handle = k;
	live_connecting = true;
	connect_given_up = false;
}

/* the connect of the live handle ended (connected or not) */
void
kafka_live_connected(void)
{
	live_connecting = false;
}

/* k is being destroyed: no longer the live handle */
void
kafka_live_forget(EsrcKafka *k)
{
	if (k == live_handle)
	{
		live_handle = NULL;
		live_connecting = false;
	}
}

EsrcKafka *
kafka_live_handle(void)
{
	return live_handle;
}

bool
kafka_live_connecting(void)
{
	return live_connecting;
}

/* the worker's wait hook asked the connect in progress to give up */
bool
kafka_connect_given_up(void)
{
	return connect_given_up;
}

/*
 * Between two slices of a blocking wait that began at start: honour
 * SIGTERM and postmaster death, and tell the worker how long we have been
 * waiting.  While connecting, first serve the producers' queues: their
 * error_cb (a refused connection, a name that does not resolve, a failed
 * TLS handshake) and log_cb run only in rd_kafka_poll, and nothing else
 * polls before the connect ends (no records are queued yet, so no
 * delivery report is served early).  May ereport(FATAL).
 */
void
kafka_between_slices(instr_time start)
{
	CHECK_FOR_INTERRUPTS();
	if (!PostmasterIsAlive())
		proc_exit(1);
	if (live_connecting && live_handle != NULL)
	{
		int			i;

		for (i = 0; i < live_handle->nrk; i++)
			rd_kafka_poll(live_handle->rks[i], 0);
		esrc_kafka_emit_log();
	}
	if (esrc_kafka_wait_hook != NULL)
	{
		char		errcopy[LOG_LINE];

		kafka_copy_last_error(errcopy, sizeof(errcopy));
		if (esrc_kafka_wait_hook(kafka_elapsed_ms(start), errcopy) && live_connecting)
			connect_given_up = true;
	}
}

/*
 * librdkafka's main thread yields the CPU to the worker (and to the
 * database): it runs at a nice value MAIN_THREAD_NICE above the worker's.
 * A transactional producer of librdkafka before 2.8 spins on that thread
 * for about a millisecond per transaction (docs/forwarder.md,
 * "librdkafka's registration timer"), and the worker wakes it when it
 * queues a transaction's first record: at the same priority the woken
 * thread took the CPU from the worker in the middle of queueing, and on two
 * cores queueing a batch took 0.26-0.48 ms at the median instead of 0.06
 * (bench/forward).  Threads that the main thread starts inherit its value
 * (some of librdkafka's broker threads); the others keep the worker's.
 * Called in each new thread of librdkafka, which must not call into
 * PostgreSQL: a failure is ignored (the thread keeps its priority).
 */
#define MAIN_THREAD_NICE 10

static int	worker_nice = 0;

static rd_kafka_resp_err_t
kafka_on_thread_start(rd_kafka_t *rk, rd_kafka_thread_type_t thread_type,
					  const char *thread_name, void *ic_opaque)
{
	if (thread_type == RD_KAFKA_THREAD_MAIN)
		(void) setpriority(PRIO_PROCESS, (id_t) syscall(SYS_gettid),
						   Min(worker_nice + MAIN_THREAD_NICE, 19));
	return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t
kafka_on_new(rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *ic_opaque,
			 char *errstr, size_t errstr_size)
{
	return rd_kafka_interceptor_add_on_thread_start(rk, "esrc", kafka_on_thread_start, NULL);
}

/*
 * rd_kafka_new with every signal blocked: the threads it starts inherit
 * the mask (and later ones are started by those threads), so no signal
 * meant for the worker lands on a librdkafka thread and runs one of
 * PostgreSQL's handlers there.  Signals that arrive meanwhile stay
 * pending and are handled when the mask is restored.
 *
 * Also adds the interceptor that lowers the priority of librdkafka's main
 * thread (above).
 */
rd_kafka_t *
kafka_new_rk(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *errstr, size_t errlen)
{
	sigset_t	all;
	sigset_t	old;
	rd_kafka_t *rk;
	int			nice;

	/* the worker's own value, read here, in the worker's thread */
	errno = 0;
	nice = getpriority(PRIO_PROCESS, (id_t) syscall(SYS_gettid));
	worker_nice = (errno == 0) ? nice : 0;
	(void) rd_kafka_conf_interceptor_add_on_new(conf, "esrc", kafka_on_new, NULL);

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rk = rd_kafka_new(type, conf, errstr, errlen);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rk;
}

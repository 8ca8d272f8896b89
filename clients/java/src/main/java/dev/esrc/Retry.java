package dev.esrc;

import java.sql.Connection;
import java.sql.SQLException;
import java.util.UUID;

/**
 * The one retry loop of the command handlers ({@link CommandHandler}, {@link DcbCommandHandler}):
 * an attempt on a fresh connection, again after a jittered backoff while it meets 40001 (a wrong
 * expected version or a failed append condition, the commit's too), up to {@code maxAttempts}.
 */
final class Retry {
    private Retry() {}

    /** One attempt on its own connection; {@code attempt} counts from 1. */
    interface Attempt<R> {
        R run(Connection c, int attempt) throws SQLException;
    }

    /** The command id of a command: the one given, the command's own, or a new one. */
    static UUID commandId(Object command, UUID given) {
        return given != null ? given
            : command instanceof Command cmd && cmd.commandId() != null ? cmd.commandId() : UUID.randomUUID();
    }

    /**
     * Run {@code body} until it does not meet 40001; {@code what} names the target in messages
     * ("command on stream s"), {@code hint} is the hint of {@link RetriesExhaustedException}.
     */
    static <R> R run(EventStore store, int maxAttempts, Backoff backoff, String what, String hint,
                     Attempt<R> body) {
        for (int attempt = 1; ; attempt++) {
            WrongExpectedVersionException e;
            try (Connection c = store.connection()) {
                return body.run(c, attempt);
            } catch (SQLException se) {
                EsrcException ee = EsrcException.of(se);   // a 40001 of the commit too
                if (!(ee instanceof WrongExpectedVersionException w)) throw ee;
                e = w;
            } catch (WrongExpectedVersionException w) {
                e = w;
            }
            if (attempt >= maxAttempts) {
                throw new RetriesExhaustedException(what + " gave up after " + attempt
                    + " attempts, each met 40001: " + e.serverMessage(), e.sqlState(), e.detail(), hint, e);
            }
            try {
                backoff.sleep(attempt);
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
                throw new EsrcException("interrupted while waiting to retry a " + what);
            }
        }
    }
}

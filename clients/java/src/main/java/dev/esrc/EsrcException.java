package dev.esrc;

import java.sql.SQLException;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/**
 * An error of esrc or of PostgreSQL. {@link #sqlState()} is the server's code ({@code null} for
 * errors raised by the client itself); {@link #detail()} and {@link #hint()} are the server's
 * DETAIL and HINT. The JDBC exception is the cause. {@link #of(SQLException)} picks the subclass
 * by SQLSTATE, as the README's error table groups them.
 */
public class EsrcException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String sqlState;
    private final String detail;
    private final String hint;
    private final String serverMessage;

    public EsrcException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(format(message, sqlState, detail, hint), cause);
        this.serverMessage = message;
        this.sqlState = sqlState;
        this.detail = detail;
        this.hint = hint;
    }

    public EsrcException(String message) {
        this(message, null, null, null, null);
    }

    /** The SQLSTATE, or null for the client's own errors. */
    public String sqlState() { return sqlState; }

    /** The primary message, without SQLSTATE, detail and hint. */
    public String serverMessage() { return serverMessage; }

    public String detail() { return detail; }

    public String hint() { return hint; }

    private static String format(String message, String sqlState, String detail, String hint) {
        StringBuilder sb = new StringBuilder(message);
        if (sqlState != null) sb.append(" (SQLSTATE ").append(sqlState).append(')');
        if (detail != null) sb.append("\nDETAIL: ").append(detail);
        if (hint != null) sb.append("\nHINT: ").append(hint);
        return sb.toString();
    }

    /** The exception of the class the SQLSTATE names, keeping message, detail and hint. */
    public static EsrcException of(SQLException e) {
        if (e instanceof EsrcSQLException) return ((EsrcSQLException) e).esrc;
        String state = e.getSQLState();
        String message = e.getMessage();
        String detail = null;
        String hint = null;
        if (e instanceof PSQLException) {
            ServerErrorMessage m = ((PSQLException) e).getServerErrorMessage();
            if (m != null) {
                message = m.getMessage();
                detail = m.getDetail();
                hint = m.getHint();
            }
        }
        if (message == null) message = e.getClass().getSimpleName();
        if (state == null || state.startsWith("08") || state.startsWith("57P")) {
            return new ConnectionLostException(message, state, detail, hint, e);
        }
        switch (state) {
            case "40001":
                // 40001 for a failed append condition as for a wrong expected version (retry
                // loops on 40001 cover both), with no field that tells them apart: the primary
                // message does, as README's error table gives it ("condition of append to ...")
                if (message.startsWith("condition of append")) {
                    return new AppendConditionFailedException(message, state, detail, hint, e);
                }
                return new WrongExpectedVersionException(message, state, detail, hint, e);
            case "40P01":
                return new WrongExpectedVersionException(message, state, detail, hint, e);
            case "55000":
                if (message.contains("was erased")) return new StreamErasedException(message, state, detail, hint, e);
                if (message.contains("is deleted permanently")) return new StreamDeletedException(message, state, detail, hint, e);
                return new ObjectStateException(message, state, detail, hint, e);
            case "23505":
                return new DuplicateEventIdException(message, state, detail, hint, e);
            case "42704":
                return new NotFoundException(message, state, detail, hint, e);
            case "42710":
            case "42P07":
                return new AlreadyExistsException(message, state, detail, hint, e);
            case "42501":
                return new PermissionDeniedException(message, state, detail, hint, e);
            case "57014":
                return new CancelledException(message, state, detail, hint, e);
            case "25006":
                return new ReadOnlyException(message, state, detail, hint, e);
            default:
                if (state.startsWith("22") || state.equals("54000")) {
                    return new InvalidEventException(message, state, detail, hint, e);
                }
                return new EsrcException(message, state, detail, hint, e);
        }
    }

    /** Carries an EsrcException through code that must throw SQLException. */
    static final class EsrcSQLException extends SQLException {
        private static final long serialVersionUID = 1L;
        final transient EsrcException esrc;

        EsrcSQLException(EsrcException esrc) {
            super(esrc.getMessage(), esrc.sqlState(), esrc);
            this.esrc = esrc;
        }
    }
}

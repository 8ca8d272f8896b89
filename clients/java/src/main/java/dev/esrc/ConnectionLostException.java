package dev.esrc;

/** The connection failed or broke (class 08, 57P, or no SQLSTATE). A command retried with the same command id is not written twice. */
public class ConnectionLostException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public ConnectionLostException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

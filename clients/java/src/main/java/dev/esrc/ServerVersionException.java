package dev.esrc;

/** The database has no esrc extension, or one of another major.minor than this client. */
public class ServerVersionException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public ServerVersionException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

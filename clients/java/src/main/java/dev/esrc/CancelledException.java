package dev.esrc;

/** 57014: the statement was cancelled (a consumer stopping while it waits in esrc.poll). */
public class CancelledException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public CancelledException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

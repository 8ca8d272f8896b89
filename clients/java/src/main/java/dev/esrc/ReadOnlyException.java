package dev.esrc;

/** 25006: a function that writes, in a read-only transaction or on a standby. */
public class ReadOnlyException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public ReadOnlyException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

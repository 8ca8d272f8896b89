package dev.esrc;

/** 40001 (and 40P01): the stream is not at the expected version, or another member of a subscription acknowledged first. Load again, decide again. */
public class WrongExpectedVersionException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public WrongExpectedVersionException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

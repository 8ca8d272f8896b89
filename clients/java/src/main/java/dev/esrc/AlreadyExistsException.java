package dev.esrc;

/** 42710, 42P07: a subscription, projection or snapshot of that name exists with another definition. */
public class AlreadyExistsException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public AlreadyExistsException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

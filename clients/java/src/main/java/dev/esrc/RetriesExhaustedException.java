package dev.esrc;

/** A command handler met 40001 on every one of its attempts; the last 40001 is the cause. */
public class RetriesExhaustedException extends WrongExpectedVersionException {
    private static final long serialVersionUID = 1L;

    public RetriesExhaustedException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

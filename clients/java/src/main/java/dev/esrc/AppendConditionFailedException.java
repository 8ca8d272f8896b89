package dev.esrc;

/**
 * 40001 from {@link EventStore#appendIf}: an event matching the condition's query is stored after
 * its position (nothing written; the detail names the first conflicting positions). Read again,
 * decide again. A {@link WrongExpectedVersionException}, so retries on 40001 cover it.
 */
public class AppendConditionFailedException extends WrongExpectedVersionException {
    private static final long serialVersionUID = 1L;

    public AppendConditionFailedException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

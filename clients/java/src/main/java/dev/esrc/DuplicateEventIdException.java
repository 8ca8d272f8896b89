package dev.esrc;

/** 23505: an event id stored in another stream, a batch mixing stored and new ids, or a retry whose id names a stored event with another type, data or metadata. */
public class DuplicateEventIdException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public DuplicateEventIdException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

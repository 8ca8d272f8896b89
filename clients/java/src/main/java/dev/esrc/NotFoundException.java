package dev.esrc;

/** 42704: no such subscription, snapshot, projection or stream. */
public class NotFoundException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public NotFoundException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

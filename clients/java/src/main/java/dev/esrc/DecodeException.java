package dev.esrc;

/** A stored event could not be turned into its registered class (no upcaster, a shape the class cannot take). */
public class DecodeException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public DecodeException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

package dev.esrc;

/** Class 22 and 54000: an invalid argument (a reserved esrc. type, a bad batch, a tag, an event too large). */
public class InvalidEventException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public InvalidEventException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

package dev.esrc;

/** 42501: the role lacks an esrc role (esrc_reader, esrc_writer, esrc_subscriber) or a grant. */
public class PermissionDeniedException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public PermissionDeniedException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

package dev.esrc;

/** 55000: the object is not in a state for the call (a subscription member that holds no partition, esrc not preloaded, ...). */
public class ObjectStateException extends EsrcException {
    private static final long serialVersionUID = 1L;

    public ObjectStateException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

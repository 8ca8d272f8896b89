package dev.esrc;

/** 55000: the stream was erased by esrc.erase_stream; treat it as deleted. */
public class StreamErasedException extends ObjectStateException {
    private static final long serialVersionUID = 1L;

    public StreamErasedException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

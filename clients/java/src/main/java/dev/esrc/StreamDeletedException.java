package dev.esrc;

/** 55000: the stream was deleted for good (esrc.delete_stream with hard =&gt; true). */
public class StreamDeletedException extends ObjectStateException {
    private static final long serialVersionUID = 1L;

    public StreamDeletedException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}

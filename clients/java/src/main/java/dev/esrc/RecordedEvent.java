package dev.esrc;

import java.time.OffsetDateTime;
import java.util.List;
import java.util.UUID;

/**
 * A stored event: the columns of {@code esrc.event} (data and metadata as JSON text), and
 * {@link #event()}, the instance of its registered class (upcast to the class's current shape),
 * or null for a tombstone, a redacted event or an unregistered type.
 */
public record RecordedEvent(long position, String stream, long version, String type, String data,
                            String metadata, UUID id, OffsetDateTime recordedAt, List<String> tags,
                            Object event) {
    /** Type of the tombstone esrc.erase_stream writes. */
    public static final String ERASED = "esrc.erased";
    /** Type of the tombstone esrc.delete_stream writes. */
    public static final String DELETED = "esrc.deleted";

    /** The part of the stream's name before the first '-'. */
    public String category() {
        return categoryOf(stream);
    }

    public static String categoryOf(String stream) {
        int dash = stream.indexOf('-');
        return dash < 0 ? stream : stream.substring(0, dash);
    }

    /** esrc.erased or esrc.deleted. */
    public boolean isTombstone() {
        return ERASED.equals(type) || DELETED.equals(type);
    }

    /** An event of an erased stream: data {"erased": true}, no metadata. */
    public boolean isRedacted() {
        return isRedacted(data, metadata);
    }

    static boolean isRedacted(String data, String metadata) {
        return metadata == null && data != null && data.length() <= 24
            && data.replace(" ", "").equals("{\"erased\":true}");
    }

    /** The typed event, cast. */
    public <T> T as(Class<T> cls) {
        return cls.cast(event);
    }
}

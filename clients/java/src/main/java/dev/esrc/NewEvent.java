package dev.esrc;

import java.util.List;
import java.util.UUID;

/**
 * An event to append, already encoded: its type, its data and metadata as JSON text (metadata
 * may be null), its id (null: the server generates one) and its tags (null or empty: none).
 */
public record NewEvent(String type, String data, String metadata, UUID id, List<String> tags) {
    public NewEvent {
        if (type == null || data == null) throw new InvalidEventException("an event needs a type and data", null, null, null, null);
        tags = tags == null ? null : List.copyOf(tags);
    }

    public NewEvent(String type, String data) {
        this(type, data, null, null, null);
    }

    public NewEvent withId(UUID newId) {
        return new NewEvent(type, data, metadata, newId, tags);
    }

    public NewEvent withMetadata(String newMetadata) {
        return new NewEvent(type, data, newMetadata, id, tags);
    }

    public NewEvent withTags(List<String> newTags) {
        return new NewEvent(type, data, metadata, id, newTags);
    }
}

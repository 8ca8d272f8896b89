package dev.esrc;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * Turns event objects into JSON trees and back. {@link JacksonSerializer} is the default; a
 * serializer of your own can map dates, money or sealed hierarchies as your application does.
 * Upcasters work on the tree between {@code readTree} and {@code fromJson}.
 */
public interface EventSerializer {
    /** The event as a JSON tree. */
    JsonNode toJson(Object event);

    /** JSON text of a tree. */
    String write(JsonNode tree);

    /** The tree of JSON text. */
    JsonNode readTree(String json);

    /** An instance of cls from the tree. */
    <T> T fromJson(JsonNode tree, Class<T> cls);

    /** JSON text of an event (the current shape: no upcaster between); override to skip the tree. */
    default String writeValue(Object event) {
        return write(toJson(event));
    }

    /** An instance of cls from JSON text (no upcaster between); override to skip the tree. */
    default <T> T readValue(String json, Class<T> cls) {
        return fromJson(readTree(json), cls);
    }
}

package dev.esrc;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.UnaryOperator;

/**
 * The registry of event types: a type name to a Java class (a record, usually), with the class's
 * schema version and the upcasters that turn the data of older shapes into the current one.
 *
 * <p>An event of a class registered with schema version N &gt; 1 is stored with
 * {@code {"esrc_schema": N}} in its metadata; reading an event of shape n &lt; N applies the
 * upcasters n, n + 1, ..., N - 1 to its data, on every read (the log is never rewritten).
 * {@link #alias} reads an old type name as a class.
 */
public final class EventTypes {
    /** The metadata key that holds an event's shape. */
    public static final String SCHEMA_KEY = "esrc_schema";

    private record Entry(String name, Class<?> cls, int schemaVersion) {}

    private final EventSerializer serializer;
    private final Map<String, Entry> byName = new ConcurrentHashMap<>();
    private final Map<Class<?>, Entry> byClass = new ConcurrentHashMap<>();
    private final Map<String, UnaryOperator<ObjectNode>> upcasters = new ConcurrentHashMap<>();

    public EventTypes() {
        this(new JacksonSerializer());
    }

    public EventTypes(EventSerializer serializer) {
        this.serializer = serializer;
    }

    public EventSerializer serializer() {
        return serializer;
    }

    /** Register cls under its simple name, schema version 1. */
    public EventTypes register(Class<?> cls) {
        return register(cls, cls.getSimpleName(), 1);
    }

    /** Register cls under a type name. */
    public EventTypes register(Class<?> cls, String name) {
        return register(cls, name, 1);
    }

    /** Register cls under a type name with its current schema version (1 for the first shape). */
    public EventTypes register(Class<?> cls, String name, int schemaVersion) {
        if (schemaVersion < 1) throw new IllegalArgumentException("schemaVersion must be at least 1");
        if (name.startsWith("esrc.")) {
            throw new InvalidEventException("event type \"" + name + "\" is reserved", null, null, null, null);
        }
        Entry e = new Entry(name, cls, schemaVersion);
        byName.put(name, e);
        byClass.put(cls, e);
        return this;
    }

    /** Read events stored under an old type name as the class registered as {@code current}. */
    public EventTypes alias(String oldName, String current) {
        Entry e = byName.get(current);
        if (e == null) throw new IllegalArgumentException("type " + current + " is not registered");
        byName.put(oldName, e);
        return this;
    }

    /** The upcaster from shape {@code fromVersion} to {@code fromVersion + 1} of a type. */
    public EventTypes upcaster(String name, int fromVersion, UnaryOperator<ObjectNode> up) {
        upcasters.put(name + "#" + fromVersion, up);
        return this;
    }

    /** The type name of a registered class (null if not registered). */
    public String nameOf(Class<?> cls) {
        Entry e = byClass.get(cls);
        return e == null ? null : e.name;
    }

    /** The NewEvent of a registered instance (or the NewEvent itself, given id and metadata if it has none). */
    public NewEvent encode(Object event, Map<String, ?> metadata, UUID id) {
        if (event instanceof NewEvent ne) {
            NewEvent out = ne;
            if (out.id() == null && id != null) out = out.withId(id);
            if (out.metadata() == null && metadata != null) out = out.withMetadata(writeMap(metadata));
            return out;
        }
        Entry e = byClass.get(event.getClass());
        if (e == null) {
            throw new InvalidEventException(event.getClass().getSimpleName() + " is not a registered event class",
                null, null, "Register it with EventTypes.register, or append a NewEvent.", null);
        }
        String meta = null;
        if (e.schemaVersion > 1 || metadata != null) {
            ObjectNode m = metadata == null ? objectNode() : (ObjectNode) serializer.toJson(metadata);
            if (e.schemaVersion > 1) m.put(SCHEMA_KEY, e.schemaVersion);
            meta = serializer.write(m);
        }
        return new NewEvent(e.name, serializer.writeValue(event), meta, id, null);
    }

    private ObjectNode objectNode() {
        return (ObjectNode) serializer.readTree("{}");
    }

    String writeMap(Map<String, ?> map) {
        return map == null ? null : serializer.write(serializer.toJson(map));
    }

    /**
     * The registered class's instance for a stored event, upcast to its current shape; null for a
     * type that is not registered, a tombstone or a redacted event.
     */
    public Object decode(String type, String data, String metadata) {
        Entry e = byName.get(type);
        if (e == null || RecordedEvent.isRedacted(data, metadata)) return null;
        if (e.schemaVersion == 1) return serializer.readValue(data, e.cls);   // no shape to upcast
        JsonNode tree = serializer.readTree(data);
        if (e.schemaVersion > 1) {
            int shape = 1;
            if (metadata != null) {
                JsonNode m = serializer.readTree(metadata).get(SCHEMA_KEY);
                if (m != null && m.canConvertToInt()) shape = m.asInt();
            }
            for (int n = shape; n < e.schemaVersion; n++) {
                UnaryOperator<ObjectNode> up = upcasters.get(type + "#" + n);
                if (up == null) up = upcasters.get(e.name + "#" + n);
                if (up == null) {
                    throw new DecodeException("no upcaster from shape " + n + " of event type " + type, null, null,
                        "Register one with EventTypes.upcaster(\"" + e.name + "\", " + n + ", ...).", null);
                }
                if (!(tree instanceof ObjectNode o)) {
                    throw new DecodeException("event of type " + type + " has data that is not a JSON object", null, null, null, null);
                }
                tree = up.apply(o.deepCopy());
            }
        }
        return serializer.fromJson(tree, e.cls);
    }

    /** A RecordedEvent from the columns of esrc.event, decoded unless a tombstone or redacted. */
    public RecordedEvent recorded(long position, String stream, long version, String type, String data,
                                  String metadata, UUID id, java.time.OffsetDateTime recordedAt,
                                  java.util.List<String> tags) {
        Object decoded = type.startsWith("esrc.") ? null : decode(type, data, metadata);
        return new RecordedEvent(position, stream, version, type, data, metadata, id, recordedAt, tags, decoded);
    }
}

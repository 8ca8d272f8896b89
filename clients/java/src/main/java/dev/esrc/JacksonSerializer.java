package dev.esrc;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/** The default {@link EventSerializer}: Jackson, records by their components, unknown keys ignored. */
public final class JacksonSerializer implements EventSerializer {
    private final ObjectMapper mapper;

    public JacksonSerializer() {
        this(new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false));
    }

    public JacksonSerializer(ObjectMapper mapper) {
        this.mapper = mapper;
    }

    public ObjectMapper mapper() {
        return mapper;
    }

    @Override
    public JsonNode toJson(Object event) {
        return mapper.valueToTree(event);
    }

    @Override
    public String write(JsonNode tree) {
        try {
            return mapper.writeValueAsString(tree);
        } catch (JsonProcessingException e) {
            throw new InvalidEventException("cannot write JSON: " + e.getOriginalMessage(), null, null, null, e);
        }
    }

    @Override
    public JsonNode readTree(String json) {
        try {
            return mapper.readTree(json);
        } catch (JsonProcessingException e) {
            throw new DecodeException("cannot read JSON: " + e.getOriginalMessage(), null, null, null, e);
        }
    }

    @Override
    public <T> T fromJson(JsonNode tree, Class<T> cls) {
        try {
            return mapper.treeToValue(tree, cls);
        } catch (JsonProcessingException | IllegalArgumentException e) {
            throw new DecodeException("cannot read " + cls.getSimpleName() + ": " + e.getMessage(), null, null, null, e);
        }
    }

    @Override
    public String writeValue(Object event) {
        try {
            return mapper.writeValueAsString(event);
        } catch (JsonProcessingException e) {
            throw new InvalidEventException("cannot write " + event.getClass().getSimpleName() + ": "
                + e.getOriginalMessage(), null, null, null, e);
        }
    }

    @Override
    public <T> T readValue(String json, Class<T> cls) {
        try {
            return mapper.readValue(json, cls);
        } catch (JsonProcessingException | IllegalArgumentException e) {
            throw new DecodeException("cannot read " + cls.getSimpleName() + ": " + e.getMessage(), null, null, null, e);
        }
    }
}

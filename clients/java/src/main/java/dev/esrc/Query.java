package dev.esrc;

import java.util.Arrays;
import java.util.List;

/**
 * A DCB query (docs/dcb.md), {@code {"items": [...]}} on the server: an event matches when it
 * matches one of the items; an {@link Item} when the event's type is one of its types (none: any
 * type) and the event carries every one of its tags. The server checks the rest (non-empty items,
 * each with a type or a tag, at most 64 of each): {@link InvalidEventException}.
 */
public record Query(List<Item> items) {
    public Query {
        if (items == null) throw new InvalidEventException("a query needs items", null, null, null, null);
        items = List.copyOf(items);
    }

    /** Events of one of {@code types} (empty: any) carrying every one of {@code tags}. */
    public record Item(List<String> types, List<String> tags) {
        public Item {
            types = types == null ? List.of() : List.copyOf(types);
            tags = tags == null ? List.of() : List.copyOf(tags);
        }

        /** Events of any type carrying every one of the tags. */
        public static Item tags(String... tags) {
            return new Item(List.of(), Arrays.asList(tags));
        }

        /** Events of one of the types carrying every one of the tags. */
        public static Item of(List<String> types, String... tags) {
            return new Item(types, Arrays.asList(tags));
        }

        void appendJson(StringBuilder sb) {
            sb.append('{');
            if (!types.isEmpty()) list(sb.append("\"types\":"), types);
            if (!tags.isEmpty()) list(sb.append(types.isEmpty() ? "" : ",").append("\"tags\":"), tags);
            sb.append('}');
        }
    }

    public static Query of(Item... items) {
        return new Query(Arrays.asList(items));
    }

    /** One item: events of any type carrying every one of the tags. */
    public static Query tagged(String... tags) {
        return of(Item.tags(tags));
    }

    /** The JSON the server takes. */
    public String toJson() {
        StringBuilder sb = new StringBuilder("{\"items\":[");
        for (int i = 0; i < items.size(); i++) {
            if (i > 0) sb.append(',');
            items.get(i).appendJson(sb);
        }
        return sb.append("]}").toString();
    }

    private static void list(StringBuilder sb, List<String> values) {
        sb.append('[');
        for (int i = 0; i < values.size(); i++) sb.append(i > 0 ? "," : "").append(EventStore.quote(values.get(i)));
        sb.append(']');
    }
}

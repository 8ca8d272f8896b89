package dev.esrc;

/**
 * The condition of {@link EventStore#appendIf}: {@code {"fail_if_events_match": query, "after":
 * position}}, the append fails ({@link AppendConditionFailedException}, 40001) if an event matching
 * the query is stored at a position after {@code after}. {@code after} is the horizon the decision
 * read up to ({@link EventStore#safePosition()}, taken before {@link EventStore#readQuery}).
 */
public record AppendCondition(Query failIfEventsMatch, long after) {
    public AppendCondition {
        if (failIfEventsMatch == null) throw new InvalidEventException("a condition needs a query", null, null, null, null);
    }

    /** The JSON the server takes. */
    public String toJson() {
        return "{\"fail_if_events_match\":" + failIfEventsMatch.toJson() + ",\"after\":" + after + "}";
    }
}

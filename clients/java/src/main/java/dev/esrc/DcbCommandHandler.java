package dev.esrc;

import java.sql.Connection;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.function.Function;

/**
 * Runs the commands of a {@link DcbDecider} against an {@link EventStore}, one transaction per
 * attempt: take the horizon ({@link EventStore#safePosition}), read the query's events up to it
 * ({@link EventStore#readQuery}), fold, decide, append with {@link EventStore#appendIf} on the same
 * query after that horizon. When the condition fails (an event matching the query was stored
 * since: {@link AppendConditionFailedException}, 40001) it rolls back, waits the same jittered
 * {@link Backoff} as {@link CommandHandler} and decides again, up to {@code maxAttempts}, then
 * {@link RetriesExhaustedException}. The events' ids are {@link EventIds#of}(command id, index),
 * and an attempt that finds the command's first event among the events it read returns what was
 * stored instead of deciding again: a command retried after a lost commit writes nothing twice.
 * Exceptions of decide reach the caller; nothing is written. Thread-safe: each call takes its own
 * connection from the store's data source.
 */
public final class DcbCommandHandler<C, S, E> {
    private final EventStore store;
    private final DcbDecider<C, S, E> decider;
    private final int maxAttempts;
    private final Backoff backoff;

    public DcbCommandHandler(EventStore store, DcbDecider<C, S, E> decider) {
        this(store, decider, 10, Backoff.DEFAULT);
    }

    public DcbCommandHandler(EventStore store, DcbDecider<C, S, E> decider, int maxAttempts, Backoff backoff) {
        if (maxAttempts < 1) throw new IllegalArgumentException("maxAttempts must be at least 1");
        this.store = store;
        this.decider = decider;
        this.maxAttempts = maxAttempts;
        this.backoff = backoff;
    }

    /** The state folded from a query's events up to the horizon, the horizon, and the events. */
    public record Read<S>(S state, long after, List<RecordedEvent> events) {}

    /** Decide on the events of a query; appended under the condition of that query. */
    public DcbOutcome<S, E> handle(Query query, C command) {
        return handle(c -> query, command, null, null);
    }

    /** Decide on the events of the query of the command. */
    public DcbOutcome<S, E> handle(Function<? super C, Query> query, C command) {
        return handle(query, command, null, null);
    }

    /**
     * {@link #handle(Function, Object)} with a command id (null: the command's
     * {@link Command#commandId}, else a new random one) and metadata for every event (null: none).
     */
    public DcbOutcome<S, E> handle(Function<? super C, Query> queryOf, C command, UUID commandId,
                                   Map<String, ?> metadata) {
        UUID cid = Retry.commandId(command, commandId);
        Query query = queryOf.apply(command);
        return Retry.run(store, maxAttempts, backoff, "decision on query " + query.toJson(),
            "The events of the query are written very often; raise maxAttempts or narrow the query.",
            (c, attempt) -> attempt(c, query, command, cid, metadata, attempt));
    }

    private DcbOutcome<S, E> attempt(Connection c, Query query, C command, UUID cid, Map<String, ?> metadata,
                                     int attempt) throws SQLException {
        boolean auto = c.getAutoCommit();
        c.setAutoCommit(false);
        boolean done = false;
        try {
            Read<S> read = read(c, query);
            List<RecordedEvent> stored = applied(read.events(), cid);
            DcbOutcome<S, E> out;
            if (stored != null) {
                List<E> events = new ArrayList<>(stored.size());
                for (RecordedEvent r : stored) events.add(cast(r.event()));
                RecordedEvent last = stored.get(stored.size() - 1);
                out = new DcbOutcome<>(last.stream(), last.version(), List.copyOf(events), read.state(), read.after(),
                    attempt, cid, true);
            } else {
                List<E> events = decider.decide(command, read.state());
                String stream = decider.stream(command);
                long version = -1;
                if (events != null && !events.isEmpty()) {
                    List<NewEvent> encoded = new ArrayList<>(events.size());
                    for (int i = 0; i < events.size(); i++) {
                        E ev = events.get(i);
                        encoded.add(store.types().encode(ev, metadata, EventIds.of(cid, i)).withTags(decider.tags(ev)));
                    }
                    version = store.appendIf(c, stream, encoded, new AppendCondition(query, read.after()), null);
                } else {
                    events = List.of();
                }
                out = new DcbOutcome<>(stream, version, List.copyOf(events), decider.fold(read.state(), events),
                    read.after(), attempt, cid, false);
            }
            c.commit();
            done = true;
            return out;
        } finally {
            if (!done) {
                try {
                    c.rollback();
                } catch (SQLException ignored) {
                    // the connection is broken; the error that got us here says so
                }
            }
            try {
                c.setAutoCommit(auto);
            } catch (SQLException ignored) {
                // as above
            }
        }
    }

    /** The state of a query's events up to the horizon, on the caller's connection (in its transaction). */
    public Read<S> read(Connection c, Query query) {
        long after = store.safePosition(c);
        List<RecordedEvent> events = store.readQuery(c, query, 0, null, after);
        S state = decider.initialState();
        for (RecordedEvent r : events) {
            if (r.isTombstone() || r.isRedacted()) continue;  // an erased stream's events keep their tags only
            if (r.event() == null) {
                throw new DecodeException("event type " + r.type() + " (stream " + r.stream() + ", version " + r.version()
                    + ") is not registered", null, null, "Register the classes of the events the query selects with "
                    + "EventTypes.register, or narrow the query's types.", null);
            }
            state = decider.evolve(state, cast(r.event()));
        }
        return new Read<>(state, after, events);
    }

    @SuppressWarnings("unchecked")
    private E cast(Object event) {
        return (E) event;
    }

    /** The command's stored events if its first one is among the read ones, else null. */
    static List<RecordedEvent> applied(List<RecordedEvent> events, UUID cid) {
        UUID first = EventIds.of(cid, 0);
        Map<UUID, RecordedEvent> byId = null;
        for (RecordedEvent r : events) {
            if (byId == null && first.equals(r.id())) byId = new HashMap<>();
            if (byId != null) byId.put(r.id(), r);
        }
        if (byId == null) return null;
        List<RecordedEvent> out = new ArrayList<>();
        for (RecordedEvent r; (r = byId.get(EventIds.of(cid, out.size()))) != null; ) out.add(r);
        return out;
    }
}

package dev.esrc;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;

/**
 * Runs the commands of a {@link Decider} against an {@link EventStore}, one transaction per
 * attempt: load the stream's state (fold its events in Java, or read the row of the category's
 * snapshot table when the decider has {@link Decider#fromSnapshot}), decide, append with the
 * loaded version as expected version. On 40001 it rolls back, waits a jittered {@link Backoff}
 * and does it all again, up to {@code maxAttempts}, then {@link RetriesExhaustedException}.
 * The events' ids are {@link EventIds#of}(command id, index): a command retried after a lost
 * connection is not written twice. Exceptions of decide reach the caller; nothing is written.
 * Thread-safe: each call takes its own connection from the store's data source.
 */
public final class CommandHandler<C, S, E> {
    private final EventStore store;
    private final Decider<C, S, E> decider;
    private final int maxAttempts;
    private final Backoff backoff;
    private final boolean useSnapshots;

    public CommandHandler(EventStore store, Decider<C, S, E> decider) {
        this(store, decider, 10, Backoff.DEFAULT, true);
    }

    public CommandHandler(EventStore store, Decider<C, S, E> decider, int maxAttempts, Backoff backoff,
                          boolean useSnapshots) {
        if (maxAttempts < 1) throw new IllegalArgumentException("maxAttempts must be at least 1");
        this.store = store;
        this.decider = decider;
        this.maxAttempts = maxAttempts;
        this.backoff = backoff;
        this.useSnapshots = useSnapshots;
    }

    /** The loaded state and version (-1: no events). */
    public record Loaded<S>(S state, long version) {}

    /** Load, decide, append with the loaded version; retried on 40001. */
    public Outcome<S, E> handle(String stream, C command) {
        return handle(stream, command, null, null);
    }

    /**
     * {@link #handle(String, Object)} with a command id (null: the command's {@link Command#commandId},
     * else a new random one) and metadata for every event (null: none).
     */
    public Outcome<S, E> handle(String stream, C command, UUID commandId, Map<String, ?> metadata) {
        UUID cid = Retry.commandId(command, commandId);
        return Retry.run(store, maxAttempts, backoff, "command on stream " + stream,
            "The stream is written very often; raise maxAttempts or make its commands rarer.",
            (c, attempt) -> attempt(c, stream, command, cid, metadata, attempt));
    }

    private Outcome<S, E> attempt(Connection c, String stream, C command, UUID cid, Map<String, ?> metadata,
                                  int attempt) throws SQLException {
        boolean auto = c.getAutoCommit();
        c.setAutoCommit(false);
        boolean done = false;
        try {
            Loaded<S> loaded = load(c, stream);
            List<E> events = decider.decide(command, loaded.state());
            long version = loaded.version();
            if (events != null && !events.isEmpty()) {
                List<NewEvent> encoded = new ArrayList<>(events.size());
                for (int i = 0; i < events.size(); i++) {
                    encoded.add(store.types().encode(events.get(i), metadata, EventIds.of(cid, i)));
                }
                version = store.appendEvents(c, stream, encoded, version);
            } else {
                events = List.of();
            }
            c.commit();
            done = true;
            return new Outcome<>(stream, version, List.copyOf(events), decider.fold(loaded.state(), events), attempt, cid);
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

    /** The stream's state and version on the caller's connection (in its transaction). */
    public Loaded<S> load(Connection c, String stream) throws SQLException {
        if (useSnapshots && decider.fromSnapshot() != null) {
            Optional<String> snapshot = store.snapshotOf(c, RecordedEvent.categoryOf(stream));
            if (snapshot.isPresent()) {
                EventStore.SnapshotRow row = store.load(c, snapshot.get(), stream);
                return new Loaded<>(row.version() >= 0 ? decider.fromSnapshot().apply(row.state())
                    : decider.initialState(), row.version());
            }
        }
        S state = decider.initialState();
        long last = -1;
        boolean any = false;
        try (PreparedStatement ps = c.prepareStatement(EventStore.FOLD_SQL)) {
            ps.setString(1, stream);
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) {
                    any = true;
                    last = rs.getLong(1);
                    String type = rs.getString(2);
                    String data = rs.getString(3);
                    String meta = rs.getString(4);
                    if (type.startsWith("esrc.") || RecordedEvent.isRedacted(data, meta)) {
                        continue; // a soft-deleted stream starts again from the initial state
                    }
                    Object event = store.types().decode(type, data, meta);
                    if (event == null) {
                        throw new DecodeException("event type " + type + " (stream " + stream + ", version " + last
                            + ") is not registered", null, null,
                            "Register the classes of the decider's events with EventTypes.register.", null);
                    }
                    @SuppressWarnings("unchecked")
                    E e = (E) event;
                    state = decider.evolve(state, e);
                }
            }
        }
        // the last visible event's version is read with the events (one statement); only a
        // stream with none visible needs its version on its own
        return new Loaded<>(state, any ? last : store.streamVersion(c, stream));
    }
}

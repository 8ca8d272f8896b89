package dev.esrc;

import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.Spliterator;
import java.util.Spliterators;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Function;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;
import javax.sql.DataSource;

/**
 * Appends and reads over a {@link DataSource}. Each method without a {@link Connection} argument
 * takes a connection from the data source for its one statement (autocommit, as the data source
 * gives it); each method with one runs on that connection, in the caller's transaction. The first
 * connection taken checks the server's esrc version ({@link ServerVersionException}). Thread-safe
 * as its data source is.
 *
 * <p>Server errors come as {@link EsrcException}s of the class their SQLSTATE names.
 */
public final class EventStore {
    /** expectedVersion: any version. */
    public static final Long ANY = null;
    /** expectedVersion: the stream must not exist yet. */
    public static final long NO_STREAM = -1;
    /** expectedVersion: the stream must exist. */
    public static final long STREAM_EXISTS = -2;

    static final String COLUMNS =
        "position, stream, version, type, data::text, metadata::text, id, recorded_at, tags";
    private static final String APPEND_SQL = "SELECT esrc.append(?, ?, ?::text::jsonb, ?::text::jsonb, ?::bigint, ?::uuid)";
    private static final String APPEND_TAGS_SQL =
        "SELECT esrc.append(?, ?, ?::text::jsonb, ?::text::jsonb, ?::bigint, ?::uuid, ?::text[])";
    private static final String APPEND_BATCH_SQL = "SELECT esrc.append_batch(?, ?::text::jsonb, ?::bigint)";
    private static final String APPEND_IF_SQL = "SELECT esrc.append_if(?, ?::text::jsonb, ?::text::jsonb, ?::bigint)";
    private static final String READ_QUERY_SQL =
        "SELECT " + COLUMNS + " FROM esrc.read_query(?::text::jsonb, ?::bigint, ?::int, ?::bigint)";
    private static final String SAFE_POSITION_SQL = "SELECT esrc.safe_position()";
    private static final String READ_STREAM_SQL =
        "SELECT " + COLUMNS + " FROM esrc.read_stream(?, ?::bigint, ?::int)";
    private static final String READ_BACKWARD_SQL =
        "SELECT " + COLUMNS + " FROM esrc.read_stream_backward(?, ?::bigint, ?::int)";
    private static final String READ_ALL_SQL = "SELECT " + COLUMNS + " FROM esrc.read_all(?::bigint, ?::int)";
    private static final String READ_CATEGORY_SQL =
        "SELECT " + COLUMNS + " FROM esrc.read_category(?, ?::bigint, ?::int)";
    static final String FOLD_SQL = "SELECT version, type, data::text, metadata::text FROM esrc.read_stream(?)";
    private static final String STREAM_VERSION_SQL = "SELECT esrc.stream_version(?)";
    private static final String LOAD_SQL = "SELECT state::text, version FROM esrc.load(?, ?)";
    private static final String SNAPSHOT_OF_SQL =
        "SELECT snapshot::text FROM esrc.snapshots WHERE category = ? ORDER BY created_at LIMIT 1";

    private final DataSource dataSource;
    private final EventTypes types;
    private volatile boolean checked;
    private final Map<String, Optional<String>> snapshots = new ConcurrentHashMap<>();

    public EventStore(DataSource dataSource, EventTypes types) {
        this.dataSource = dataSource;
        this.types = types;
    }

    public EventStore(DataSource dataSource) {
        this(dataSource, new EventTypes());
    }

    public DataSource dataSource() { return dataSource; }

    public EventTypes types() { return types; }

    /** A connection of the data source, the server's esrc version checked once. */
    public Connection connection() {
        try {
            Connection c = dataSource.getConnection();
            if (!checked) {
                try {
                    checkVersion(c);
                } catch (RuntimeException e) {
                    c.close();
                    throw e;
                }
            }
            return c;
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    /** Check that the database has the extension of this client's major.minor. */
    public void checkVersion(Connection c) {
        try (PreparedStatement ps = c.prepareStatement(EsrcVersion.SERVER_VERSION_SQL);
             ResultSet rs = ps.executeQuery()) {
            EsrcVersion.check(rs.next() ? rs.getString(1) : null);
            checked = true;
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    @FunctionalInterface
    interface SqlFunction<T> {
        T apply(Connection c) throws SQLException;
    }

    <T> T withConnection(SqlFunction<T> f) {
        try (Connection c = connection()) {
            return f.apply(c);
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    // appends

    /** Append one event (a registered instance or a {@link NewEvent}), any version; the stream's new version. */
    public long append(String stream, Object event) {
        return append(stream, event, ANY);
    }

    /**
     * Append one event; {@code expectedVersion} null (any), {@link #NO_STREAM}, {@link #STREAM_EXISTS}
     * or the stream's last version ({@link WrongExpectedVersionException} when it does not match).
     */
    public long append(String stream, Object event, Long expectedVersion) {
        return appendEvents(stream, List.of(types.encode(event, null, null)), expectedVersion);
    }

    /** Append one event with metadata and id (an id stored in the stream makes it a no-op returning its version). */
    public long append(String stream, Object event, Long expectedVersion, Map<String, ?> metadata, UUID id) {
        return appendEvents(stream, List.of(types.encode(event, metadata, id)), expectedVersion);
    }

    /** Append events atomically after one version check; the version of the last one. */
    public long appendBatch(String stream, List<?> events, Long expectedVersion) {
        List<NewEvent> encoded = new ArrayList<>(events.size());
        for (Object e : events) encoded.add(types.encode(e, null, null));
        return appendEvents(stream, encoded, expectedVersion);
    }

    /** Append encoded events: esrc.append for one, esrc.append_batch for more. */
    public long appendEvents(String stream, List<NewEvent> events, Long expectedVersion) {
        return withConnection(c -> appendEvents(c, stream, events, expectedVersion));
    }

    /** {@link #appendEvents(String, List, Long)} on the caller's connection (in its transaction). */
    public long appendEvents(Connection c, String stream, List<NewEvent> events, Long expectedVersion) {
        if (events.isEmpty()) throw new InvalidEventException("no events to append", null, null, null, null);
        try {
            if (events.size() == 1) {
                NewEvent e = events.get(0);
                boolean tagged = e.tags() != null && !e.tags().isEmpty();
                try (PreparedStatement ps = c.prepareStatement(tagged ? APPEND_TAGS_SQL : APPEND_SQL)) {
                    ps.setString(1, stream);
                    ps.setString(2, e.type());
                    ps.setString(3, e.data());
                    ps.setString(4, e.metadata());
                    setLong(ps, 5, expectedVersion);
                    ps.setObject(6, e.id());
                    if (tagged) ps.setArray(7, c.createArrayOf("text", e.tags().toArray()));
                    return single(ps);
                }
            }
            try (PreparedStatement ps = c.prepareStatement(APPEND_BATCH_SQL)) {
                ps.setString(1, stream);
                ps.setString(2, batchJson(events));
                setLong(ps, 3, expectedVersion);
                return single(ps);
            }
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    /**
     * esrc.append_if: append the events (registered instances or {@link NewEvent}s, with their tags)
     * atomically only if no event matching {@code condition}'s query is stored after its position;
     * the stream's new version. Otherwise {@link AppendConditionFailedException} (40001, nothing
     * written); a wrong {@code expectedVersion} is a {@link WrongExpectedVersionException}; a
     * position above the horizon an {@link InvalidEventException} (22023).
     */
    public long appendIf(String stream, List<?> events, AppendCondition condition, Long expectedVersion) {
        return withConnection(c -> appendIf(c, stream, events, condition, expectedVersion));
    }

    /** {@link #appendIf(String, List, AppendCondition, Long)} on the caller's connection. */
    public long appendIf(Connection c, String stream, List<?> events, AppendCondition condition, Long expectedVersion) {
        if (events.isEmpty()) throw new InvalidEventException("no events to append", null, null, null, null);
        List<NewEvent> encoded = new ArrayList<>(events.size());
        for (Object e : events) encoded.add(types.encode(e, null, null));
        try (PreparedStatement ps = c.prepareStatement(APPEND_IF_SQL)) {
            ps.setString(1, stream);
            ps.setString(2, batchJson(encoded));
            ps.setString(3, condition.toJson());
            setLong(ps, 4, expectedVersion);
            return single(ps);
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    private static long single(PreparedStatement ps) throws SQLException {
        try (ResultSet rs = ps.executeQuery()) {
            rs.next();
            return rs.getLong(1);
        }
    }

    static void setLong(PreparedStatement ps, int i, Long v) throws SQLException {
        if (v == null) ps.setNull(i, Types.BIGINT); else ps.setLong(i, v);
    }

    static String batchJson(List<NewEvent> events) {
        StringBuilder sb = new StringBuilder(64 * events.size()).append('[');
        for (NewEvent e : events) {
            if (sb.length() > 1) sb.append(',');
            sb.append("{\"type\":").append(quote(e.type())).append(",\"data\":").append(e.data());
            if (e.metadata() != null) sb.append(",\"metadata\":").append(e.metadata());
            if (e.id() != null) sb.append(",\"id\":\"").append(e.id()).append('"');
            if (e.tags() != null && !e.tags().isEmpty()) {
                sb.append(",\"tags\":[");
                for (int i = 0; i < e.tags().size(); i++) sb.append(i > 0 ? "," : "").append(quote(e.tags().get(i)));
                sb.append(']');
            }
            sb.append('}');
        }
        return sb.append(']').toString();
    }

    static String quote(String s) {
        return com.fasterxml.jackson.databind.node.TextNode.valueOf(s).toString();
    }

    // reads

    /** At most maxCount (null: all) of the stream's visible events from fromVersion on, oldest first. */
    public List<RecordedEvent> readStream(String stream, long fromVersion, Integer maxCount) {
        return withConnection(c -> query(c, READ_STREAM_SQL, stream, fromVersion, maxCount));
    }

    /** Newest first from fromVersion (null: the end), at most maxCount (null: all). */
    public List<RecordedEvent> readStreamBackward(String stream, Long fromVersion, Integer maxCount) {
        return withConnection(c -> readStream(c, stream, fromVersion, maxCount, true));
    }

    /** Committed events of every stream after a position, in commit-safe order. */
    public List<RecordedEvent> readAll(long afterPosition, int maxCount) {
        return withConnection(c -> query(c, READ_ALL_SQL, null, afterPosition, maxCount));
    }

    /** Committed events of one category after a position. */
    public List<RecordedEvent> readCategory(String category, long afterPosition, int maxCount) {
        return withConnection(c -> query(c, READ_CATEGORY_SQL, category, afterPosition, maxCount));
    }

    /** esrc.safe_position(): the commit-safe horizon; a decision takes it before it reads. */
    public long safePosition() {
        return withConnection(this::safePosition);
    }

    /** {@link #safePosition()} on the caller's connection. */
    public long safePosition(Connection c) {
        try (PreparedStatement ps = c.prepareStatement(SAFE_POSITION_SQL)) {
            return single(ps);
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    /**
     * esrc.read_query: the committed events matching the query with {@code after < position <= upTo}
     * (null: the horizon), in position order, at most maxCount (null: all).
     */
    public List<RecordedEvent> readQuery(Query query, long after, Integer maxCount, Long upTo) {
        return withConnection(c -> readQuery(c, query, after, maxCount, upTo));
    }

    /** Every committed event matching the query, up to the horizon. */
    public List<RecordedEvent> readQuery(Query query) {
        return readQuery(query, 0, null, null);
    }

    /** {@link #readQuery(Query, long, Integer, Long)} on the caller's connection. */
    public List<RecordedEvent> readQuery(Connection c, Query query, long after, Integer maxCount, Long upTo) {
        try (PreparedStatement ps = c.prepareStatement(READ_QUERY_SQL)) {
            ps.setString(1, query.toJson());
            ps.setLong(2, after);
            if (maxCount == null) ps.setNull(3, Types.INTEGER); else ps.setInt(3, maxCount);
            setLong(ps, 4, upTo);
            return rows(ps);
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    /** The stream's events from fromVersion on, read lazily in pages of pageSize (one statement a page). */
    public Stream<RecordedEvent> streamForward(String stream, long fromVersion, int pageSize) {
        return paged(fromVersion, pageSize, from -> readStream(stream, from, pageSize), e -> e.version() + 1);
    }

    /** The stream's events newest first from fromVersion (null: the end), in pages. */
    public Stream<RecordedEvent> streamBackward(String stream, Long fromVersion, int pageSize) {
        Long start = fromVersion == null ? Long.MAX_VALUE : fromVersion;
        return paged(start, pageSize,
            from -> from < 0 ? List.of() : readStreamBackward(stream, from == Long.MAX_VALUE ? null : from, pageSize),
            e -> e.version() - 1);
    }

    /** Every committed event after a position, in pages, up to the end of the log when the last page is read. */
    public Stream<RecordedEvent> streamAll(long afterPosition, int pageSize) {
        return paged(afterPosition, pageSize, after -> readAll(after, pageSize), RecordedEvent::position);
    }

    /** The category's committed events after a position, in pages. */
    public Stream<RecordedEvent> streamCategory(String category, long afterPosition, int pageSize) {
        return paged(afterPosition, pageSize, after -> readCategory(category, after, pageSize), RecordedEvent::position);
    }

    private static Stream<RecordedEvent> paged(long start, int pageSize, Function<Long, List<RecordedEvent>> page,
                                               Function<RecordedEvent, Long> next) {
        if (pageSize <= 0) throw new IllegalArgumentException("pageSize must be positive");
        Iterator<RecordedEvent> it = new Iterator<>() {
            long cursor = start;
            Iterator<RecordedEvent> current = null;
            boolean last = false;

            @Override
            public boolean hasNext() {
                while (current == null || !current.hasNext()) {
                    if (last) return false;
                    List<RecordedEvent> batch = page.apply(cursor);
                    last = batch.size() < pageSize;
                    if (!batch.isEmpty()) cursor = next.apply(batch.get(batch.size() - 1));
                    current = batch.iterator();
                }
                return true;
            }

            @Override
            public RecordedEvent next() {
                if (!hasNext()) throw new NoSuchElementException();
                return current.next();
            }
        };
        return StreamSupport.stream(Spliterators.spliteratorUnknownSize(it, Spliterator.ORDERED | Spliterator.NONNULL), false);
    }

    List<RecordedEvent> query(Connection c, String sql, String text, long from, Integer max) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            int i = 1;
            if (text != null) ps.setString(i++, text);
            if (sql == READ_BACKWARD_SQL && from == Long.MAX_VALUE) ps.setNull(i++, Types.BIGINT); else ps.setLong(i++, from);
            if (max == null) ps.setNull(i, Types.INTEGER); else ps.setInt(i, max);
            return rows(ps);
        }
    }

    List<RecordedEvent> readStream(Connection c, String stream, Long fromVersion, Integer max, boolean backward)
            throws SQLException {
        return query(c, backward ? READ_BACKWARD_SQL : READ_STREAM_SQL, stream,
            fromVersion == null ? Long.MAX_VALUE : fromVersion, max);
    }

    /** RecordedEvents of the rows of a statement selecting {@link #COLUMNS}. */
    List<RecordedEvent> rows(PreparedStatement ps) throws SQLException {
        List<RecordedEvent> out = new ArrayList<>();
        try (ResultSet rs = ps.executeQuery()) {
            while (rs.next()) out.add(recorded(rs));
        }
        return out;
    }

    RecordedEvent recorded(ResultSet rs) throws SQLException {
        Array tags = rs.getArray(9);
        List<String> tagList = tags == null ? null : Arrays.asList((String[]) tags.getArray());
        return types.recorded(rs.getLong(1), rs.getString(2), rs.getLong(3), rs.getString(4), rs.getString(5),
            rs.getString(6), rs.getObject(7, UUID.class), rs.getObject(8, OffsetDateTime.class), tagList);
    }

    /** The version of the stream's last event (hidden ones count), -1 if none. */
    public long streamVersion(String stream) {
        return withConnection(c -> streamVersion(c, stream));
    }

    public long streamVersion(Connection c, String stream) {
        try (PreparedStatement ps = c.prepareStatement(STREAM_VERSION_SQL)) {
            ps.setString(1, stream);
            return single(ps);
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    // crypto-shredding (docs/lifecycle.md)

    /**
     * esrc.encrypt: the envelope (a JSON string, as JSON text) of a JSON value (JSON text)
     * encrypted for a subject and a field; store it in an event's data.
     */
    public String encrypt(String subject, String field, String valueJson) {
        return withConnection(c -> text(c, "SELECT esrc.encrypt(?, ?, ?::text::jsonb)::text", subject, field, valueJson));
    }

    /** esrc.decrypt: the JSON text of the value, null once the subject was forgotten. */
    public String decrypt(String subject, String field, String envelopeJson) {
        return withConnection(c -> text(c, "SELECT esrc.decrypt(?, ?, ?::text::jsonb)::text", subject, field, envelopeJson));
    }

    private static String text(Connection c, String sql, String a, String b, String json) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            ps.setString(1, a);
            ps.setString(2, b);
            ps.setString(3, json);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getString(1);
            }
        }
    }

    /** A snapshot row: its state (JSON text) and version (-1: the stream has no events). */
    public record SnapshotRow(String state, long version) {}

    /** esrc.load: a snapshot row's state and version. */
    public SnapshotRow load(String snapshot, String stream) {
        return withConnection(c -> load(c, snapshot, stream));
    }

    public SnapshotRow load(Connection c, String snapshot, String stream) {
        try (PreparedStatement ps = c.prepareStatement(LOAD_SQL)) {
            ps.setString(1, snapshot);
            ps.setString(2, stream);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return new SnapshotRow(rs.getString(1), rs.getLong(2));
            }
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    /** The snapshot table following a category, if any (cached for the store's life). */
    public Optional<String> snapshotOf(Connection c, String category) {
        Optional<String> got = snapshots.get(category);
        if (got != null) return got;
        try (PreparedStatement ps = c.prepareStatement(SNAPSHOT_OF_SQL)) {
            ps.setString(1, category);
            try (ResultSet rs = ps.executeQuery()) {
                got = Optional.ofNullable(rs.next() ? rs.getString(1) : null);
            }
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
        snapshots.put(category, got);
        return got;
    }
}

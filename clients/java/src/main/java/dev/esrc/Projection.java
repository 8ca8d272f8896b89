package dev.esrc;

import java.sql.Connection;
import java.sql.SQLException;
import java.util.List;

/**
 * A read model written by your process, in the transaction that acknowledges each batch
 * ({@link Consumer#forProjection}). {@link #apply} gets each event; {@link #forget} gets the
 * tombstones {@code esrc.erased} and {@code esrc.deleted}, and must remove what the projection
 * derived from the stream: a projection that does not override it fails on the first tombstone
 * rather than keep personal data. Redacted events (of a stream erased before the projection
 * reached them; their tombstone follows) are skipped.
 */
public interface Projection {
    /** The name, which is also the subscription's. */
    String name();

    /** The categories it follows (null: all). */
    List<String> categories();

    /** Once per start, before the first batch (create its tables). */
    default void setup(Connection connection) throws SQLException {}

    void apply(RecordedEvent event, Connection connection) throws SQLException;

    default void forget(RecordedEvent tombstone, Connection connection) throws SQLException {
        throw new UnsupportedOperationException("projection " + name() + " got the tombstone " + tombstone.type()
            + " of stream " + tombstone.stream() + " and does not implement forget");
    }
}

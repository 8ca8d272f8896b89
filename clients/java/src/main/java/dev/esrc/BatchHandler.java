package dev.esrc;

import java.sql.Connection;
import java.util.List;

/**
 * What a {@link Consumer} does with a batch. Exactly once, the connection is in the transaction
 * that acknowledges the batch: what the handler writes with it commits with the checkpoint or not
 * at all. At least once, it is the consumer's autocommit connection. An exception rolls the batch
 * back (exactly once) and ends {@link Consumer#run} with it; the batch comes again at the next start.
 */
@FunctionalInterface
public interface BatchHandler {
    void handle(List<RecordedEvent> batch, Connection connection) throws Exception;
}

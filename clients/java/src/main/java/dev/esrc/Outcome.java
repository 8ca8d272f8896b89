package dev.esrc;

import java.util.List;
import java.util.UUID;

/**
 * What {@link CommandHandler#handle} did: the stream's version after the command (the loaded one
 * if it decided nothing), the new events, the state after them, the attempts it took and the
 * command id the events' ids derive from.
 */
public record Outcome<S, E>(String stream, long version, List<E> events, S state, int attempts, UUID commandId) {}

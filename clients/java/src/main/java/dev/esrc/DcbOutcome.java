package dev.esrc;

import java.util.List;
import java.util.UUID;

/**
 * What {@link DcbCommandHandler#handle} did: the stream the command's events went to and its
 * version after them (-1: the command decided nothing), the events, the state after them, the
 * horizon the decision read up to (its condition's {@code after}), the attempts it took, the
 * command id the events' ids derive from, and whether the command's events were stored already
 * (by an earlier call with the same command id whose commit was lost to the caller: nothing was
 * decided or written, {@code events} are the stored ones).
 */
public record DcbOutcome<S, E>(String stream, long version, List<E> events, S state, long after, int attempts,
                               UUID commandId, boolean alreadyApplied) {}

package dev.esrc;

import java.util.UUID;

/**
 * A command that carries its id. Give commands their id where they are created (a record
 * component {@code commandId}): a {@link CommandHandler} derives the ids of the command's events
 * from it, so the same command retried after a lost connection is not written twice.
 */
public interface Command {
    UUID commandId();
}

package dev.esrc;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.UUID;

/**
 * The ids of a command's events: UUID version 5 (RFC 9562, SHA-1) of the string of the event's
 * index in the namespace of the command id, the same on every attempt, and the same as the Python
 * client's {@code uuid5(command_id, str(index))}.
 */
public final class EventIds {
    private EventIds() {}

    /** The id of the command's index-th event. */
    public static UUID of(UUID commandId, int index) {
        return uuid5(commandId, Integer.toString(index));
    }

    /** UUID version 5 of a name in a namespace. */
    public static UUID uuid5(UUID namespace, String name) {
        MessageDigest sha1;
        try {
            sha1 = MessageDigest.getInstance("SHA-1");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        byte[] ns = new byte[16];
        long msb = namespace.getMostSignificantBits();
        long lsb = namespace.getLeastSignificantBits();
        for (int i = 0; i < 8; i++) {
            ns[i] = (byte) (msb >>> (56 - 8 * i));
            ns[8 + i] = (byte) (lsb >>> (56 - 8 * i));
        }
        sha1.update(ns);
        byte[] h = sha1.digest(name.getBytes(StandardCharsets.UTF_8));
        h[6] = (byte) ((h[6] & 0x0f) | 0x50);
        h[8] = (byte) ((h[8] & 0x3f) | 0x80);
        long hi = 0;
        long lo = 0;
        for (int i = 0; i < 8; i++) {
            hi = (hi << 8) | (h[i] & 0xff);
            lo = (lo << 8) | (h[8 + i] & 0xff);
        }
        return new UUID(hi, lo);
    }
}

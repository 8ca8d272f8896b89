package dev.esrc.testing;

import dev.esrc.Decider;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * Given/when/then for a {@link Decider}, without a database:
 *
 * <pre>{@code
 * DeciderSpec.of(users).given(new UserRegistered("a@x", "A")).when(new ChangeUserName(id, "B"))
 *     .then(new UserNameChanged("B"));
 * DeciderSpec.of(users).given().when(new ChangeUserName(id, "B")).thenThrows(UnknownUser.class);
 * }</pre>
 *
 * Failures are {@link AssertionError}s, which every test framework reports.
 */
public final class DeciderSpec<C, S, E> {
    private final Decider<C, S, E> decider;
    private final List<E> past;
    private final C command;
    private final boolean hasCommand;

    private DeciderSpec(Decider<C, S, E> decider, List<E> past, C command, boolean hasCommand) {
        this.decider = decider;
        this.past = past;
        this.command = command;
        this.hasCommand = hasCommand;
    }

    public static <C, S, E> DeciderSpec<C, S, E> of(Decider<C, S, E> decider) {
        return new DeciderSpec<>(decider, List.of(), null, false);
    }

    /** Past events (added to those already given). */
    @SafeVarargs
    public final DeciderSpec<C, S, E> given(E... events) {
        List<E> all = new ArrayList<>(past);
        for (E e : events) all.add(e);
        return new DeciderSpec<>(decider, List.copyOf(all), command, hasCommand);
    }

    /** The command. */
    public DeciderSpec<C, S, E> when(C cmd) {
        return new DeciderSpec<>(decider, past, cmd, true);
    }

    private S state() {
        return decider.fold(decider.initialState(), past);
    }

    private List<E> decide(S state) {
        if (!hasCommand) throw new AssertionError("DeciderSpec: when(command) is missing");
        List<E> out = decider.decide(command, state);
        return out == null ? List.of() : out;
    }

    /** Assert that the command decides exactly these events; the state after them. */
    @SafeVarargs
    public final S then(E... expected) {
        S state = state();
        List<E> events = decide(state);
        List<E> want = new ArrayList<>(expected.length);
        for (E e : expected) want.add(e);
        if (!events.equals(want)) {
            throw new AssertionError("expected events " + want + ", decided " + events);
        }
        return decider.fold(state, events);
    }

    /** Assert that the command is rejected with an exception of this class; the exception. */
    public <X extends Throwable> X thenThrows(Class<X> cls) {
        List<E> events;
        try {
            events = decide(state());
        } catch (Throwable t) {
            if (cls.isInstance(t)) return cls.cast(t);
            throw new AssertionError("expected " + cls.getSimpleName() + ", got " + t, t);
        }
        throw new AssertionError("expected " + cls.getSimpleName() + ", decided " + events);
    }

    /** Assert the state after the command's events. */
    public void thenState(S expected) {
        S state = state();
        S got = decider.fold(state, decide(state));
        if (!Objects.equals(got, expected)) {
            throw new AssertionError("expected state " + expected + ", got " + got);
        }
    }
}

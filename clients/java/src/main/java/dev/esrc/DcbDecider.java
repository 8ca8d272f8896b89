package dev.esrc;

import java.util.List;
import java.util.function.BiFunction;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * A decision across streams (docs/dcb.md): the three pure functions of a {@link Decider}, whose
 * state a {@link DcbCommandHandler} folds from the events a {@link Query} selects rather than from
 * one stream, and two that say where the decided events go: {@link #stream}, the one stream a
 * command's events are appended to (the entity they are mainly about, {@code student-<id>}), and
 * {@link #tags}, the tags each event carries ({@code student:s1}, {@code course:c1}: what the
 * queries of later decisions select it by).
 *
 * @param <C> commands
 * @param <S> states
 * @param <E> events
 */
public interface DcbDecider<C, S, E> {
    S initialState();

    S evolve(S state, E event);

    List<E> decide(C command, S state);

    /** The stream the command's events are appended to. */
    String stream(C command);

    /** The tags of a decided event. */
    List<String> tags(E event);

    /** The state after the events, from {@code state}. */
    default S fold(S state, Iterable<? extends E> events) {
        S s = state;
        for (E e : events) s = evolve(s, e);
        return s;
    }

    /** A DCB decider of five functions. */
    static <C, S, E> DcbDecider<C, S, E> of(Supplier<S> initialState, BiFunction<S, E, S> evolve,
                                            BiFunction<C, S, List<E>> decide, Function<C, String> stream,
                                            Function<E, List<String>> tags) {
        return new DcbDecider<>() {
            @Override public S initialState() { return initialState.get(); }
            @Override public S evolve(S state, E event) { return evolve.apply(state, event); }
            @Override public List<E> decide(C command, S state) { return decide.apply(command, state); }
            @Override public String stream(C command) { return stream.apply(command); }
            @Override public List<String> tags(E event) { return tags.apply(event); }
        };
    }
}

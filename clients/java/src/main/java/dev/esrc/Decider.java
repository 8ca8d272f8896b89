package dev.esrc;

import java.util.List;
import java.util.function.BiFunction;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * The domain logic of one kind of stream, in three pure functions: the initial state, evolve
 * (state, event) to state, and decide (command, state) to the new events (throw an exception of
 * your own to reject a command). {@link #fromSnapshot} (optional) reads the state of a snapshot
 * row (the jsonb of {@code esrc.load}), so a {@link CommandHandler} loads from the category's
 * snapshot table instead of folding the events.
 *
 * @param <C> commands
 * @param <S> states
 * @param <E> events
 */
public interface Decider<C, S, E> {
    S initialState();

    S evolve(S state, E event);

    List<E> decide(C command, S state);

    /** The state of a snapshot row's JSON text; null (the default): this decider folds events. */
    default Function<String, S> fromSnapshot() {
        return null;
    }

    /** The state after the events, from {@code state}. */
    default S fold(S state, Iterable<? extends E> events) {
        S s = state;
        for (E e : events) s = evolve(s, e);
        return s;
    }

    /** A decider of three functions. */
    static <C, S, E> Decider<C, S, E> of(Supplier<S> initialState, BiFunction<S, E, S> evolve,
                                         BiFunction<C, S, List<E>> decide) {
        return of(initialState, evolve, decide, null);
    }

    /** A decider of three functions and the state of a snapshot row. */
    static <C, S, E> Decider<C, S, E> of(Supplier<S> initialState, BiFunction<S, E, S> evolve,
                                         BiFunction<C, S, List<E>> decide, Function<String, S> fromSnapshot) {
        return new Decider<>() {
            @Override public S initialState() { return initialState.get(); }
            @Override public S evolve(S state, E event) { return evolve.apply(state, event); }
            @Override public List<E> decide(C command, S state) { return decide.apply(command, state); }
            @Override public Function<String, S> fromSnapshot() { return fromSnapshot; }
        };
    }
}

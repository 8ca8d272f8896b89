package dev.esrc;

import java.util.List;
import java.util.UUID;

/** The seed scenario's domain: users who register and change their names. */
final class Users {
    private Users() {}

    sealed interface UserEvent permits UserRegistered, UserNameChanged {}

    record UserRegistered(String email, String name) implements UserEvent {}

    record UserNameChanged(String name) implements UserEvent {}

    sealed interface UserCommand extends Command permits RegisterUser, ChangeUserName {}

    record RegisterUser(UUID commandId, String email, String name) implements UserCommand {
        RegisterUser(String email, String name) { this(UUID.randomUUID(), email, name); }
    }

    record ChangeUserName(UUID commandId, String name) implements UserCommand {
        ChangeUserName(String name) { this(UUID.randomUUID(), name); }
    }

    record User(String email, String name) {}

    static final class UnknownUser extends RuntimeException {
        private static final long serialVersionUID = 1L;
    }

    static final class AlreadyRegistered extends RuntimeException {
        private static final long serialVersionUID = 1L;
    }

    static User evolve(User state, UserEvent e) {
        if (e instanceof UserRegistered r) return new User(r.email(), r.name());
        return new User(state.email(), ((UserNameChanged) e).name());
    }

    static List<UserEvent> decide(UserCommand c, User state) {
        if (c instanceof RegisterUser r) {
            if (state != null) throw new AlreadyRegistered();
            return List.of(new UserRegistered(r.email(), r.name()));
        }
        if (state == null) throw new UnknownUser();
        return List.of(new UserNameChanged(((ChangeUserName) c).name()));
    }

    static final Decider<UserCommand, User, UserEvent> DECIDER = Decider.of(() -> null, Users::evolve, Users::decide);

    static EventTypes types() {
        return new EventTypes().register(UserRegistered.class).register(UserNameChanged.class);
    }
}

package esrc.example.client;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.esrc.Command;
import dev.esrc.CommandHandler;
import dev.esrc.Decider;
import dev.esrc.EventStore;
import dev.esrc.EventTypes;
import dev.esrc.Outcome;
import dev.esrc.RecordedEvent;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * The seed scenario on the esrc Java client (clients/java), the model of
 * examples/security_service.sql from the application side: RegisterUser makes a new id, the
 * user's stream is {@code user-<uuid>} (no e-mail in stream names, which are never erased) and
 * the e-mail is stored only encrypted for that subject (esrc.encrypt), so esrc.forget_subject
 * makes it unreadable wherever it was copied. Then three threads change the user's name at once:
 * the command handler loads, decides and appends with the loaded version, and on 40001 (another
 * thread got in between) loads and decides again, so the three renames end at versions 1, 2
 * and 3. Prints what it did; exits 1 if the log is not what the scenario must leave.
 *
 * <pre>java esrc.example.client.SeedScenario 'jdbc:postgresql://host/db?user=...'</pre>
 *
 * Needs a role in esrc_writer (nothing else: no schema of its own).
 */
public final class SeedScenario {
    private SeedScenario() {}

    // events: the e-mail is an esrc.encrypt envelope, never the address itself
    public sealed interface UserEvent permits UserRegistered, UserNameChanged {}

    public record UserRegistered(String email, String name) implements UserEvent {}

    public record UserNameChanged(String name) implements UserEvent {}

    // commands carry their id: the events' ids derive from it (a retried command is written once)
    public sealed interface UserCommand extends Command permits RegisterUser, ChangeUserName {}

    public record RegisterUser(UUID commandId, String sealedEmail, String name) implements UserCommand {}

    public record ChangeUserName(UUID commandId, String name) implements UserCommand {}

    public record User(String sealedEmail, String name) {}

    static final class AlreadyRegistered extends RuntimeException {
        private static final long serialVersionUID = 1L;
    }

    static final class UnknownUser extends RuntimeException {
        private static final long serialVersionUID = 1L;
    }

    static User evolve(User state, UserEvent e) {
        if (e instanceof UserRegistered r) return new User(r.email(), r.name());
        return new User(state.sealedEmail(), ((UserNameChanged) e).name());
    }

    static List<UserEvent> decide(UserCommand c, User state) {
        if (c instanceof RegisterUser r) {
            if (state != null) throw new AlreadyRegistered();
            return List.of(new UserRegistered(r.sealedEmail(), r.name()));
        }
        if (state == null) throw new UnknownUser();
        return List.of(new UserNameChanged(((ChangeUserName) c).name()));
    }

    static final Decider<UserCommand, User, UserEvent> USERS =
        Decider.of(() -> null, SeedScenario::evolve, SeedScenario::decide);

    static final ObjectMapper JSON = new ObjectMapper();

    /** RegisterUser: a new id, the e-mail encrypted for the user's stream; the new user's stream. */
    static String register(EventStore store, String email, String name) throws Exception {
        String stream = "user-" + UUID.randomUUID();
        String envelope = JSON.readTree(store.encrypt(stream, "email", JSON.writeValueAsString(email))).asText();
        new CommandHandler<>(store, USERS).handle(stream, new RegisterUser(UUID.randomUUID(), envelope, name));
        return stream;
    }

    /** The user's e-mail, decrypted (null once the subject was forgotten). */
    static String email(EventStore store, String stream, User user) throws Exception {
        String value = store.decrypt(stream, "email", JSON.writeValueAsString(user.sealedEmail()));
        return value == null ? null : JSON.readTree(value).asText();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: SeedScenario JDBC_URL");
            System.exit(2);
        }
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setURL(args[0]);
        EventStore store = new EventStore(ds, new EventTypes()
            .register(UserRegistered.class).register(UserNameChanged.class));
        CommandHandler<UserCommand, User, UserEvent> users = new CommandHandler<>(store, USERS);

        String stream = register(store, "alex@example.com", "Alex");
        System.out.println("registered " + stream);

        // three renames at once, each on its own connection
        ExecutorService pool = Executors.newFixedThreadPool(3);
        CountDownLatch go = new CountDownLatch(1);
        List<Future<Outcome<User, UserEvent>>> renames = new ArrayList<>();
        for (int i = 1; i <= 3; i++) {
            String name = "Alex " + i;
            renames.add(pool.submit(() -> {
                go.await();
                return users.handle(stream, new ChangeUserName(UUID.randomUUID(), name));
            }));
        }
        go.countDown();
        TreeSet<Long> versions = new TreeSet<>();
        int retried = 0;
        for (Future<Outcome<User, UserEvent>> f : renames) {
            Outcome<User, UserEvent> o = f.get(60, TimeUnit.SECONDS);
            versions.add(o.version());
            if (o.attempts() > 1) retried++;
        }
        pool.shutdown();
        System.out.println("three concurrent renames: versions " + versions + " (" + retried + " retried after 40001)");

        List<RecordedEvent> log = store.readStream(stream, 0, null);
        User user = null;
        for (RecordedEvent e : log) user = evolve(user, (UserEvent) e.event());
        String stored = log.get(0).data();
        String email = email(store, stream, user);
        System.out.println("stream " + stream + ": version " + store.streamVersion(stream) + ", name " + user.name()
            + ", e-mail " + email + " (stored encrypted: " + !stored.contains("alex@example.com") + ")");

        List<String> wrong = new ArrayList<>();
        if (!versions.equals(new TreeSet<>(List.of(1L, 2L, 3L)))) wrong.add("versions " + versions + ", not [1, 2, 3]");
        if (log.size() != 4) wrong.add(log.size() + " events, not 4");
        if (stored.contains("alex@example.com")) wrong.add("the e-mail is stored in clear: " + stored);
        if (!"alex@example.com".equals(email)) wrong.add("the e-mail decrypts to " + email);
        if (!wrong.isEmpty()) {
            System.err.println("seed scenario FAILED: " + String.join("; ", wrong));
            System.exit(1);
        }
        System.out.println("ok");
    }
}

package dev.esrc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.esrc.testing.DeciderSpec;
import java.util.UUID;
import org.junit.jupiter.api.Test;

/** Without a database: event ids and given/when/then. */
class IdsAndSpecTest {
    @Test
    void eventIdsAreUuid5AsPythonDerivesThem() {
        // python3 -c 'import uuid; print(uuid.uuid5(uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "python.org"))'
        assertEquals(UUID.fromString("886313e1-3b8a-5372-9b90-0c9aee199e5d"),
            EventIds.uuid5(UUID.fromString("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "python.org"));
        UUID cid = UUID.randomUUID();
        assertEquals(EventIds.of(cid, 1), EventIds.of(cid, 1));
        assertEquals(5, EventIds.of(cid, 0).version());
    }

    @Test
    void theClientsVersionIsTheExtensions() throws java.io.IOException {
        // surefire runs in clients/java; the pom's version is checked by test/run-74-java-client.sh
        String control = java.nio.file.Files.readString(java.nio.file.Path.of("../../esrc.control"));
        assertEquals(true, control.contains("default_version = '" + EsrcVersion.CLIENT + "'"), control);
    }

    @Test
    void givenWhenThen() {
        var spec = DeciderSpec.of(Users.DECIDER);
        spec.given(new Users.UserRegistered("a@x", "A")).when(new Users.ChangeUserName("B"))
            .then(new Users.UserNameChanged("B"));
        spec.given().when(new Users.ChangeUserName("B")).thenThrows(Users.UnknownUser.class);
        spec.given(new Users.UserRegistered("a@x", "A")).when(new Users.ChangeUserName("B"))
            .thenState(new Users.User("a@x", "B"));
        assertThrows(AssertionError.class, () -> spec.given().when(new Users.RegisterUser("a@x", "A"))
            .then(new Users.UserNameChanged("A")));
        assertThrows(AssertionError.class, () -> spec.given(new Users.UserRegistered("a@x", "A"))
            .when(new Users.RegisterUser("a@x", "A")).thenThrows(Users.UnknownUser.class));
    }
}

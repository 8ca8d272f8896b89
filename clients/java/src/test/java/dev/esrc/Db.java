package dev.esrc;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.UUID;
import javax.sql.DataSource;
import org.junit.jupiter.api.Assumptions;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * The database of the integration tests: ESRC_TEST_URL (a JDBC URL, as test/run-74-java-client.sh
 * sets it), or the system property esrc.test.url. Without one the database tests are skipped
 * (by hand: each one reported skipped); the driver sets ESRC_TEST_REQUIRE, which makes a missing
 * URL an error, and fails when any test was skipped.
 */
final class Db {
    private Db() {}

    static String url() {
        String url = System.getProperty("esrc.test.url");
        if (url == null || url.isEmpty()) url = System.getenv("ESRC_TEST_URL");
        return url == null || url.isEmpty() ? null : url;
    }

    static DataSource dataSource() {
        String url = url();
        if (url == null && System.getenv("ESRC_TEST_REQUIRE") != null) {
            throw new IllegalStateException("ESRC_TEST_REQUIRE is set and ESRC_TEST_URL is not");
        }
        Assumptions.assumeTrue(url != null, "ESRC_TEST_URL is not set: the database tests are skipped");
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setURL(url);
        return ds;
    }

    static void exec(DataSource ds, String sql) {
        try (Connection c = ds.getConnection(); Statement s = c.createStatement()) {
            s.execute(sql);
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    static String unique(String category) {
        return category + "-" + UUID.randomUUID();
    }
}

package dev.esrc;

/** The client's version, which is the extension's it speaks to, and the check made at first use. */
public final class EsrcVersion {
    /** This client's version: esrc-client 0.3.0 works with the esrc extension 0.3.x. */
    public static final String CLIENT = "0.3.0";

    static final String SERVER_VERSION_SQL =
        "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'esrc'";

    private EsrcVersion() {}

    /**
     * Throws {@link ServerVersionException} unless the extension's version (null: not installed)
     * has the client's major.minor.
     */
    public static void check(String server) {
        if (server == null) {
            throw new ServerVersionException("the extension esrc is not installed in this database", null, null,
                "A superuser runs CREATE EXTENSION esrc (see the esrc README, Install).", null);
        }
        String want = majorMinor(CLIENT);
        if (!majorMinor(server).equals(want)) {
            throw new ServerVersionException("this esrc client " + CLIENT + " works with the esrc extension " + want
                + ".x; the database has " + server, null, null,
                "Update the extension (ALTER EXTENSION esrc UPDATE) or use the client of the extension's version ("
                    + "dev.esrc:esrc-client:" + majorMinor(server) + ".x).", null);
        }
    }

    static String majorMinor(String v) {
        String[] p = v.split("\\.");
        return p.length >= 2 ? p[0] + "." + p[1] : v;
    }
}

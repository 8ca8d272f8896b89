package dev.esrc;

import java.io.PrintWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Logger;
import javax.sql.DataSource;

/**
 * A data source whose next {@code failures} commits succeed on the server and then throw 08006,
 * as when the connection breaks before the commit's answer arrives.
 */
final class LostCommit implements DataSource {
    private final DataSource inner;
    final AtomicInteger failures = new AtomicInteger();

    LostCommit(DataSource inner) {
        this.inner = inner;
    }

    @Override
    public Connection getConnection() throws SQLException {
        Connection c = inner.getConnection();
        return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class},
            (proxy, m, args) -> {
                try {
                    Object r = m.invoke(c, args);
                    if (m.getName().equals("commit") && failures.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
                        throw new SQLException("An I/O error occurred while sending to the backend.", "08006");
                    }
                    return r;
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
            });
    }

    @Override public Connection getConnection(String u, String p) { throw new UnsupportedOperationException(); }
    @Override public PrintWriter getLogWriter() { return null; }
    @Override public void setLogWriter(PrintWriter out) {}
    @Override public void setLoginTimeout(int seconds) {}
    @Override public int getLoginTimeout() { return 0; }
    @Override public Logger getParentLogger() throws SQLFeatureNotSupportedException { throw new SQLFeatureNotSupportedException(); }
    @Override public <T> T unwrap(Class<T> iface) { throw new UnsupportedOperationException(); }
    @Override public boolean isWrapperFor(Class<?> iface) { return false; }
}

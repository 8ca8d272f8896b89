"""The client's version, which is the version of the extension it speaks to."""

__version__ = "0.3.0"

# The server query and the rule of esrc.store.check_server_version: the
# client works with the extension of its own major.minor.
SERVER_VERSION_SQL = "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'esrc'"

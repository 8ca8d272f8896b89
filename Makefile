# esrc: PGXS build.  `make && sudo make install`, then see README.md.
EXTENSION    = esrc
EXTVERSION   = $(shell grep default_version $(EXTENSION).control | sed -e "s/default_version[[:space:]]*=[[:space:]]*'\([^']*\)'/\1/")

MODULE_big   = esrc
# src/esrc.c (_PG_init) and one folder per subsystem (src/README.md)
OBJS         = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c src/*/*.c)))
# (not HEADERS: PGXS would install them as the extension's public headers)
ESRC_HEADERS = $(sort $(wildcard src/*/*.h))

# The install script of the current version is the concatenation of
# src/sql/NN_*.sql, one file per capability.  The install scripts of
# released versions (esrc--0.1.0.sql) and the upgrade scripts
# (esrc--A--B.sql) are kept as written: CREATE EXTENSION esrc VERSION
# '0.1.0' followed by ALTER EXTENSION esrc UPDATE must end where a fresh
# install does (test/run-15-upgrade.sh checks it).
DATA_built   = $(EXTENSION)--$(EXTVERSION).sql
DATA         = $(filter-out $(DATA_built),$(wildcard $(EXTENSION)--*.sql))
EXTRA_CLEAN  = $(EXTENSION)--$(EXTVERSION).sql

PG_CONFIG   ?= pg_config
PG_CFLAGS    = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Werror=implicit-function-declaration
ifdef ESRC_WERROR
PG_CFLAGS   += -Werror
endif
SHLIB_LINK   = -lrdkafka -lcrypto
# includes name a folder's face, "log/log.h"; a folder's own private
# headers are included by their bare name from its files
PG_CPPFLAGS += -I$(srcdir)/src

# Test builds: make ESRC_TOPIC_CACHE_SIZE=8 lowers the forwarder's topic
# cache (src/forward/kafkatopic.c) so that one batch can span more topics than it holds.
ifdef ESRC_TOPIC_CACHE_SIZE
PG_CPPFLAGS += -DESRC_TOPIC_CACHE_SIZE=$(ESRC_TOPIC_CACHE_SIZE)
endif

# pg_regress tests (sql/*.sql, expected/*.out); they need a server with
# shared_preload_libraries = 'esrc', which test/all.sh provides.
REGRESS      = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --dbname=esrc_regression

# No LLVM bitcode: esrc gains nothing from JIT inlining, and it would need clang.
override with_llvm := no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

SQL_PARTS = $(sort $(wildcard src/sql/*.sql))
$(EXTENSION)--$(EXTVERSION).sql: $(SQL_PARTS) $(EXTENSION).control
	( echo '-- esrc $(EXTVERSION) install script, built from src/sql/*.sql by make.'; \
	  echo '\\echo Use "CREATE EXTENSION esrc" to load this file. \\quit'; \
	  for f in $(SQL_PARTS); do echo; echo "-- from $$f"; cat $$f; done ) > $@

# PGXS does not track header dependencies: every object depends on every
# header of src/, so that a changed header rebuilds what may include it
# (a stale object once skewed a benchmark series)
$(OBJS): $(ESRC_HEADERS)

# make dist: the PGXN source archive esrc-VERSION.zip (META.json at its
# top, one directory esrc-VERSION/) of the committed tree, HEAD; what
# .gitattributes marks export-ignore stays out.  test/run-07-package.sh
# unpacks it and builds it with PGXS.
DISTNAME = $(EXTENSION)-$(EXTVERSION)
.PHONY: dist
dist:
	git archive --format zip --prefix=$(DISTNAME)/ -o $(DISTNAME).zip HEAD
	@echo "$(DISTNAME).zip"

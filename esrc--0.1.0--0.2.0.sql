-- esrc upgrade script from 0.1.0 to 0.2.0 (ALTER EXTENSION esrc UPDATE TO '0.2.0').
\echo Use "ALTER EXTENSION esrc UPDATE TO '0.2.0'" to load this file. \quit

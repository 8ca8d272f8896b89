-- test/upgrade/catalog.sql: a text description of every object of the esrc
-- extension, by name (no OIDs), for test/run-15-upgrade.sh to compare a
-- database upgraded with ALTER EXTENSION esrc UPDATE against a fresh
-- install of the same version.  One line per fact, sorted.
WITH ext AS (
    SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'esrc'
), members AS (
    SELECT d.classid, d.objid
    FROM pg_catalog.pg_depend d, ext
    WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
      AND d.refobjid = ext.oid AND d.deptype = 'e'
), facts AS (
    -- every member, by its identity
    SELECT 'member ' || i.type || ' ' || i.identity AS fact
    FROM members m, LATERAL pg_catalog.pg_identify_object(m.classid, m.objid, 0) i
    UNION ALL
    -- functions: the whole definition (arguments, defaults, body, SET,
    -- SECURITY DEFINER, volatility, strictness, parallel safety) and ACL
    SELECT 'function ' || p.oid::regprocedure::text || E'\n' ||
           pg_catalog.pg_get_functiondef(p.oid) ||
           ' acl=' || coalesce(p.proacl::text, 'default')
    FROM members m JOIN pg_catalog.pg_proc p ON p.oid = m.objid
    WHERE m.classid = 'pg_catalog.pg_proc'::regclass AND p.prokind <> 'a'
    UNION ALL
    -- relations: kind, ACL, options
    SELECT 'relation ' || c.oid::regclass::text || ' kind=' || c.relkind::text ||
           ' acl=' || coalesce(c.relacl::text, 'default') ||
           ' options=' || coalesce(c.reloptions::text, '') ||
           ' rls=' || c.relrowsecurity
    FROM members m JOIN pg_catalog.pg_class c ON c.oid = m.objid
    WHERE m.classid = 'pg_catalog.pg_class'::regclass
    UNION ALL
    -- columns of relations and composite types, in order
    SELECT 'column ' || c.oid::regclass::text || ' ' || a.attnum || ' ' || a.attname ||
           ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) ||
           CASE WHEN a.attnotnull THEN ' not null' ELSE '' END ||
           coalesce(' default ' || pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), '') ||
           coalesce(' collate ' || co.collname, '')
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'esrc'
    JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
    LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 100
    WHERE c.relkind IN ('r', 'v', 'm', 'c', 'p', 'f')
    UNION ALL
    SELECT 'view ' || c.oid::regclass::text || ' ' || pg_catalog.pg_get_viewdef(c.oid, true)
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'esrc' AND c.relkind IN ('v', 'm')
    UNION ALL
    SELECT 'constraint ' || co.conrelid::regclass::text || ' ' || co.conname || ' ' ||
           pg_catalog.pg_get_constraintdef(co.oid)
    FROM pg_catalog.pg_constraint co JOIN pg_catalog.pg_namespace n ON n.oid = co.connamespace
    WHERE n.nspname = 'esrc'
    UNION ALL
    SELECT 'index ' || pg_catalog.pg_get_indexdef(i.indexrelid)
    FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'esrc'
    UNION ALL
    SELECT 'trigger ' || pg_catalog.pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
    FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'esrc' AND NOT t.tgisinternal
    UNION ALL
    SELECT 'sequence ' || s.seqrelid::regclass::text || ' ' || pg_catalog.format_type(s.seqtypid, NULL) ||
           ' start=' || s.seqstart || ' inc=' || s.seqincrement || ' min=' || s.seqmin ||
           ' max=' || s.seqmax || ' cache=' || s.seqcache || ' cycle=' || s.seqcycle
    FROM pg_catalog.pg_sequence s JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'esrc'
    UNION ALL
    -- comments on members and on their columns
    SELECT 'comment ' || i.type || ' ' || i.identity || ' = ' || d.description
    FROM pg_catalog.pg_description d
    JOIN members m ON m.classid = d.classoid AND m.objid = d.objoid
    CROSS JOIN LATERAL pg_catalog.pg_identify_object(d.classoid, d.objoid, d.objsubid) i
    UNION ALL
    -- the schema's ACL as a set: an upgrade grants a new role USAGE after
    -- the roles a fresh install's later parts grant it to
    SELECT 'schema acl ' || coalesce((SELECT pg_catalog.array_agg(x::text ORDER BY x::text)
                                      FROM pg_catalog.unnest(n.nspacl) x)::text, 'default')
    FROM pg_catalog.pg_namespace n WHERE n.nspname = 'esrc'
    UNION ALL
    -- initial privileges (pg_init_privs) of types and functions, as sets:
    -- pg_dump dumps the members' ACLs relative to them, so an upgrade must
    -- record what a fresh install records (no grant of the
    -- esrc.referenced_role marker; a user's EXECUTE on create_snapshot
    -- carried over by the 0.2.0 to 0.3.0 script is the user's, not one)
    SELECT 'init privs ' || i.type || ' ' || i.identity || ' ' || ip.privtype::text || ' ' ||
           coalesce((SELECT pg_catalog.array_agg(x::text ORDER BY x::text)
                     FROM pg_catalog.unnest(ip.initprivs) x)::text, '')
    FROM pg_catalog.pg_init_privs ip
    JOIN members m ON m.classid = ip.classoid AND m.objid = ip.objoid
    CROSS JOIN LATERAL pg_catalog.pg_identify_object(ip.classoid, ip.objoid, ip.objsubid) i
    WHERE ip.classoid IN ('pg_catalog.pg_type'::regclass, 'pg_catalog.pg_proc'::regclass)
    UNION ALL
    -- tables pg_dump dumps with the database
    SELECT 'config dump ' || cfg::regclass::text
    FROM pg_catalog.pg_extension e, unnest(e.extconfig) cfg WHERE e.extname = 'esrc'
    UNION ALL
    -- the roles the extension uses, and their memberships
    SELECT 'role ' || r.rolname || ' super=' || r.rolsuper || ' login=' || r.rolcanlogin ||
           ' member of ' || coalesce((SELECT string_agg(g.rolname, ',' ORDER BY g.rolname)
                                     FROM pg_catalog.pg_auth_members am
                                     JOIN pg_catalog.pg_roles g ON g.oid = am.roleid
                                     WHERE am.member = r.oid), '')
    FROM pg_catalog.pg_roles r WHERE r.rolname LIKE 'esrc\_%'
    UNION ALL
    SELECT 'extension version ' || extversion || ' relocatable=' || extrelocatable
    FROM pg_catalog.pg_extension WHERE extname = 'esrc'
)
SELECT fact FROM facts ORDER BY fact;

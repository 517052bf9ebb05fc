-- Optional defence in depth: row-level security by tenant. The policies exist in every database;
-- they take effect only when an instance is opened with `?rls=on` (which enables and forces RLS on
-- these tables) and then every statement sees only the rows of the tenant named in the
-- transaction-local setting `usermem.tenant`. '*' is the maintenance scope (purge, counts).
-- Superusers and roles with BYPASSRLS are never subject to RLS: run the service as a plain role.
CREATE POLICY tenant_isolation ON memories
    USING (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*')
    WITH CHECK (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*');
CREATE POLICY tenant_isolation ON audit
    USING (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*')
    WITH CHECK (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*');
CREATE POLICY tenant_isolation ON documents
    USING (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*')
    WITH CHECK (tenant = current_setting('usermem.tenant', true) OR current_setting('usermem.tenant', true) = '*');

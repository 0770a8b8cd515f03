-- Overrides belong to one domain: the same rule path in two rule files
-- (two domains) names two different rules. An override written before this
-- migration had no domain and applied to the rules of that path in every
-- domain; it gets the domain '*', which keeps exactly that effect (an
-- override naming the rule's own domain is preferred over it). The admin
-- API refuses '*' for new overrides: replacing a tenant's record with
-- domains named removes its '*' rows.
ALTER TABLE sluice_overrides ADD COLUMN domain text NOT NULL DEFAULT '*'
    CHECK (octet_length(domain) BETWEEN 1 AND 256);
ALTER TABLE sluice_overrides ALTER COLUMN domain DROP DEFAULT;
ALTER TABLE sluice_overrides DROP CONSTRAINT sluice_overrides_pkey;
ALTER TABLE sluice_overrides ADD PRIMARY KEY (tenant, domain, descriptor);

-- Tenants, their overrides, rule switches and the audit log.
CREATE TABLE sluice_tenants (
    tenant       text PRIMARY KEY CHECK (octet_length(tenant) BETWEEN 1 AND 256),
    tier         text NOT NULL CHECK (tier IN ('free', 'pro', 'enterprise', 'custom')),
    effective_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz CHECK (expires_at IS NULL OR expires_at > effective_at),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sluice_tenants_tier ON sluice_tenants (tier, tenant);

CREATE TABLE sluice_overrides (
    tenant            text NOT NULL REFERENCES sluice_tenants (tenant) ON DELETE CASCADE,
    -- the rule's path below the tenant key: "endpoint:POST /api/v1/orders"
    descriptor        text NOT NULL CHECK (octet_length(descriptor) <= 1024),
    requests_per_unit bigint NOT NULL CHECK (requests_per_unit BETWEEN 0 AND 4294967295),
    -- an envoy unit (second … year), or NULL when window_us is not one
    unit              text,
    window_us         bigint NOT NULL CHECK (window_us > 0),
    algorithm         text NOT NULL,
    burst             bigint NOT NULL DEFAULT 0 CHECK (burst >= 0),
    -- counts the calendar periods of a calendar rule (window_us is nominal)
    calendar          boolean NOT NULL DEFAULT false,
    effective_at      timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz CHECK (expires_at IS NULL OR expires_at > effective_at),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, descriptor)
);

CREATE TABLE sluice_rule_switches (
    domain     text NOT NULL,
    rule       text NOT NULL,
    state      text NOT NULL CHECK (state IN ('off', 'shadow')),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (domain, rule)
);

CREATE TABLE sluice_audit (
    id      bigserial PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    actor   text NOT NULL,
    action  text NOT NULL,
    subject text NOT NULL,
    before  jsonb,
    after   jsonb
);
CREATE INDEX sluice_audit_subject ON sluice_audit (subject, id);

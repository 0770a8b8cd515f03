-- Deny entries kept through the admin API (PUT /admin/v1/deny), beside the
-- rule files' deny lists. value '' with cidr '' denies every value of key;
-- cidr is stored masked (10.0.0.0/8), as rules.ParseDenyCIDR returns it.
CREATE TABLE sluice_deny (
    domain     text NOT NULL CHECK (octet_length(domain) BETWEEN 1 AND 256),
    key        text NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 256),
    value      text NOT NULL DEFAULT '' CHECK (octet_length(value) <= 4096),
    cidr       text NOT NULL DEFAULT '' CHECK (octet_length(cidr) <= 64),
    reason     text NOT NULL DEFAULT '' CHECK (octet_length(reason) <= 512),
    actor      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (value = '' OR cidr = ''),
    PRIMARY KEY (domain, key, value, cidr)
);

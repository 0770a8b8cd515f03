-- Reading the audit log back (GET /admin/v1/audit): by actor, by time.
CREATE INDEX sluice_audit_actor ON sluice_audit (actor, id);
CREATE INDEX sluice_audit_at ON sluice_audit (at, id);

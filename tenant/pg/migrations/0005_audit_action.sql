-- Reading one action's rows back, newest first (GET /admin/v1/notifications:
-- action notify, written by every instance of the fleet).
CREATE INDEX sluice_audit_action ON sluice_audit (action, id);

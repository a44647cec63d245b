-- Lifecycle: a registration whose credentials can no longer be renewed without a person (its
-- refresh token was rejected) is reconnect_required until a flow completes for it.
ALTER TABLE registrations DROP CONSTRAINT registrations_status_check;
ALTER TABLE registrations ADD CONSTRAINT registrations_status_check
    CHECK (status IN ('active', 'login_required', 'pending_approval', 'reconnect_required'));

-- Who may register: a destination with `registration: {policy: approval}` keeps new
-- registrations as pending_approval until an administrator approves them.
ALTER TABLE registrations DROP CONSTRAINT registrations_status_check;
ALTER TABLE registrations ADD CONSTRAINT registrations_status_check
    CHECK (status IN ('active', 'login_required', 'pending_approval'));
-- Admin listings filter by user hint, newest first.
DROP INDEX registrations_user_hint;
CREATE INDEX registrations_user_hint_created ON registrations (user_hint, created_at DESC, id DESC);

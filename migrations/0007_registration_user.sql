-- A registration's user: whose credentials Parley holds. Set once, by a verified identity
-- token when the registration is created, else by the sign-in of its first completed flow,
-- and never changed afterwards (UPDATE … WHERE user_subject IS NULL). user_match is the
-- lower-cased value later sign-ins are compared with (the destination's identity.match claim).
ALTER TABLE registrations
    ADD COLUMN user_issuer text,
    ADD COLUMN user_subject text,
    ADD COLUMN user_verified boolean,
    ADD COLUMN user_match text,
    ADD CONSTRAINT registrations_user_whole CHECK (
        (user_issuer IS NULL AND user_subject IS NULL AND user_verified IS NULL AND user_match IS NULL)
        OR (user_issuer IS NOT NULL AND user_subject IS NOT NULL AND user_verified IS NOT NULL AND user_match IS NOT NULL));
-- Admin listings filter by user, newest first; revocation by user finds every registration of one.
CREATE INDEX registrations_user_created ON registrations (user_issuer, user_subject, created_at DESC, id DESC)
    WHERE user_subject IS NOT NULL;

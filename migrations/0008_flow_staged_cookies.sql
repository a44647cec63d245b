-- What an upstream sets through the hosted upstream (/web/{destination}/…) while a flow is
-- open is staged with the flow, sealed (associated data flows.staged_cookies:<id>), and
-- reaches the registration's cookie jar only when the flow completes with a sign-in as the
-- registration's user. A failed or expired flow's staged cookies go with it.
ALTER TABLE flows ADD COLUMN staged_cookies_sealed bytea;

-- A browser app's registration (`"browser": true`): the app it belongs to, by its name in the
-- destinations file. Its client token travels in an HttpOnly cookie; calls authenticated by that
-- cookie must come from the app's origins with `Parley-CSRF: 1`, and its flows complete only in
-- the browser that holds the cookie. NULL for every other registration.
ALTER TABLE registrations ADD COLUMN browser_app text
    CHECK (browser_app IS NULL OR (char_length(browser_app) BETWEEN 1 AND 100 AND agent_client IS NULL));

-- Hosted sign-in for saml2, otp and basic (form) flows.
-- challenge_url: the upstream URL that met the challenge (basic: tried again with the
--   form's credentials; otp: the OTP form, with its additional parameters).
-- failed_attempts: wrong credentials entered in a basic form; too many end the flow.
-- second_factor: a saml2 flow met an OTP challenge in the browser and now finishes
--   at the OTP finish condition instead of the SAML2 one.
ALTER TABLE flows ADD COLUMN challenge_url text;
ALTER TABLE flows ADD COLUMN failed_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE flows ADD COLUMN second_factor boolean NOT NULL DEFAULT false;

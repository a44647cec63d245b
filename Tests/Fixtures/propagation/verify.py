#!/usr/bin/python3
"""Checks Parley's propagation assertions with other people's code, as an authorization
server would: a JWT bearer assertion (RFC 7523) with Authlib's JOSE against Parley's
published JWK Set, a SAML bearer assertion (RFC 7522) with xmlsec1 (the signature, against
the certificate in Parley's SAML metadata) and pysaml2 (the assertion's fields).

  verify.py jwt  <assertion> <jwks.json> <issuer> <audience> <subject>
  verify.py saml <assertion.xml> <metadata.xml> <issuer> <audience> <recipient> <name-id>

Exits 0 when every check passes; otherwise prints what failed on stderr and exits 1.
Debian's interpreter and packages: python3-authlib, python3-pysaml2, xmlsec1."""
import base64
import datetime
import os
import subprocess
import sys
import tempfile


def fail(message):
    print("verify.py: " + message, file=sys.stderr)
    sys.exit(1)


def check_jwt(path, jwks_path, issuer, audience, subject):
    from authlib.jose import JsonWebKey, jwt
    from authlib.jose.errors import JoseError

    token = open(path).read().strip()
    keys = JsonWebKey.import_key_set(open(jwks_path).read())
    options = {
        "iss": {"essential": True, "value": issuer},
        "aud": {"essential": True, "value": audience},
        "sub": {"essential": True, "value": subject},
        "exp": {"essential": True},
        "jti": {"essential": True},
    }
    try:
        claims = jwt.decode(token, keys, claims_options=options)
        claims.validate()
    except JoseError as error:
        fail(f"the JWT assertion was refused by Authlib: {error}")
    if claims["exp"] - claims.get("iat", claims["exp"]) > 600:
        fail("the JWT assertion lives longer than ten minutes")


def check_saml(path, metadata_path, issuer, audience, recipient, name_id):
    from saml2 import md, saml

    descriptor = md.entity_descriptor_from_string(open(metadata_path).read())
    if descriptor is None or descriptor.entity_id != issuer:
        fail("the metadata's entityID is not the assertion's issuer")
    certificates = [
        data.x509_certificate.text.strip()
        for role in descriptor.idpsso_descriptor
        for key in role.key_descriptor
        for data in key.key_info.x509_data
    ]
    if not certificates:
        fail("the metadata holds no certificate")
    with tempfile.TemporaryDirectory() as scratch:
        pem = os.path.join(scratch, "cert.pem")
        body = "\n".join(certificates[0][i:i + 64] for i in range(0, len(certificates[0]), 64))
        open(pem, "w").write(f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n")
        result = subprocess.run(
            ["xmlsec1", "--verify", "--pubkey-cert-pem", pem, "--id-attr:ID", "urn:oasis:names:tc:SAML:2.0:assertion:Assertion", path],
            capture_output=True, text=True)
        if result.returncode != 0:
            fail(f"xmlsec1 did not verify the SAML assertion: {result.stderr.strip()[-400:]}")
    assertion = saml.assertion_from_string(open(path).read())
    if assertion is None:
        fail("pysaml2 cannot read the SAML assertion")
    if assertion.issuer.text != issuer:
        fail(f"Issuer is {assertion.issuer.text!r}")
    if assertion.subject.name_id.text != name_id:
        fail(f"NameID is {assertion.subject.name_id.text!r}")
    confirmation = assertion.subject.subject_confirmation[0]
    if confirmation.method != saml.SCM_BEARER or confirmation.subject_confirmation_data.recipient != recipient:
        fail("the subject confirmation is not bearer to the token endpoint")
    audiences = [a.text for r in assertion.conditions.audience_restriction for a in r.audience]
    if audiences != [audience]:
        fail(f"Audience is {audiences!r}")
    now = datetime.datetime.now(datetime.timezone.utc)
    until = datetime.datetime.fromisoformat(assertion.conditions.not_on_or_after.replace("Z", "+00:00"))
    if not now < until <= now + datetime.timedelta(minutes=10):
        fail("Conditions/NotOnOrAfter is not within the next ten minutes")


if len(sys.argv) == 7 and sys.argv[1] == "jwt":
    check_jwt(*sys.argv[2:])
elif len(sys.argv) == 8 and sys.argv[1] == "saml":
    check_saml(*sys.argv[2:])
else:
    fail(__doc__)
print("verified")

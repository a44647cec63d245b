<?php
/*
 * The one SP this IdP knows: the pysaml2 SP as seen through Parley.
 * Exactly ONE AssertionConsumerService is registered:
 *   {PARLEY_PUBLIC_URL}/web/{DESTINATION}/saml/acs
 */
$p = json_decode(file_get_contents(__DIR__ . '/../params.json'), true);

$metadata[$p['sp_entity_id']] = [
    'AssertionConsumerService' => [
        [
            'Binding' => 'urn:oasis:names:tc:SAML:2.0:bindings:HTTP-POST',
            'Location' => $p['registered_acs'],
            'index' => 0,
        ],
    ],
    // The SP's signing certificate (base64 DER, no PEM armour).
    'certData' => $p['sp_cert_data'],

    // Refuse unsigned AuthnRequests (HTTP-Redirect: SigAlg + Signature query parameters).
    'validate.authnrequest' => true,
    'redirect.validate' => true,

    'signature.algorithm' => 'http://www.w3.org/2001/04/xmldsig-more#rsa-sha256',
    'saml20.sign.response' => true,
    'saml20.sign.assertion' => true,

    'NameIDFormat' => 'urn:oasis:names:tc:SAML:1.1:nameid-format:unspecified',
    'simplesaml.nameidattribute' => 'uid',
    'simplesaml.attributes' => true,
];

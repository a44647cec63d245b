<?php
/*
 * Router for PHP's built-in web server in front of SimpleSAMLphp's www/.
 *
 * Everything is passed through unchanged (return false), except one check on
 * the SSO endpoint: SimpleSAMLphp 1.19 does NOT refuse an AuthnRequest whose
 * AssertionConsumerServiceURL is not registered in the SP's metadata; it logs
 * "Authentication request specifies invalid AssertionConsumerService" and
 * quietly posts the response to the registered default ACS instead. Enterprise
 * IdPs (ADFS, Entra ID, SAP IAS, Okta) refuse such a request with an error
 * page. This gate gives the fixture that strict behaviour: an AuthnRequest for
 * a known SP with an AssertionConsumerServiceURL that is not one of the
 * registered ones gets HTTP 400 and no login page.
 * Set SAML_FIXTURE_STRICT_ACS=0 in start.sh's environment to see
 * SimpleSAMLphp's own lenient behaviour.
 */

$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);

if ($path === '/saml2/idp/SSOService.php' && getenv('SAML_FIXTURE_STRICT_ACS') !== '0') {
    $raw = null;
    $deflated = false;
    if (isset($_GET['SAMLRequest'])) {          // HTTP-Redirect binding
        $raw = base64_decode($_GET['SAMLRequest'], true);
        $deflated = true;
    } elseif (isset($_POST['SAMLRequest'])) {   // HTTP-POST binding
        $raw = base64_decode($_POST['SAMLRequest'], true);
    }
    if (is_string($raw) && $raw !== '') {
        $xml = $deflated ? @gzinflate($raw) : $raw;
        $doc = new DOMDocument();
        if (is_string($xml) && @$doc->loadXML($xml, LIBXML_NONET)) {
            $root = $doc->documentElement;
            $acs = $root->hasAttribute('AssertionConsumerServiceURL')
                ? $root->getAttribute('AssertionConsumerServiceURL') : null;
            $issuer = null;
            foreach ($root->childNodes as $n) {
                if ($n instanceof DOMElement && $n->localName === 'Issuer') {
                    $issuer = trim($n->textContent);
                }
            }
            $p = json_decode(file_get_contents(__DIR__ . '/params.json'), true);
            if (
                $root->localName === 'AuthnRequest'
                && $issuer === $p['sp_entity_id']
                && $acs !== null
                && !in_array($acs, [$p['registered_acs']], true)
            ) {
                error_log('simplesamlphp fixture gate: REFUSED AuthnRequest from ' . $issuer
                    . ': AssertionConsumerServiceURL ' . var_export($acs, true)
                    . ' is not registered (registered: ' . $p['registered_acs'] . ')');
                http_response_code(400);
                header('Content-Type: text/html; charset=utf-8');
                $h = function ($s) { return htmlspecialchars($s, ENT_QUOTES, 'UTF-8'); };
                echo "<!DOCTYPE html>\n<html><head><title>Invalid AssertionConsumerServiceURL</title></head><body>\n"
                    . "<h1 id=\"saml-error\">Invalid AssertionConsumerServiceURL</h1>\n"
                    . '<p>The AuthnRequest from <code>' . $h($issuer) . '</code> asks for the response at <code id="requested-acs">'
                    . $h($acs) . "</code>, which is not registered in this service provider's metadata.</p>\n"
                    . '<p>Registered: <code id="registered-acs">' . $h($p['registered_acs']) . "</code></p>\n</body></html>\n";
                return true;
            }
        }
    }
}

return false;

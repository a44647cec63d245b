<?php
/*
 * SimpleSAMLphp 1.19 main configuration for Parley's SAML test fixture.
 * start.sh copies this file to <workdir>/idp/config/ and points
 * SIMPLESAMLPHP_CONFIG_DIR there; every per-run value (ports, paths, secrets)
 * comes from <workdir>/idp/params.json, which start.sh writes.
 */
$p = json_decode(file_get_contents(__DIR__ . '/../params.json'), true);
require_once __DIR__ . '/error-page.php';

$config = [
    // Served from the docroot of PHP's built-in server: no /simplesaml/ prefix.
    'baseurlpath' => $p['idp_base'] . '/',
    'certdir' => $p['idp_dir'] . '/cert/',
    'loggingdir' => $p['idp_dir'] . '/log/',
    'datadir' => $p['idp_dir'] . '/data/',
    'tempdir' => $p['idp_dir'] . '/tmp/',
    'metadatadir' => $p['idp_dir'] . '/metadata/',

    'technicalcontact_name' => 'Parley tests',
    'technicalcontact_email' => 'na@example.org',
    'timezone' => 'UTC',

    'secretsalt' => $p['secretsalt'],
    'auth.adminpassword' => $p['adminpassword'],
    'admin.protectindexpage' => false,
    'admin.protectmetadata' => false,
    'admin.checkforupdates' => false,
    'trusted.url.domains' => [],
    'enable.http_post' => false,
    'assertion.allowed_clock_skew' => 180,

    'debug' => ['saml' => false, 'backtraces' => true, 'validatexml' => false],
    'showerrors' => true,
    'errorreporting' => false,
    'production' => true,
    // Error pages keep their HTTP status (500/400/...) instead of 200.
    'errors.show_function' => ['ParleyFixtureErrorPage', 'show'],

    // Everything goes to stderr, which start.sh sends to <workdir>/idp.log.
    'logging.level' => SimpleSAML\Logger::DEBUG,
    'logging.handler' => 'stderr',
    'logging.processname' => 'simplesamlphp',
    'statistics.out' => [],

    'enable.saml20-idp' => true,
    'enable.shib13-idp' => false,
    'enable.adfs-idp' => false,

    'module.enable' => [
        'exampleauth' => true,
        'core' => true,
        'saml' => true,
        'admin' => true,
    ],

    // Plain http on loopback: cookies must not be Secure-only.
    'session.duration' => 8 * 60 * 60,
    'session.datastore.timeout' => 4 * 60 * 60,
    'session.state.timeout' => 60 * 60,
    'session.cookie.name' => 'SimpleSAMLSessionID',
    'session.cookie.lifetime' => 0,
    'session.cookie.path' => '/',
    'session.cookie.domain' => null,
    'session.cookie.secure' => false,
    'session.cookie.samesite' => null,
    'session.phpsession.cookiename' => 'SimpleSAML',
    'session.phpsession.savepath' => $p['idp_dir'] . '/sessions',
    'session.phpsession.httponly' => true,
    'session.authtoken.cookiename' => 'SimpleSAMLAuthToken',
    'session.rememberme.enable' => false,
    'store.type' => 'phpsession',

    'language.default' => 'en',
    'language.available' => ['en'],
    'language.cookie.secure' => false,
    'language.cookie.samesite' => null,

    'theme.use' => 'default',
    'usenewui' => false,
    'template.auto_reload' => false,

    'authproc.idp' => [],
    'authproc.sp' => [],

    'metadata.sources' => [
        ['type' => 'flatfile'],
    ],
    'metadata.sign.enable' => false,
];

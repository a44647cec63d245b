<?php
/* Authentication sources of the fixture IdP: one static test user. */
$config = [
    'admin' => ['core:AdminPassword'],

    'example-userpass' => [
        'exampleauth:UserPass',
        'alice:wonderland' => [
            'uid' => ['alice'],
            'cn' => ['Alice Liddell'],
            'mail' => ['alice@example.org'],
            'eduPersonAffiliation' => ['member'],
        ],
    ],
];

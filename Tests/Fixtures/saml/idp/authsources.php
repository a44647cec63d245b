<?php
/* Authentication sources of the fixture IdP: two static test users (alice, and bob for
   sign-ins as somebody else). */
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
        'bob:builder' => [
            'uid' => ['bob'],
            'cn' => ['Bob Builder'],
            'mail' => ['bob@example.org'],
            'eduPersonAffiliation' => ['member'],
        ],
    ],
];

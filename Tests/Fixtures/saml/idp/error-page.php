<?php
/*
 * SimpleSAMLphp 1.19 renders its error page with HTTP 200 when the old
 * (default) templates are in use: Error::show() only records the status on a
 * Template object that is never sent. 'errors.show_function' is called after
 * the real status (500, or 400 for bad requests, ...) has been set with
 * http_response_code(), so this renders the very same error template but
 * keeps that status.
 */
if (!class_exists('ParleyFixtureErrorPage', false)) {
    class ParleyFixtureErrorPage
    {
        public static function show(\SimpleSAML\Configuration $config, array $data)
        {
            $t = new \SimpleSAML\XHTML\Template($config, 'error.php', 'errors');
            $t->data = array_merge($t->data, $data);
            $t->show();
            exit;
        }
    }
}

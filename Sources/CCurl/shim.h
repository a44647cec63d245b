#ifndef PARLEY_CCURL_SHIM_H
#define PARLEY_CCURL_SHIM_H
#include <curl/curl.h>
#include <sys/prctl.h>

/* Names the calling thread (the curl thread; prctl is variadic). Up to 15 bytes. */
static inline int c_parley_name_this_thread(const char *name) { return prctl(PR_SET_NAME, name, 0, 0, 0); }

/* curl_easy_setopt, curl_easy_getinfo and curl_multi_setopt are variadic:
   Swift cannot call them, so each argument type gets a typed wrapper. */

typedef size_t (*c_parley_curl_data_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*c_parley_curl_xferinfo_cb)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                         curl_off_t ultotal, curl_off_t ulnow);

static inline CURLcode c_parley_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode c_parley_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode c_parley_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode c_parley_easy_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode c_parley_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode c_parley_easy_setopt_blob(CURL *h, CURLoption o, struct curl_blob *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode c_parley_easy_setopt_data_cb(CURL *h, CURLoption o, c_parley_curl_data_cb v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode c_parley_easy_setopt_xferinfo_cb(CURL *h, CURLoption o, c_parley_curl_xferinfo_cb v) { return curl_easy_setopt(h, o, v); }

static inline CURLcode c_parley_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode c_parley_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode c_parley_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }

static inline CURLMcode c_parley_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }
static inline CURLMcode c_parley_multi_setopt_pointer(CURLM *m, CURLMoption o, void *v) { return curl_multi_setopt(m, o, v); }
typedef int (*c_parley_curl_socket_cb)(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp);
typedef int (*c_parley_curl_timer_cb)(CURLM *multi, long timeout_ms, void *userp);
static inline CURLMcode c_parley_multi_setopt_socket_cb(CURLM *m, c_parley_curl_socket_cb v) { return curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, v); }
static inline CURLMcode c_parley_multi_setopt_timer_cb(CURLM *m, c_parley_curl_timer_cb v) { return curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, v); }
static inline curl_socket_t c_parley_socket_timeout(void) { return CURL_SOCKET_TIMEOUT; }

/* Constants that are macros Swift cannot import. */
static inline size_t c_parley_writefunc_pause(void) { return CURL_WRITEFUNC_PAUSE; }
static inline size_t c_parley_readfunc_pause(void) { return CURL_READFUNC_PAUSE; }
static inline size_t c_parley_readfunc_abort(void) { return CURL_READFUNC_ABORT; }
static inline int c_parley_pause_cont(void) { return CURLPAUSE_CONT; }
static inline int c_parley_pause_recv(void) { return CURLPAUSE_RECV; }

/* Added for CurlTransport: seek callback, blob flag, message result, seek results. */
typedef int (*c_parley_curl_seek_cb)(void *userdata, curl_off_t offset, int origin);
static inline CURLcode c_parley_easy_setopt_seek_cb(CURL *h, CURLoption o, c_parley_curl_seek_cb v) { return curl_easy_setopt(h, o, v); }
static inline unsigned int c_parley_blob_copy(void) { return CURL_BLOB_COPY; }
static inline CURLcode c_parley_msg_result(const CURLMsg *m) { return m->data.result; }
static inline int c_parley_seekfunc_ok(void) { return CURL_SEEKFUNC_OK; }
static inline int c_parley_seekfunc_fail(void) { return CURL_SEEKFUNC_FAIL; }
static inline long c_parley_global_all(void) { return CURL_GLOBAL_ALL; }

#endif

/*
 * The libcurl floor (make bench): what libcurl alone costs for the upstream half of a proxied
 * GET, with none of Parley around it. One multi handle keeps IN_FLIGHT transfers going to URL
 * until COUNT have finished, each on a new easy handle (as Parley makes one per upstream
 * call) over kept-alive connections, headers and body read and dropped, and prints the
 * process's CPU time (user + system) per request in microseconds.
 *
 *   curl_floor URL COUNT IN_FLIGHT
 *
 * Exits 1, with a message, when a transfer fails, takes over 10 s or answers other than 2xx.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static size_t drop(char *data, size_t size, size_t count, void *user) {
    (void)data; (void)user;
    return size * count;
}

static CURL *transfer(const char *url) {
    CURL *easy = curl_easy_init();
    if (easy == NULL) return NULL;
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 10000L); /* a stuck upstream fails the run */
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, drop);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, drop);
    return easy;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: curl_floor URL COUNT IN_FLIGHT\n");
        return 64;
    }
    const char *url = argv[1];
    long count = strtol(argv[2], NULL, 10), in_flight = strtol(argv[3], NULL, 10);
    if (count < 1 || in_flight < 1) {
        fprintf(stderr, "curl_floor: COUNT and IN_FLIGHT must be positive\n");
        return 64;
    }
    if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK) return 1;
    CURLM *multi = curl_multi_init();
    if (multi == NULL) return 1;
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, in_flight);

    long started = 0, finished = 0;
    for (; started < in_flight && started < count; started++) {
        CURL *easy = transfer(url);
        if (easy == NULL || curl_multi_add_handle(multi, easy) != CURLM_OK) return 1;
    }
    while (finished < count) {
        int running = 0, queued = 0;
        if (curl_multi_perform(multi, &running) != CURLM_OK) return 1;
        CURLMsg *message;
        while ((message = curl_multi_info_read(multi, &queued)) != NULL) {
            if (message->msg != CURLMSG_DONE) continue;
            CURL *easy = message->easy_handle;
            long status = 0;
            curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
            if (message->data.result != CURLE_OK || status < 200 || status > 299) {
                fprintf(stderr, "curl_floor: %s: %s (status %ld)\n", url, curl_easy_strerror(message->data.result), status);
                return 1;
            }
            curl_multi_remove_handle(multi, easy);
            curl_easy_cleanup(easy);
            finished++;
            if (started < count) {
                CURL *next = transfer(url);
                if (next == NULL || curl_multi_add_handle(multi, next) != CURLM_OK) return 1;
                started++;
            }
        }
        if (finished < count && curl_multi_poll(multi, NULL, 0, 1000, NULL) != CURLM_OK) return 1;
    }
    curl_multi_cleanup(multi);
    curl_global_cleanup();

    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage) != 0) return 1;
    double seconds = (double)usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6
        + (double)usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;
    printf("%.1f\n", seconds * 1e6 / (double)count);
    return 0;
}

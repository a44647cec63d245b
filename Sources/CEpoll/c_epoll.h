#ifndef PARLEY_CEPOLL_H
#define PARLEY_CEPOLL_H
/* epoll for server-floor's LoopCurl (a bench tool): Glibc's Swift module does not bring it. */
#include <sys/epoll.h>
#endif

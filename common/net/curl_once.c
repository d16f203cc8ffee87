/*
 * curl_once.c: libcurl's process-wide initialisation, done once.  See
 * curl_once.h.
 */
#include "net/curl_once.h"

#include <pthread.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static CURLcode init_rc;

static void init(void)
{
    init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

CURLcode curl_once_init(void)
{
    pthread_once(&once, init);
    return init_rc;
}

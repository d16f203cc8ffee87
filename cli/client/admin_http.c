/*
 * admin_http.c: the admin commands' HTTP client (admin_http.h): one request per
 * connection, HTTP/1.0, a deadline on every step.  Not a general client:
 * no redirects, no chunked encoding (our servers send Content-Length or
 * close), no TLS.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli/client/admin_http.h"

#define MAX_RESPONSE (4 * 1024 * 1024)

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until deadline; 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)(left > 1000000 ? 1000000 : left));
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 ? -1 : r > 0;
    }
}

static int connect_to(const char *host, int port, long long deadline, cli_err *err)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0)
        return cli_err_set(err, "cannot resolve %s: %s", host, gai_strerror(rc));
    int fd = -1;
    int last = 0;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
            last = errno;
            close(fd);
            fd = -1;
            continue;
        }
        int w = wait_fd(fd, POLLOUT, deadline);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (w <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            last = w == 0 ? ETIMEDOUT : soerr ? soerr : errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return cli_err_set(err, "cannot connect to %s:%d: %s", host, port, strerror(last));
    return fd;
}

/* Sends len bytes of data before the deadline.  0 or -1 with a reason. */
static int send_all(int fd, const char *host, int port, const char *data, size_t len,
                    long long deadline, cli_err *err)
{
    size_t sent = 0;
    while (sent < len) {
        ssize_t w = send(fd, data + sent, len - sent, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return cli_err_set(err, "sending to %s:%d: %s", host, port, strerror(errno));
        if (wait_fd(fd, POLLOUT, deadline) <= 0)
            return cli_err_set(err, "timed out sending to %s:%d", host, port);
    }
    return 0;
}

/* Reads until the server closes, before the deadline.  0 with *out the
 * NUL-terminated malloc'd response, or -1 with a reason. */
static int recv_all(int fd, const char *host, int port, const char *method, const char *path,
                    int timeout_ms, long long deadline, char **out, cli_err *err)
{
    size_t len = 0, rcap = 4096;
    char *buf = malloc(rcap);
    if (buf == NULL)
        return cli_err_set(err, "out of memory");
    for (;;) {
        if (len + 1 >= rcap) {
            if (rcap >= MAX_RESPONSE) {
                free(buf);
                return cli_err_set(err, "response from %s:%d is larger than %d bytes", host, port,
                                   MAX_RESPONSE);
            }
            char *nb = realloc(buf, rcap * 2);
            if (nb == NULL) {
                free(buf);
                return cli_err_set(err, "out of memory");
            }
            buf = nb;
            rcap *= 2;
        }
        ssize_t r = recv(fd, buf + len, rcap - 1 - len, 0);
        if (r > 0) {
            len += (size_t)r;
            continue;
        }
        if (r == 0)
            break;
        if (errno != EAGAIN && errno != EINTR) {
            free(buf);
            return cli_err_set(err, "reading from %s:%d: %s", host, port, strerror(errno));
        }
        if (wait_fd(fd, POLLIN, deadline) <= 0) {
            free(buf);
            return cli_err_set(err, "%s:%d did not answer %s %s within %d s", host, port, method,
                               path, timeout_ms / 1000);
        }
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

int admin_http(const char *host, int port, const char *method, const char *path, const char *token,
               const char *body, int timeout_ms, int *status, char **resp, cli_err *err)
{
    *resp = NULL;
    long long deadline = now_ms() + timeout_ms;
    size_t blen = body ? strlen(body) : 0;
    size_t cap = 512 + strlen(path) + (token ? strlen(token) : 0) + blen;
    char *req = malloc(cap);
    if (req == NULL)
        return cli_err_set(err, "out of memory");
    int n = snprintf(req, cap,
                     "%s %s HTTP/1.0\r\nHost: %s:%d\r\n%s%s%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     method, path, host, port, token ? "Authorization: Bearer " : "",
                     token ? token : "", token ? "\r\n" : "", blen);
    if (n < 0 || (size_t)n + blen >= cap) {
        free(req);
        return cli_err_set(err, "request too large");
    }
    memcpy(req + n, body ? body : "", blen);
    int fd = connect_to(host, port, deadline, err);
    if (fd < 0) {
        free(req);
        return -1;
    }
    char *buf = NULL;
    int rc = send_all(fd, host, port, req, (size_t)n + blen, deadline, err);
    free(req);
    if (rc == 0)
        rc = recv_all(fd, host, port, method, path, timeout_ms, deadline, &buf, err);
    close(fd);
    if (rc != 0)
        return -1;
    int code = 0;
    char *hdr_end = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/%*d.%*d %d", &code) != 1 || hdr_end == NULL) {
        free(buf);
        return cli_err_set(err, "malformed HTTP response from %s:%d", host, port);
    }
    char *b = hdr_end + 4;
    memmove(buf, b, strlen(b) + 1);
    *status = code;
    *resp = buf;
    return 0;
}

/*
 * probe.c: see probe.h.  A deliberately tiny HTTP/1.0 client: one request per
 * connection, the server closes, and every wait is bounded by poll().
 */
#include "cli/local/probe.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "cli/local/proc.h"

/* Connects to 127.0.0.1:port; returns the socket or -1 (errno set). */
static int probe_connect(int port, long long deadline)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    for (;;) {
        long long left = deadline - proc_now_ms();
        if (left <= 0) {
            close(fd);
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            close(fd);
            errno = soerr ? soerr : errno;
            return -1;
        }
        return fd;
    }
}

bool probe_tcp(int port, int timeout_ms)
{
    int fd = probe_connect(port, proc_now_ms() + timeout_ms);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

/* Waits for fd to be ready for events until deadline; false on timeout. */
static bool probe_wait(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - proc_now_ms();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return false;
        if (r > 0)
            return true;
    }
}

/* One request's context, for its messages and its deadline. */
typedef struct probe_req {
    int port;
    const char *method;
    const char *path;
    int timeout_ms;
    long long deadline;
} probe_req;

/* The request line and headers into head (cap bytes).  Returns their
 * length, or -1 with a reason. */
static int probe_format_head(const probe_req *r, const char *token, bool has_body, size_t body_len,
                             char *head, size_t cap, cli_err *err)
{
    char auth[300] = "";
    if (token != NULL &&
        snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", token) >= (int)sizeof auth)
        return cli_err_set(err, "bearer token too long");
    int head_len;
    if (has_body)
        head_len = snprintf(head, cap,
                            "%s %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n%s"
                            "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                            r->method, r->path, r->port, auth, body_len);
    else
        head_len = snprintf(head, cap, "%s %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n%s\r\n", r->method,
                            r->path, r->port, auth);
    if (head_len < 0 || head_len >= (int)cap)
        return cli_err_set(err, "HTTP path too long");
    return head_len;
}

/* Sends len bytes of data before the deadline.  0 or -1 with a reason. */
static int probe_send(int fd, const probe_req *r, const char *data, size_t len, cli_err *err)
{
    for (size_t sent = 0; sent < len;) {
        if (!probe_wait(fd, POLLOUT, r->deadline))
            return cli_err_set(err, "%s %s on port %d: timed out", r->method, r->path, r->port);
        ssize_t n = send(fd, data + sent, len - sent, MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return cli_err_set(err, "%s %s on port %d: %s", r->method, r->path, r->port,
                               strerror(errno));
        sent += (size_t)n;
    }
    return 0;
}

/* Reads until the server closes, before the deadline.  0 with *out the
 * NUL-terminated malloc'd response the caller frees, or -1 with a reason. */
static int probe_recv_all(int fd, const probe_req *r, char **out, cli_err *err)
{
    size_t cap = 8192, got = 0;
    char *buf = malloc(cap);
    if (buf == NULL)
        return cli_err_set(err, "out of memory");
    for (;;) {
        if (got + 1 >= cap) {
            if (cap >= PROBE_HTTP_MAX_BODY + 4096) {
                cli_err_set(err, "%s %s on port %d: response too large", r->method, r->path,
                            r->port);
                goto fail;
            }
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                cli_err_set(err, "out of memory");
                goto fail;
            }
            buf = bigger;
            cap *= 2;
        }
        if (!probe_wait(fd, POLLIN, r->deadline)) {
            cli_err_set(err, "%s %s on port %d: timed out after %d s", r->method, r->path, r->port,
                        r->timeout_ms / 1000);
            goto fail;
        }
        ssize_t n = recv(fd, buf + got, cap - got - 1, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0) {
            cli_err_set(err, "%s %s on port %d: %s", r->method, r->path, r->port, strerror(errno));
            goto fail;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    *out = buf;
    return 0;
fail:
    free(buf);
    return -1;
}

int probe_http_request(int port, const char *method, const char *path, const char *body,
                       const char *token, int timeout_ms, int *status, char **resp, cli_err *err)
{
    probe_req r = {.port = port,
                   .method = method,
                   .path = path,
                   .timeout_ms = timeout_ms,
                   .deadline = proc_now_ms() + timeout_ms};
    size_t body_len = body ? strlen(body) : 0;
    if (body_len > PROBE_HTTP_MAX_BODY)
        return cli_err_set(err, "%s %s: request body too large", method, path);
    int fd = probe_connect(port, r.deadline);
    if (fd < 0)
        return cli_err_set(err, "connect 127.0.0.1:%d: %s", port, strerror(errno));
    char head[1024];
    char *buf = NULL;
    int rc = -1;
    int head_len = probe_format_head(&r, token, body != NULL, body_len, head, sizeof head, err);
    if (head_len < 0 || probe_send(fd, &r, head, (size_t)head_len, err) != 0 ||
        probe_send(fd, &r, body, body_len, err) != 0 || probe_recv_all(fd, &r, &buf, err) != 0)
        goto out;
    if (sscanf(buf, "HTTP/%*d.%*d %d", status) != 1) {
        cli_err_set(err, "%s %s on port %d: not an HTTP response", method, path, port);
        goto out;
    }
    char *start = strstr(buf, "\r\n\r\n");
    if (start == NULL) {
        cli_err_set(err, "%s %s on port %d: truncated response", method, path, port);
        goto out;
    }
    start += 4;
    memmove(buf, start, strlen(start) + 1);
    *resp = buf;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

int probe_http_get(int port, const char *path, const char *token, int timeout_ms, char **body,
                   cli_err *err)
{
    int status = 0;
    char *resp = NULL;
    if (probe_http_request(port, "GET", path, NULL, token, timeout_ms, &status, &resp, err) != 0)
        return -1;
    if (status != 200) {
        free(resp);
        return cli_err_set(err, "GET %s on port %d: HTTP status %d", path, port, status);
    }
    *body = resp;
    return 0;
}

bool probe_pg_ready(const char *connstr)
{
    char with_timeout[1024];
    snprintf(with_timeout, sizeof with_timeout, "%s connect_timeout=2", connstr);
    return PQping(with_timeout) == PQPING_OK;
}

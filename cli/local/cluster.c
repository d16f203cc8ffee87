/*
 * cluster.c: the cluster state file.  See cluster.h.
 *
 * Not for: deciding what runs; this file only names ports, ids and paths.
 */
#include "cli/local/cluster.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/durable.h"
#include "base/strata_assert.h"
#include "cli/local/proc.h"

/* A state file bigger than this is not ours. */
#define CLUSTER_FILE_MAX (64 * 1024)

/* How long a command waits for another one's cluster lock. */
#define CLUSTER_LOCK_TIMEOUT_MS 300000

int cluster_resolve_dir(const char *dir, char *out, cli_err *err)
{
    if (dir == NULL || dir[0] == '\0')
        return cli_err_set(err, "empty cluster directory");
    if (dir[0] == '/') {
        if (strlen(dir) >= PATH_MAX)
            return cli_err_set(err, "cluster directory path too long");
        strcpy(out, dir);
    } else {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd) == NULL)
            return cli_err_set(err, "getcwd: %s", strerror(errno));
        int n = snprintf(out, PATH_MAX, "%s/%s", cwd, dir);
        if (n < 0 || n >= PATH_MAX)
            return cli_err_set(err, "cluster directory path too long");
    }
    /* Drop trailing slashes and "/." so paths compare equal. */
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/')
        out[--len] = '\0';
    while (len > 2 && strcmp(out + len - 2, "/.") == 0) {
        len -= 2;
        out[len] = '\0';
        while (len > 1 && out[len - 1] == '/')
            out[--len] = '\0';
    }
    return 0;
}

int cluster_path(const cluster *c, const char *rel, char *buf, cli_err *err)
{
    int n = snprintf(buf, PATH_MAX, "%s/%s", c->dir, rel);
    if (n < 0 || n >= PATH_MAX)
        return cli_err_set(err, "path too long: %s/%s", c->dir, rel);
    return 0;
}

void cluster_compute_connstr(const cluster *c, char *buf, size_t len)
{
    snprintf(buf, len, "host=127.0.0.1 port=%d user=%s dbname=postgres", c->compute_port,
             c->pg_user);
}

const cluster_safekeeper *cluster_find_safekeeper(const cluster *c, const char *name)
{
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if (strcmp(c->sk[i].name, name) == 0)
            return &c->sk[i];
    return NULL;
}

static void cluster_name_safekeepers(cluster *c)
{
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        snprintf(c->sk[i].name, sizeof c->sk[i].name, "sk%d", i + 1);
        c->sk[i].id = i + 1;
    }
}

void cluster_set_local_hosts(cluster *c)
{
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        snprintf(c->sk[i].host, sizeof c->sk[i].host, "127.0.0.1");
    snprintf(c->pageserver_host, sizeof c->pageserver_host, "127.0.0.1");
    snprintf(c->compute_listen, sizeof c->compute_listen, "127.0.0.1");
}

void cluster_assign_ports(cluster *c, int port_base)
{
    assert(port_base > 0 && port_base + CLUSTER_PORT_SPAN - 1 <= 65535);
    c->compute_port = port_base;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        c->sk[i].pg_port = port_base + 2 * i + 1;
        c->sk[i].http_port = port_base + 2 * i + 2;
    }
    c->pageserver_pg_port = port_base + 7;
    c->pageserver_http_port = port_base + 8;
}

/* Binds fd to 127.0.0.1:port (0: any); the port bound, or -1. */
static int bind_loopback(int fd, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)port)};
    socklen_t sl = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
        return -1;
    return ntohs(sa.sin_port);
}

/* The first port of the kernel's ephemeral range (ip_local_port_range), or 0
 * when it cannot be read. */
static int ephemeral_low(void)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int lo = 0, hi = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%d %d", &lo, &hi) != 2 || lo < 1 || lo > hi)
        lo = 0;
    fclose(f);
    return lo;
}

/*
 * Picks n distinct free ports on 127.0.0.1.  They come from below the
 * kernel's ephemeral range (from PICK_PORT_MIN up), at a random place: the
 * daemons bind them seconds later (the compute after initdb and the import),
 * and a port from the ephemeral range can meanwhile become the source port of
 * any outgoing connection on the machine (CI saw the compute's port taken so).
 * Each port is held bound until all are picked, so they are distinct; a
 * later bind by the daemon can still race another program choosing ports the
 * same way, which is rare.  Without a usable range below the ephemeral one the
 * kernel chooses (bind to port 0).
 */
#define PICK_PORT_MIN 10000
static int cluster_pick_free_ports(int *ports, int n, cli_err *err)
{
    int fds[CLUSTER_PORT_SPAN];
    assert(n <= CLUSTER_PORT_SPAN);
    int lo = PICK_PORT_MIN, span = ephemeral_low() - PICK_PORT_MIN;
    uint32_t start = 0;
    if (span < 16 * CLUSTER_PORT_SPAN || getrandom(&start, sizeof start, 0) != sizeof start)
        span = 0;
    int rc = 0, opened = 0, next = 0;
    for (; opened < n; opened++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rc = cli_err_set(err, "socket: %s", strerror(errno));
            break;
        }
        fds[opened] = fd;
        int port = -1;
        while (span > 0 && next < span && port < 0)
            port = bind_loopback(fd, lo + (int)((start + (uint32_t)next++) % (uint32_t)span));
        if (port < 0)
            port = bind_loopback(fd, 0);
        if (port < 0) {
            rc = cli_err_set(err, "picking a free port: %s", strerror(errno));
            opened++;
            break;
        }
        ports[opened] = port;
    }
    for (int i = 0; i < opened; i++)
        close(fds[i]);
    return rc;
}

static int cluster_default_pg_user(char *out, size_t len, cli_err *err)
{
    if (geteuid() == 0) {
        /* Postgres refuses root: it runs as Debian's postgres user. */
        snprintf(out, len, "postgres");
        return 0;
    }
    struct passwd *pw = getpwuid(geteuid());
    if (pw == NULL)
        return cli_err_set(err, "no passwd entry for uid %u", (unsigned)geteuid());
    if (strlen(pw->pw_name) >= len)
        return cli_err_set(err, "user name too long: %s", pw->pw_name);
    snprintf(out, len, "%s", pw->pw_name);
    return 0;
}

int cluster_init(const char *dir, int port_base, cluster *c, cli_err *err)
{
    memset(c, 0, sizeof *c);
    if (strlen(dir) >= sizeof c->dir)
        return cli_err_set(err, "cluster directory path too long");
    strcpy(c->dir, dir);
    if (!strata_id_generate(&c->tenant_id) || !strata_id_generate(&c->timeline_id))
        return cli_err_set(err, "getrandom failed while generating ids");
    if (cluster_default_pg_user(c->pg_user, sizeof c->pg_user, err) != 0)
        return -1;
    cluster_name_safekeepers(c);
    cluster_set_local_hosts(c);
    if (port_base > 0) {
        cluster_assign_ports(c, port_base);
        return 0;
    }
    int ports[CLUSTER_PORT_SPAN];
    if (cluster_pick_free_ports(ports, CLUSTER_PORT_SPAN, err) != 0)
        return -1;
    c->compute_port = ports[0];
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        c->sk[i].pg_port = ports[2 * i + 1];
        c->sk[i].http_port = ports[2 * i + 2];
    }
    c->pageserver_pg_port = ports[7];
    c->pageserver_http_port = ports[8];
    return 0;
}

static int json_get_port(const cJSON *obj, const char *key, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 65535 ||
        v->valuedouble != (double)(int)v->valuedouble)
        return -1;
    *out = (int)v->valuedouble;
    return 0;
}

static int json_get_id(const cJSON *obj, const char *key, strata_id *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v) || !strata_id_parse(v->valuestring, out))
        return -1;
    return 0;
}

static int cluster_read_file(const char *path, char **text, cli_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 1;
        return cli_err_set(err, "open %s: %s", path, strerror(errno));
    }
    char *buf = malloc(CLUSTER_FILE_MAX + 1);
    if (buf == NULL) {
        close(fd);
        return cli_err_set(err, "out of memory");
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, CLUSTER_FILE_MAX + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return cli_err_set(err, "read %s: %s", path, strerror(e));
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > CLUSTER_FILE_MAX) {
            close(fd);
            free(buf);
            return cli_err_set(err, "%s is larger than %d bytes", path, CLUSTER_FILE_MAX);
        }
    }
    close(fd);
    buf[len] = '\0';
    *text = buf;
    return 0;
}

/* ---- auth (cluster.h) ---- */

/* A token must be what auth_table_parse accepts: printable, no spaces. */
static bool token_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n >= CLUSTER_TOKEN_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (t[i] <= ' ' || t[i] > '~')
            return false;
    return true;
}

/* Reads D/auth.json into c's tokens.  The daemons check its mode too; we
 * refuse the same files so that a bad one is named before anything starts. */
static int cluster_auth_read(cluster *c, cli_err *err)
{
    char path[PATH_MAX];
    if (cluster_path(c, CLUSTER_AUTH_FILE, path, err) != 0)
        return -1;
    struct stat st;
    if (lstat(path, &st) != 0)
        return cli_err_set(err,
                           "%s: %s (auth is on for this cluster: restore the file, or "
                           "run `strata down` and `strata up` to make new tokens)",
                           path, strerror(errno));
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077) != 0)
        return cli_err_set(err, "%s must be a regular file of mode 0600 (chmod 600 %s)", path,
                           path);
    char *text = NULL;
    int rc = cluster_read_file(path, &text, err);
    if (rc != 0)
        return rc < 0 ? -1 : cli_err_set(err, "%s disappeared", path);
    cJSON *root = cJSON_Parse(text);
    memset(text, 0, strlen(text));
    free(text);
    char tenant[STRATA_ID_HEX_LEN];
    strata_id_format(&c->tenant_id, tenant);
    const cJSON *admin = cJSON_GetObjectItemCaseSensitive(root, "admin_token");
    const cJSON *tenants = cJSON_GetObjectItemCaseSensitive(root, "tenants");
    const cJSON *mine = cJSON_GetObjectItemCaseSensitive(tenants, tenant);
    rc = 0;
    if (!cJSON_IsString(admin) || !token_ok(admin->valuestring) || !cJSON_IsString(mine) ||
        !token_ok(mine->valuestring))
        rc = cli_err_set(err,
                         "%s: expected {\"admin_token\": ..., \"tenants\": {\"%s\": ...}} "
                         "with tokens of 1..64 printable characters",
                         path, tenant);
    else {
        snprintf(c->admin_token, sizeof c->admin_token, "%s", admin->valuestring);
        snprintf(c->tenant_token, sizeof c->tenant_token, "%s", mine->valuestring);
        c->auth = true;
    }
    cJSON_Delete(root);
    return rc;
}

static int new_token(char out[CLUSTER_TOKEN_LEN])
{
    strata_id a, b;
    char ha[STRATA_ID_HEX_LEN], hb[STRATA_ID_HEX_LEN];
    if (!strata_id_generate(&a) || !strata_id_generate(&b))
        return -1;
    snprintf(out, CLUSTER_TOKEN_LEN, "%s%s", strata_id_format(&a, ha), strata_id_format(&b, hb));
    return 0;
}

int cluster_auth_enable(cluster *c, cli_err *err)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    if (cluster_path(c, CLUSTER_AUTH_FILE, path, err) != 0 ||
        cluster_path(c, CLUSTER_AUTH_FILE ".tmp", tmp, err) != 0)
        return -1;
    if (access(path, F_OK) == 0)
        return cluster_auth_read(c, err);
    char admin[CLUSTER_TOKEN_LEN], tenant_token[CLUSTER_TOKEN_LEN], tenant[STRATA_ID_HEX_LEN];
    if (new_token(admin) != 0 || new_token(tenant_token) != 0)
        return cli_err_set(err, "getrandom failed while generating tokens");
    char text[512];
    snprintf(text, sizeof text, "{\"admin_token\": \"%s\",\n \"tenants\": {\"%s\": \"%s\"}}\n",
             admin, strata_id_format(&c->tenant_id, tenant), tenant_token);
    /* 0600 from the start: the tokens are never readable by others (a stale
     * temporary file, which might have another mode, goes first). */
    (void)unlink(tmp);
    int rc = durable_write_file(path, text, strlen(text), 0600);
    memset(text, 0, sizeof text);
    if (rc != 0)
        return cli_err_set(err, "write %s: %s", path, strerror(-rc));
    return cluster_auth_read(c, err);
}

const char *cluster_admin_token(const cluster *c)
{
    return c->auth ? c->admin_token : NULL;
}

int cluster_auth_export(const cluster *c, cli_err *err)
{
    if (!c->auth)
        return 0;
    if (setenv("STRATA_SAFEKEEPER_PASSWORD", c->tenant_token, 1) != 0 ||
        setenv("STRATA_PAGESERVER_PASSWORD", c->tenant_token, 1) != 0 ||
        setenv("PAGESERVER_SAFEKEEPER_PASSWORD", c->admin_token, 1) != 0)
        return cli_err_set(err, "setenv: %s", strerror(errno));
    return 0;
}

/* The keys of cluster.json older files lack: the pageserver's import LSN,
 * the remote store and auth (reading D/auth.json when on).  0 or -1. */
static int cluster_parse_optional(const cJSON *root, const cJSON *pageserver, const char *path,
                                  cluster *c, cli_err *err)
{
    /* Absent until the pageserver has imported the timeline. */
    const cJSON *import_lsn = cJSON_GetObjectItemCaseSensitive(pageserver, "import_lsn");
    if (import_lsn != NULL && !cJSON_IsNull(import_lsn)) {
        if (!cJSON_IsString(import_lsn) ||
            !lsn_parse(import_lsn->valuestring, &c->pageserver_import_lsn))
            return cli_err_set(err, "%s: bad pageserver import_lsn", path);
        c->pageserver_imported = true;
    }
    /* Absent in a cluster.json from before remote storage. */
    const cJSON *remote = cJSON_GetObjectItemCaseSensitive(root, "remote");
    if (remote != NULL) {
        if (!cJSON_IsString(remote) || remote->valuestring[0] == '\0' ||
            strlen(remote->valuestring) >= sizeof c->remote)
            return cli_err_set(
                err, "%s: \"remote\" must be a URL (file:///PATH or s3://BUCKET/PREFIX)", path);
        strcpy(c->remote, remote->valuestring);
    }
    const cJSON *auth = cJSON_GetObjectItemCaseSensitive(root, "auth");
    if (auth != NULL && !cJSON_IsBool(auth))
        return cli_err_set(err, "%s: \"auth\" must be true or false", path);
    if (cJSON_IsTrue(auth) && cluster_auth_read(c, err) != 0)
        return -1;
    return 0;
}

/* The safekeepers array: CLUSTER_SAFEKEEPERS entries in c's order, their
 * ports and node ids.  0 or -1 with a reason. */
static int cluster_parse_safekeepers(const cJSON *sks, const char *path, cluster *c, cli_err *err)
{
    if (!cJSON_IsArray(sks) || cJSON_GetArraySize(sks) != CLUSTER_SAFEKEEPERS)
        return cli_err_set(err, "%s: expected %d safekeepers", path, CLUSTER_SAFEKEEPERS);
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        const cJSON *sk = cJSON_GetArrayItem(sks, i);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(sk, "name");
        if (!cJSON_IsString(name) || strcmp(name->valuestring, c->sk[i].name) != 0 ||
            json_get_port(sk, "pg_port", &c->sk[i].pg_port) != 0 ||
            json_get_port(sk, "http_port", &c->sk[i].http_port) != 0)
            return cli_err_set(err, "%s: bad safekeeper entry %d", path, i + 1);
        /* The node id: i + 1 unless `strata safekeeper replace` gave the
         * safekeeper in this place a new one. */
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(sk, "id");
        if (id != NULL) {
            if (!cJSON_IsNumber(id) || id->valuedouble < 1 || id->valuedouble > 1e9)
                return cli_err_set(err, "%s: bad node id of safekeeper entry %d", path, i + 1);
            c->sk[i].id = (int)id->valuedouble;
        }
    }
    return 0;
}

int cluster_load(const char *dir, cluster *c, cli_err *err)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/%s", dir, CLUSTER_FILE);
    if (n < 0 || n >= (int)sizeof path)
        return cli_err_set(err, "cluster directory path too long");
    char *text = NULL;
    int rc = cluster_read_file(path, &text, err);
    if (rc != 0)
        return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (root == NULL)
        return cli_err_set(err, "%s is not valid JSON", path);

    cluster tmp;
    memset(&tmp, 0, sizeof tmp);
    strcpy(tmp.dir, dir);
    cluster_name_safekeepers(&tmp);
    cluster_set_local_hosts(&tmp);
    rc = -1;
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *user = cJSON_GetObjectItemCaseSensitive(root, "pg_user");
    const cJSON *compute = cJSON_GetObjectItemCaseSensitive(root, "compute");
    const cJSON *pageserver = cJSON_GetObjectItemCaseSensitive(root, "pageserver");
    const cJSON *sks = cJSON_GetObjectItemCaseSensitive(root, "safekeepers");
    if (!cJSON_IsNumber(version) || version->valueint != CLUSTER_FORMAT_VERSION) {
        cli_err_set(err, "%s: unsupported format version", path);
        goto out;
    }
    if (json_get_id(root, "tenant_id", &tmp.tenant_id) != 0 ||
        json_get_id(root, "timeline_id", &tmp.timeline_id) != 0) {
        cli_err_set(err, "%s: bad tenant_id or timeline_id", path);
        goto out;
    }
    if (!cJSON_IsString(user) || user->valuestring[0] == '\0' ||
        strlen(user->valuestring) >= sizeof tmp.pg_user) {
        cli_err_set(err, "%s: bad pg_user", path);
        goto out;
    }
    strcpy(tmp.pg_user, user->valuestring);
    if (json_get_port(compute, "port", &tmp.compute_port) != 0 ||
        json_get_port(pageserver, "pg_port", &tmp.pageserver_pg_port) != 0 ||
        json_get_port(pageserver, "http_port", &tmp.pageserver_http_port) != 0) {
        cli_err_set(err, "%s: bad compute or pageserver ports", path);
        goto out;
    }
    if (cluster_parse_optional(root, pageserver, path, &tmp, err) != 0 ||
        cluster_parse_safekeepers(sks, path, &tmp, err) != 0)
        goto out;
    *c = tmp;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

int cluster_load_dir(const char *dir_arg, cluster *c, cli_err *err)
{
    char dir[PATH_MAX];
    if (cluster_resolve_dir(dir_arg, dir, err) != 0)
        return -1;
    int rc = cluster_load(dir, c, err);
    if (rc == 1)
        strcpy(c->dir, dir);
    return rc;
}

int cluster_load_existing(const char *dir_arg, cluster *c, cli_err *err)
{
    int rc = cluster_load_dir(dir_arg, c, err);
    if (rc == 1)
        return cli_err_set(err, "no cluster under %s (run `strata up --dir %s` first)", c->dir,
                           dir_arg);
    if (rc == 0 && cluster_auth_export(c, err) != 0)
        return -1;
    return rc;
}

int cluster_lock(const char *dir, cli_err *err)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/.lock", dir);
    if (n < 0 || n >= (int)sizeof path)
        return cli_err_set(err, "cluster directory path too long");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return cli_err_set(err, "open %s: %s", path, strerror(errno));
    long long deadline = proc_now_ms() + CLUSTER_LOCK_TIMEOUT_MS;
    bool said = false;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            int e = errno;
            close(fd);
            return cli_err_set(err, "flock %s: %s", path, strerror(e));
        }
        if (proc_now_ms() >= deadline) {
            close(fd);
            return cli_err_set(err, "another strata command holds %s", path);
        }
        if (!said) {
            printf("waiting for another strata command on %s\n", dir);
            fflush(stdout);
            said = true;
        }
        proc_sleep_ms(100);
    }
    return fd;
}

static cJSON *cluster_to_json(const cluster *c)
{
    char tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN];
    cJSON *root = cJSON_CreateObject();
    if (root == NULL)
        return NULL;
    /* Children belong to root as soon as they are added; one Delete frees all. */
    cJSON *compute = cJSON_AddObjectToObject(root, "compute");
    cJSON *pageserver = cJSON_AddObjectToObject(root, "pageserver");
    cJSON *sks = cJSON_AddArrayToObject(root, "safekeepers");
    if (compute == NULL || pageserver == NULL || sks == NULL ||
        !cJSON_AddNumberToObject(root, "version", CLUSTER_FORMAT_VERSION) ||
        !cJSON_AddStringToObject(root, "tenant_id", strata_id_format(&c->tenant_id, tenant)) ||
        !cJSON_AddStringToObject(root, "timeline_id",
                                 strata_id_format(&c->timeline_id, timeline)) ||
        !cJSON_AddStringToObject(root, "pg_user", c->pg_user) ||
        !cJSON_AddNumberToObject(compute, "port", c->compute_port) ||
        !cJSON_AddNumberToObject(pageserver, "pg_port", c->pageserver_pg_port) ||
        !cJSON_AddNumberToObject(pageserver, "http_port", c->pageserver_http_port) ||
        !cJSON_AddBoolToObject(root, "auth", c->auth) ||
        (c->remote[0] != '\0' && !cJSON_AddStringToObject(root, "remote", c->remote)))
        goto fail;
    if (c->pageserver_imported) {
        char lsn[LSN_FMT_LEN];
        if (!cJSON_AddStringToObject(pageserver, "import_lsn",
                                     lsn_format(c->pageserver_import_lsn, lsn)))
            goto fail;
    }
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        cJSON *sk = cJSON_CreateObject();
        if (sk == NULL)
            goto fail;
        if (!cJSON_AddItemToArray(sks, sk)) {
            cJSON_Delete(sk);
            goto fail;
        }
        if (!cJSON_AddStringToObject(sk, "name", c->sk[i].name) ||
            !cJSON_AddNumberToObject(sk, "id", c->sk[i].id) ||
            !cJSON_AddNumberToObject(sk, "pg_port", c->sk[i].pg_port) ||
            !cJSON_AddNumberToObject(sk, "http_port", c->sk[i].http_port))
            goto fail;
    }
    return root;
fail:
    cJSON_Delete(root);
    return NULL;
}

int cluster_pick_free_port(int *port, cli_err *err)
{
    return cluster_pick_free_ports(port, 1, err);
}

int cluster_save(const cluster *c, cli_err *err)
{
    /* A named compute's view holds another timeline and port. */
    STRATA_ASSERT(c->compute_name[0] == '\0');
    char path[PATH_MAX];
    if (cluster_path(c, CLUSTER_FILE, path, err) != 0)
        return -1;
    cJSON *root = cluster_to_json(c);
    if (root == NULL)
        return cli_err_set(err, "out of memory");
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (text == NULL)
        return cli_err_set(err, "out of memory");

    /* The JSON and a final newline, replaced atomically (durable.h). */
    size_t len = strlen(text);
    char *data = malloc(len + 1);
    if (data == NULL) {
        cJSON_free(text);
        return cli_err_set(err, "out of memory");
    }
    memcpy(data, text, len);
    data[len] = '\n';
    cJSON_free(text);
    int rc = durable_write_file(path, data, len + 1, 0644);
    free(data);
    if (rc != 0)
        return cli_err_set(err, "write %s: %s", path, strerror(-rc));
    return 0;
}

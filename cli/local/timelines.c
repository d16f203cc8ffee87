/*
 * timelines.c: D/timelines.json, the named timelines and computes.  See
 * timelines.h.
 *
 * Format:
 *   {"timelines": [{"name": "b1", "timeline_id": "<32 hex>",
 *                   "parent": "main", "branch_lsn": "X/Y"}, ...],
 *    "computes": [{"name": "c1", "timeline": "b1", "port": 5433,
 *                  "read_only": false, "lsn": null}, ...]}
 */
#include "cli/local/timelines.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/durable.h"
#include "base/strata_assert.h"

#define TIMELINES_FILE_MAX (1 << 20)

bool timelines_name_ok(const char *name, cli_err *err)
{
    size_t len = strlen(name);
    if (len == 0 || len >= CLUSTER_COMPUTE_NAME_LEN) {
        cli_err_set(err, "a name has 1 to %d characters, not \"%s\"", CLUSTER_COMPUTE_NAME_LEN - 1,
                    name);
        return false;
    }
    if (name[0] == '-' || name[0] == '.') {
        cli_err_set(err, "a name must not start with '%c': \"%s\"", name[0], name);
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        char ch = name[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
        if (!ok) {
            cli_err_set(err, "a name has only letters, digits, '_', '-' and '.', not \"%s\"", name);
            return false;
        }
    }
    return true;
}

static const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int parse_timeline(const cJSON *o, const char *path, timeline_entry *e, cli_err *err)
{
    const char *name = json_str(o, "name"), *id = json_str(o, "timeline_id"),
               *parent = json_str(o, "parent"), *lsn = json_str(o, "branch_lsn");
    memset(e, 0, sizeof *e);
    if (name == NULL || !timelines_name_ok(name, err) || id == NULL ||
        !strata_id_parse(id, &e->id) || parent == NULL || !timelines_name_ok(parent, err) ||
        lsn == NULL || !lsn_parse(lsn, &e->branch_lsn))
        return cli_err_set(err,
                           "%s: a timeline without a valid name, timeline_id, parent and "
                           "branch_lsn",
                           path);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->parent, sizeof e->parent, "%s", parent);
    return 0;
}

static int parse_compute(const cJSON *o, const char *path, compute_entry *e, cli_err *err)
{
    const char *name = json_str(o, "name"), *tl = json_str(o, "timeline");
    const cJSON *port = cJSON_GetObjectItemCaseSensitive(o, "port");
    const cJSON *lsn = cJSON_GetObjectItemCaseSensitive(o, "lsn");
    memset(e, 0, sizeof *e);
    if (name == NULL || !timelines_name_ok(name, err) || tl == NULL ||
        !timelines_name_ok(tl, err) || !cJSON_IsNumber(port) || port->valuedouble < 1 ||
        port->valuedouble > 65535)
        return cli_err_set(err, "%s: a compute without a valid name, timeline and port", path);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->timeline, sizeof e->timeline, "%s", tl);
    e->port = (int)port->valuedouble;
    e->read_only = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "read_only"));
    if (cJSON_IsString(lsn)) {
        if (!lsn_parse(lsn->valuestring, &e->lsn))
            return cli_err_set(err, "%s: compute %s has a bad lsn", path, name);
        e->has_lsn = true;
    }
    return 0;
}

void timelines_defaults(const cluster *c, timeline_registry *r)
{
    memset(r, 0, sizeof *r);
    timeline_entry *main_tl = &r->timelines[r->ntimelines++];
    snprintf(main_tl->name, sizeof main_tl->name, "%s", TIMELINES_MAIN);
    main_tl->id = c->timeline_id;
    main_tl->branch_lsn = c->pageserver_import_lsn;
    compute_entry *dflt = &r->computes[r->ncomputes++];
    snprintf(dflt->name, sizeof dflt->name, "%s", TIMELINES_DEFAULT_COMPUTE);
    snprintf(dflt->timeline, sizeof dflt->timeline, "%s", TIMELINES_MAIN);
    dflt->port = c->compute_port;
}

int timelines_parse(const cluster *c, const char *what, const char *text, size_t len,
                    timeline_registry *r, cli_err *err)
{
    timelines_defaults(c, r);
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return cli_err_set(err, "%s is not a JSON object", what);
    }
    const cJSON *e;
    int rc = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "timelines"))
    {
        timeline_entry t;
        if (rc == 0 && (parse_timeline(e, what, &t, err) != 0 || timelines_add(r, &t, err) != 0))
            rc = -1;
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "computes"))
    {
        compute_entry ce;
        if (rc == 0 &&
            (parse_compute(e, what, &ce, err) != 0 || timelines_add_compute(r, &ce, err) != 0))
            rc = -1;
    }
    cJSON_Delete(root);
    /* Every parent and every compute's timeline is a known timeline. */
    for (int i = 1; rc == 0 && i < r->ntimelines; i++)
        if (timelines_find(r, r->timelines[i].parent) == NULL)
            rc = cli_err_set(err, "%s: timeline %s has an unknown parent %s", what,
                             r->timelines[i].name, r->timelines[i].parent);
    for (int i = 1; rc == 0 && i < r->ncomputes; i++)
        if (timelines_find(r, r->computes[i].timeline) == NULL)
            rc = cli_err_set(err, "%s: compute %s is on an unknown timeline %s", what,
                             r->computes[i].name, r->computes[i].timeline);
    return rc;
}

int timelines_load(const cluster *c, timeline_registry *r, cli_err *err)
{
    timelines_defaults(c, r);
    char path[PATH_MAX];
    if (cluster_path(c, TIMELINES_FILE, path, err) != 0)
        return -1;
    void *data = NULL;
    size_t len = 0;
    int rc = durable_read_file(path, TIMELINES_FILE_MAX, &data, &len);
    if (rc == -ENOENT)
        return 0;
    if (rc != 0)
        return cli_err_set(err, "read %s: %s", path, strerror(-rc));
    rc = timelines_parse(c, path, data, len, r, err);
    free(data);
    return rc;
}

static cJSON *registry_to_json(const timeline_registry *r)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *tls = root ? cJSON_AddArrayToObject(root, "timelines") : NULL;
    cJSON *cs = root ? cJSON_AddArrayToObject(root, "computes") : NULL;
    bool ok = tls != NULL && cs != NULL;
    char id[STRATA_ID_HEX_LEN], lb[LSN_FMT_LEN];
    for (int i = 1; ok && i < r->ntimelines; i++) {
        const timeline_entry *t = &r->timelines[i];
        cJSON *o = cJSON_CreateObject();
        ok = o != NULL && cJSON_AddItemToArray(tls, o) &&
             cJSON_AddStringToObject(o, "name", t->name) &&
             cJSON_AddStringToObject(o, "timeline_id", strata_id_format(&t->id, id)) &&
             cJSON_AddStringToObject(o, "parent", t->parent) &&
             cJSON_AddStringToObject(o, "branch_lsn", lsn_format(t->branch_lsn, lb));
    }
    for (int i = 1; ok && i < r->ncomputes; i++) {
        const compute_entry *ce = &r->computes[i];
        cJSON *o = cJSON_CreateObject();
        ok = o != NULL && cJSON_AddItemToArray(cs, o) &&
             cJSON_AddStringToObject(o, "name", ce->name) &&
             cJSON_AddStringToObject(o, "timeline", ce->timeline) &&
             cJSON_AddNumberToObject(o, "port", ce->port) &&
             cJSON_AddBoolToObject(o, "read_only", ce->read_only) &&
             (ce->has_lsn ? cJSON_AddStringToObject(o, "lsn", lsn_format(ce->lsn, lb)) != NULL
                          : cJSON_AddNullToObject(o, "lsn") != NULL);
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int timelines_save(const cluster *c, const timeline_registry *r, cli_err *err)
{
    STRATA_ASSERT(r->ntimelines >= 1 && r->ncomputes >= 1);
    char path[PATH_MAX];
    if (cluster_path(c, TIMELINES_FILE, path, err) != 0)
        return -1;
    cJSON *root = registry_to_json(r);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (text == NULL)
        return cli_err_set(err, "out of memory");
    size_t len = strlen(text);
    int rc = durable_write_file(path, text, len, 0644);
    cJSON_free(text);
    if (rc != 0)
        return cli_err_set(err, "write %s: %s", path, strerror(-rc));
    return 0;
}

timeline_entry *timelines_find(timeline_registry *r, const char *name)
{
    for (int i = 0; i < r->ntimelines; i++)
        if (strcmp(r->timelines[i].name, name) == 0)
            return &r->timelines[i];
    return NULL;
}

timeline_entry *timelines_find_id(timeline_registry *r, const strata_id *id)
{
    for (int i = 0; i < r->ntimelines; i++)
        if (strata_id_equal(&r->timelines[i].id, id))
            return &r->timelines[i];
    return NULL;
}

compute_entry *timelines_find_compute(timeline_registry *r, const char *name)
{
    for (int i = 0; i < r->ncomputes; i++)
        if (strcmp(r->computes[i].name, name) == 0)
            return &r->computes[i];
    return NULL;
}

int timelines_add(timeline_registry *r, const timeline_entry *e, cli_err *err)
{
    if (timelines_find(r, e->name) != NULL)
        return cli_err_set(err, "a timeline named %s exists already", e->name);
    if (r->ntimelines >= TIMELINES_MAX)
        return cli_err_set(err, "at most %d timelines", TIMELINES_MAX);
    r->timelines[r->ntimelines++] = *e;
    return 0;
}

int timelines_add_compute(timeline_registry *r, const compute_entry *e, cli_err *err)
{
    if (timelines_find_compute(r, e->name) != NULL)
        return cli_err_set(err, "a compute named %s exists already", e->name);
    if (r->ncomputes >= TIMELINES_MAX)
        return cli_err_set(err, "at most %d computes", TIMELINES_MAX);
    r->computes[r->ncomputes++] = *e;
    return 0;
}

void timelines_remove(timeline_registry *r, const char *name)
{
    for (int i = 1; i < r->ntimelines; i++)
        if (strcmp(r->timelines[i].name, name) == 0) {
            memmove(&r->timelines[i], &r->timelines[i + 1],
                    (size_t)(r->ntimelines - i - 1) * sizeof r->timelines[0]);
            r->ntimelines--;
            return;
        }
}

void timelines_remove_compute(timeline_registry *r, const char *name)
{
    for (int i = 1; i < r->ncomputes; i++)
        if (strcmp(r->computes[i].name, name) == 0) {
            memmove(&r->computes[i], &r->computes[i + 1],
                    (size_t)(r->ncomputes - i - 1) * sizeof r->computes[0]);
            r->ncomputes--;
            return;
        }
}

int timelines_compute_view(const cluster *c, timeline_registry *r, const compute_entry *e,
                           cluster *view, cli_err *err)
{
    *view = *c;
    if (e == &r->computes[0])
        return 0;
    const timeline_entry *t = timelines_find(r, e->timeline);
    if (t == NULL)
        return cli_err_set(err, "compute %s runs on timeline %s, which is not known", e->name,
                           e->timeline);
    snprintf(view->compute_name, sizeof view->compute_name, "%s", e->name);
    view->compute_port = e->port;
    view->timeline_id = t->id;
    view->pageserver_import_lsn = t->branch_lsn;
    return 0;
}

/*
 * s3_xml.c: a small validating XML reader and the S3 response decoders on
 * top of it (s3_xml.h).
 *
 * The reader turns the whole body into a tree of element nodes in one pass
 * (no recursion: an explicit stack bounded by S3XML_MAX_DEPTH).  Only a
 * leaf element keeps text: character data beside child elements must be
 * whitespace, since S3 never mixes them.  Text is decoded (entities,
 * character references) into one buffer no longer than the body.  Then each
 * decoder walks the tree and checks names, counts and value syntax.
 */
#include "net/s3_xml.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most elements one document may hold (a 1000-key listing has about 4000). */
#define XML_MAX_NODES 200000

typedef struct xnode {
    const char *name;
    size_t name_len;
    size_t text_off, text_len; /* into xdoc.text; leaves only */
    int parent, first_child, last_child, next;
} xnode;

typedef struct xdoc {
    xnode *nodes;
    size_t n, cap;
    char *text; /* decoded character data */
    size_t text_len;
    size_t seg; /* where the open element's current run of text starts */
    char *err;
} xdoc;

static int fail(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, S3XML_MAX_ERR, fmt, ap);
    va_end(ap);
    return -EPROTO;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_name_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == ':';
}

static bool is_name_char(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

typedef struct cursor {
    const char *p, *end;
} cursor;

static bool starts(const cursor *c, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(c->end - c->p) >= n && memcmp(c->p, s, n) == 0;
}

static void skip_space(cursor *c)
{
    while (c->p < c->end && is_space(*c->p))
        c->p++;
}

/* Skips past the next occurrence of terminator; false if there is none. */
static bool skip_past(cursor *c, const char *terminator)
{
    size_t n = strlen(terminator);
    while ((size_t)(c->end - c->p) >= n) {
        if (memcmp(c->p, terminator, n) == 0) {
            c->p += n;
            return true;
        }
        c->p++;
    }
    return false;
}

static bool read_name(cursor *c, const char **name, size_t *len)
{
    if (c->p >= c->end || !is_name_start(*c->p))
        return false;
    *name = c->p;
    while (c->p < c->end && is_name_char(*c->p))
        c->p++;
    *len = (size_t)(c->p - *name);
    return true;
}

/* Appends code point cp as UTF-8; false for one XML may not carry. */
static bool put_codepoint(char *out, size_t *len, unsigned long cp)
{
    if (cp == 0 || (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF || cp > 0x10FFFF)
        return false;
    if (cp < 0x80) {
        out[(*len)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*len)++] = (char)(0xC0 | (cp >> 6));
        out[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*len)++] = (char)(0xE0 | (cp >> 12));
        out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*len)++] = (char)(0xF0 | (cp >> 18));
        out[(*len)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*len)++] = (char)(0x80 | (cp & 0x3F));
    }
    return true;
}

/*
 * Decodes the entity at c->p ('&') into out.  Every form is at least as
 * long in the source as its decoding, so out never outgrows the body.
 */
static int read_entity(cursor *c, char *out, size_t *len, char *err)
{
    static const struct {
        const char *src;
        char ch;
    } named[] = {{"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}, {"&apos;", '\''}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (starts(c, named[i].src)) {
            out[(*len)++] = named[i].ch;
            c->p += strlen(named[i].src);
            return 0;
        }
    if (!starts(c, "&#"))
        return fail(err, "unknown entity at offset");
    c->p += 2;
    int base = 10;
    if (c->p < c->end && *c->p == 'x') {
        base = 16;
        c->p++;
    }
    unsigned long cp = 0;
    int digits = 0;
    while (c->p < c->end && *c->p != ';') {
        char d = *c->p;
        int v = (d >= '0' && d <= '9')                 ? d - '0'
                : (base == 16 && d >= 'a' && d <= 'f') ? d - 'a' + 10
                : (base == 16 && d >= 'A' && d <= 'F') ? d - 'A' + 10
                                                       : -1;
        if (v < 0 || ++digits > 8)
            return fail(err, "bad character reference");
        cp = cp * (unsigned long)base + (unsigned long)v;
        c->p++;
    }
    if (c->p >= c->end || digits == 0)
        return fail(err, "unterminated character reference");
    c->p++;
    if (!put_codepoint(out, len, cp))
        return fail(err, "character reference to U+%lX, not allowed in XML", cp);
    return 0;
}

/* Checks that s[0..n) is valid UTF-8 without control characters other than
 * tab, newline and carriage return. */
static bool valid_utf8_text(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        if (b < 0x80) {
            if (b < 0x20 && b != '\t' && b != '\n' && b != '\r')
                return false;
            i++;
            continue;
        }
        size_t extra;
        unsigned long cp;
        if ((b & 0xE0) == 0xC0) {
            extra = 1;
            cp = b & 0x1F;
        } else if ((b & 0xF0) == 0xE0) {
            extra = 2;
            cp = b & 0x0F;
        } else if ((b & 0xF8) == 0xF0) {
            extra = 3;
            cp = b & 0x07;
        } else {
            return false;
        }
        if (i + extra >= n)
            return false;
        for (size_t k = 1; k <= extra; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const unsigned long min_cp[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += extra + 1;
    }
    return true;
}

static int new_node(xdoc *d, const char *name, size_t name_len, int parent)
{
    if (d->n == d->cap) {
        if (d->cap >= XML_MAX_NODES)
            return fail(d->err, "more than %d elements", XML_MAX_NODES);
        size_t cap = d->cap ? d->cap * 2 : 64;
        xnode *nodes = realloc(d->nodes, cap * sizeof *nodes);
        if (nodes == NULL)
            return -ENOMEM;
        d->nodes = nodes;
        d->cap = cap;
    }
    int id = (int)d->n++;
    d->nodes[id] = (xnode){.name = name,
                           .name_len = name_len,
                           .text_off = d->text_len,
                           .parent = parent,
                           .first_child = -1,
                           .last_child = -1,
                           .next = -1};
    if (parent >= 0) {
        xnode *p = &d->nodes[parent];
        if (p->last_child >= 0)
            d->nodes[p->last_child].next = id;
        else
            p->first_child = id;
        p->last_child = id;
    }
    return id;
}

/* Skips the attributes of a start tag up to (not past) '>' or "/>". */
static int skip_attributes(cursor *c, char *err)
{
    for (;;) {
        bool spaced = c->p < c->end && is_space(*c->p);
        skip_space(c);
        if (c->p >= c->end)
            return fail(err, "unterminated start tag");
        if (*c->p == '>' || starts(c, "/>"))
            return 0;
        const char *name;
        size_t len;
        if (!spaced || !read_name(c, &name, &len))
            return fail(err, "bad attribute in start tag");
        skip_space(c);
        if (c->p >= c->end || *c->p != '=')
            return fail(err, "attribute without value");
        c->p++;
        skip_space(c);
        if (c->p >= c->end || (*c->p != '"' && *c->p != '\''))
            return fail(err, "unquoted attribute value");
        char q = *c->p++;
        while (c->p < c->end && *c->p != q) {
            if (*c->p == '<')
                return fail(err, "'<' in attribute value");
            c->p++;
        }
        if (c->p >= c->end)
            return fail(err, "unterminated attribute value");
        c->p++;
    }
}

/* Comments, processing instructions and whitespace outside the root. */
static int skip_misc(cursor *c, char *err)
{
    for (;;) {
        skip_space(c);
        if (starts(c, "<!--")) {
            if (!skip_past(c, "-->"))
                return fail(err, "unterminated comment");
        } else if (starts(c, "<?")) {
            if (!skip_past(c, "?>"))
                return fail(err, "unterminated processing instruction");
        } else {
            return 0;
        }
    }
}

/* Drops the run of text since d->seg inside parent, which has (or is about
 * to get) child elements: it must be whitespace. */
static int drop_blank_run(xdoc *d, int parent)
{
    for (size_t i = d->seg; i < d->text_len; i++)
        if (!is_space(d->text[i]))
            return fail(d->err, "text beside child elements in <%.*s>",
                        (int)d->nodes[parent].name_len, d->nodes[parent].name);
    d->text_len = d->seg;
    d->nodes[parent].text_len = 0;
    return 0;
}

/* Character data up to the next '<': decoded and appended to the text of
 * node cur. */
static int read_text(xdoc *d, cursor *c, int cur)
{
    const char *start = c->p;
    while (c->p < c->end && *c->p != '<') {
        if (*c->p == '&') {
            int rc = read_entity(c, d->text, &d->text_len, d->err);
            if (rc != 0)
                return rc;
            continue;
        }
        if (*c->p == '>' && c->p - start >= 2 && c->p[-1] == ']' && c->p[-2] == ']')
            return fail(d->err, "']]>' in character data");
        d->text[d->text_len++] = *c->p++;
    }
    xnode *n = &d->nodes[cur];
    if (n->first_child < 0) {
        n->text_len = d->text_len - n->text_off;
        return 0;
    }
    return drop_blank_run(d, cur);
}

/* The element at c->p ('<' then a name): its start tag, and for "/>" its end. */
static int read_start_tag(xdoc *d, cursor *c, int *stack, int *depth)
{
    const char *name;
    size_t len;
    c->p++;
    if (!read_name(c, &name, &len))
        return fail(d->err, "bad element name");
    if (*depth >= S3XML_MAX_DEPTH)
        return fail(d->err, "elements nested deeper than %d", S3XML_MAX_DEPTH);
    int parent = *depth > 0 ? stack[*depth - 1] : -1;
    if (parent >= 0) {
        int rc = drop_blank_run(d, parent);
        if (rc != 0)
            return rc;
    }
    int id = new_node(d, name, len, parent);
    if (id < 0)
        return id;
    d->seg = d->text_len;
    int rc = skip_attributes(c, d->err);
    if (rc != 0)
        return rc;
    if (*c->p == '/') {
        c->p += 2;
        return 0;
    }
    c->p++;
    stack[(*depth)++] = id;
    return 0;
}

static int read_end_tag(xdoc *d, cursor *c, int *stack, int *depth)
{
    const char *name;
    size_t len;
    c->p += 2;
    if (!read_name(c, &name, &len))
        return fail(d->err, "bad end tag");
    skip_space(c);
    if (c->p >= c->end || *c->p != '>')
        return fail(d->err, "unterminated end tag");
    c->p++;
    xnode *open = &d->nodes[stack[*depth - 1]];
    if (len != open->name_len || memcmp(name, open->name, len) != 0)
        return fail(d->err, "</%.*s> closes <%.*s>", (int)len, name, (int)open->name_len,
                    open->name);
    (*depth)--;
    d->seg = d->text_len;
    return 0;
}

static void xdoc_free(xdoc *d)
{
    free(d->nodes);
    free(d->text);
    d->nodes = NULL;
    d->text = NULL;
}

/* Parses body into d (root is node 0). */
static int xdoc_parse(xdoc *d, const char *body, size_t len, char *err)
{
    *d = (xdoc){.err = err};
    if (len > S3XML_MAX_BODY)
        return fail(err, "body of %zu bytes, more than %u", len, S3XML_MAX_BODY);
    if (memchr(body, '\0', len) != NULL || !valid_utf8_text((const unsigned char *)body, len))
        return fail(err, "body is not UTF-8 text");
    d->text = malloc(len + 1);
    if (d->text == NULL)
        return -ENOMEM;
    cursor c = {body, body + len};
    int stack[S3XML_MAX_DEPTH];
    int depth = 0;
    int rc = skip_misc(&c, err);
    if (rc == 0 && starts(&c, "<!"))
        rc = fail(err, "DOCTYPE and CDATA are not accepted");
    if (rc == 0 && (c.p >= c.end || *c.p != '<'))
        rc = fail(err, len == 0 ? "empty body" : "no root element");
    if (rc == 0)
        rc = read_start_tag(d, &c, stack, &depth);
    while (rc == 0 && depth > 0) {
        if (c.p >= c.end)
            rc = fail(err, "document ends inside <%.*s>", (int)d->nodes[stack[depth - 1]].name_len,
                      d->nodes[stack[depth - 1]].name);
        else if (starts(&c, "</"))
            rc = read_end_tag(d, &c, stack, &depth);
        else if (starts(&c, "<!--"))
            rc = skip_past(&c, "-->") ? 0 : fail(err, "unterminated comment");
        else if (starts(&c, "<?"))
            rc = skip_past(&c, "?>") ? 0 : fail(err, "unterminated processing instruction");
        else if (starts(&c, "<!"))
            rc = fail(err, "DOCTYPE and CDATA are not accepted");
        else if (*c.p == '<')
            rc = read_start_tag(d, &c, stack, &depth);
        else
            rc = read_text(d, &c, stack[depth - 1]);
    }
    if (rc == 0)
        rc = skip_misc(&c, err);
    if (rc == 0 && c.p != c.end)
        rc = fail(err, "content after the root element");
    if (rc != 0)
        xdoc_free(d);
    return rc;
}

static bool name_is(const xnode *n, const char *name)
{
    return n->name_len == strlen(name) && memcmp(n->name, name, n->name_len) == 0;
}

/* The only child of parent named name: its id, -1 if absent, -2 if repeated. */
static int child(const xdoc *d, int parent, const char *name)
{
    int found = -1;
    for (int i = d->nodes[parent].first_child; i >= 0; i = d->nodes[i].next)
        if (name_is(&d->nodes[i], name)) {
            if (found >= 0)
                return -2;
            found = i;
        }
    return found;
}

/* The text of leaf n as a malloc'd string; NULL if n has children. */
static char *text_dup(const xdoc *d, int n)
{
    const xnode *x = &d->nodes[n];
    if (x->first_child >= 0)
        return NULL;
    char *s = malloc(x->text_len + 1);
    if (s != NULL) {
        memcpy(s, d->text + x->text_off, x->text_len);
        s[x->text_len] = '\0';
    }
    return s;
}

/* Copies the text of leaf n into buf (truncated to cap-1 bytes). */
static void text_copy(const xdoc *d, int n, char *buf, size_t cap)
{
    const xnode *x = &d->nodes[n];
    size_t len = x->first_child >= 0 ? 0 : x->text_len;
    if (len >= cap)
        len = cap - 1;
    memcpy(buf, d->text + x->text_off, len);
    buf[len] = '\0';
}

/* Finds the single leaf child name of parent; -EPROTO if absent or repeated
 * or not a leaf (when required), else its id or -1 (optional and absent). */
static int leaf(const xdoc *d, int parent, const char *name, bool required, char *err)
{
    int n = child(d, parent, name);
    if (n == -2)
        return fail(err, "<%s> repeated", name);
    if (n == -1)
        return required ? fail(err, "<%s> missing", name) : -1;
    if (d->nodes[n].first_child >= 0)
        return fail(err, "<%s> has child elements", name);
    return n;
}

static int parse_u64(const xdoc *d, int n, uint64_t *out)
{
    const xnode *x = &d->nodes[n];
    const char *s = d->text + x->text_off;
    if (x->text_len == 0 || x->text_len > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < x->text_len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t digit = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    *out = v;
    return 0;
}

static int parse_bool(const xdoc *d, int n, bool *out)
{
    const xnode *x = &d->nodes[n];
    const char *s = d->text + x->text_off;
    if (x->text_len == 4 && memcmp(s, "true", 4) == 0)
        *out = true;
    else if (x->text_len == 5 && memcmp(s, "false", 5) == 0)
        *out = false;
    else
        return -1;
    return 0;
}

/* Checks that the root of a parsed d is named root and holds no text. */
static int check_root(const xdoc *d, const char *root, char *err)
{
    if (!name_is(&d->nodes[0], root))
        return fail(err, "root element <%.*s>, expected <%s>", (int)d->nodes[0].name_len,
                    d->nodes[0].name, root);
    for (size_t i = 0; i < d->nodes[0].text_len; i++)
        if (!is_space(d->text[d->nodes[0].text_off + i]))
            return fail(err, "text in <%s>", root);
    return 0;
}

static int open_root(xdoc *d, const char *body, size_t len, const char *root, char *err)
{
    int rc = xdoc_parse(d, body, len, err);
    if (rc == 0 && (rc = check_root(d, root, err)) != 0)
        xdoc_free(d);
    return rc;
}

void s3xml_list_page_free(s3xml_list_page *page)
{
    for (size_t i = 0; i < page->n; i++)
        free(page->entries[i].key);
    free(page->entries);
    free(page->next_token);
    *page = (s3xml_list_page){0};
}

static int list_entry(const xdoc *d, int contents, s3xml_list_entry *e, char *err)
{
    int key = leaf(d, contents, "Key", true, err);
    int size = key < 0 ? key : leaf(d, contents, "Size", true, err);
    if (size < 0)
        return size;
    if (d->nodes[key].text_len == 0)
        return fail(err, "empty <Key>");
    if (memchr(d->text + d->nodes[key].text_off, '\0', d->nodes[key].text_len) != NULL)
        return fail(err, "NUL in <Key>");
    if (parse_u64(d, size, &e->size) != 0)
        return fail(err, "<Size> is not a decimal number");
    e->key = text_dup(d, key);
    return e->key == NULL ? -ENOMEM : 0;
}

int s3xml_parse_list(const char *body, size_t len, s3xml_list_page *out, char err[S3XML_MAX_ERR])
{
    *out = (s3xml_list_page){0};
    xdoc d;
    int rc = open_root(&d, body, len, "ListBucketResult", err);
    if (rc != 0)
        return rc;
    size_t count = 0;
    for (int i = d.nodes[0].first_child; i >= 0; i = d.nodes[i].next)
        count += name_is(&d.nodes[i], "Contents");
    if (count > 0 && (out->entries = calloc(count, sizeof *out->entries)) == NULL)
        rc = -ENOMEM;
    for (int i = d.nodes[0].first_child; rc == 0 && i >= 0; i = d.nodes[i].next)
        if (name_is(&d.nodes[i], "Contents")) {
            rc = list_entry(&d, i, &out->entries[out->n], err);
            if (rc == 0)
                out->n++;
        }
    int trunc = rc == 0 ? leaf(&d, 0, "IsTruncated", true, err) : rc;
    if (trunc >= 0 && parse_bool(&d, trunc, &out->truncated) != 0)
        trunc = fail(err, "<IsTruncated> is neither true nor false");
    rc = trunc < 0 ? trunc : 0;
    int token = rc == 0 ? leaf(&d, 0, "NextContinuationToken", false, err) : -1;
    if (rc == 0 && token < -1)
        rc = token;
    if (rc == 0 && out->truncated) {
        if (token < 0 || d.nodes[token].text_len == 0)
            rc = fail(err, "truncated listing without <NextContinuationToken>");
        else if ((out->next_token = text_dup(&d, token)) == NULL)
            rc = -ENOMEM;
    }
    if (rc == 0 && out->truncated && out->n == 0 && child(&d, 0, "CommonPrefixes") == -1)
        rc = fail(err, "truncated listing with no entries");
    xdoc_free(&d);
    if (rc != 0)
        s3xml_list_page_free(out);
    return rc;
}

int s3xml_parse_initiate(const char *body, size_t len, char *upload_id, size_t cap,
                         char err[S3XML_MAX_ERR])
{
    xdoc d;
    int rc = open_root(&d, body, len, "InitiateMultipartUploadResult", err);
    if (rc != 0)
        return rc;
    int id = leaf(&d, 0, "UploadId", true, err);
    rc = id < 0 ? id : 0;
    if (rc == 0) {
        const xnode *x = &d.nodes[id];
        if (x->text_len == 0 || x->text_len >= cap)
            rc = fail(err, "<UploadId> of %zu bytes", x->text_len);
        for (size_t i = 0; rc == 0 && i < x->text_len; i++) {
            char ch = d.text[x->text_off + i];
            if (ch <= ' ' || ch > '~')
                rc = fail(err, "<UploadId> holds a non-printable byte");
        }
        if (rc == 0)
            text_copy(&d, id, upload_id, cap);
    }
    xdoc_free(&d);
    return rc;
}

static int error_fields(const xdoc *d, int parent, s3xml_error *e, char *err)
{
    int code = leaf(d, parent, "Code", true, err);
    if (code < 0)
        return code;
    int message = leaf(d, parent, "Message", false, err);
    if (message < -1)
        return message;
    if (d->nodes[code].text_len == 0)
        return fail(err, "empty <Code>");
    text_copy(d, code, e->code, sizeof e->code);
    if (message >= 0)
        text_copy(d, message, e->message, sizeof e->message);
    return 0;
}

int s3xml_parse_error(const char *body, size_t len, s3xml_error *e, char err[S3XML_MAX_ERR])
{
    *e = (s3xml_error){.code = ""};
    xdoc d;
    int rc = open_root(&d, body, len, "Error", err);
    if (rc != 0)
        return rc;
    rc = error_fields(&d, 0, e, err);
    xdoc_free(&d);
    return rc;
}

int s3xml_parse_complete(const char *body, size_t len, s3xml_error *e, char err[S3XML_MAX_ERR])
{
    *e = (s3xml_error){.code = ""};
    xdoc d;
    int rc = xdoc_parse(&d, body, len, err);
    if (rc != 0)
        return rc;
    bool is_error = name_is(&d.nodes[0], "Error");
    rc = check_root(&d, is_error ? "Error" : "CompleteMultipartUploadResult", err);
    if (rc == 0 && is_error) {
        rc = error_fields(&d, 0, e, err);
        rc = rc == 0 ? 1 : rc;
    } else if (rc == 0) {
        int key = leaf(&d, 0, "Key", false, err);
        rc = key < -1 ? key : 0;
    }
    xdoc_free(&d);
    return rc;
}

int s3xml_parse_delete(const char *body, size_t len, s3xml_delete_result *out,
                       char err[S3XML_MAX_ERR])
{
    *out = (s3xml_delete_result){0};
    xdoc d;
    int rc = open_root(&d, body, len, "DeleteResult", err);
    if (rc != 0)
        return rc;
    for (int i = d.nodes[0].first_child; rc == 0 && i >= 0; i = d.nodes[i].next) {
        if (name_is(&d.nodes[i], "Deleted")) {
            int key = leaf(&d, i, "Key", true, err);
            rc = key < 0 ? key : 0;
            out->deleted++;
        } else if (name_is(&d.nodes[i], "Error")) {
            s3xml_error e = {.code = ""};
            int key = leaf(&d, i, "Key", true, err);
            rc = key < 0 ? key : error_fields(&d, i, &e, err);
            if (rc == 0 && out->errors++ == 0) {
                text_copy(&d, key, out->first_error_key, sizeof out->first_error_key);
                out->first_error = e;
            }
        } else {
            rc = fail(err, "unexpected <%.*s> in <DeleteResult>", (int)d.nodes[i].name_len,
                      d.nodes[i].name);
        }
    }
    xdoc_free(&d);
    return rc;
}

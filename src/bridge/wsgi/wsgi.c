/* The WSGI bridge: the per-server bridge and the synchronous
 * m0_handler that runs the app inline on the loop thread with the GIL held.
 *
 * One request: reuse (or make) the start_response / write / wsgi.input trio,
 * build the environ (environ.c), call app(environ, start_response) by
 * vectorcall, send the result (a list or tuple of bytes in one writev with
 * the head; a file_wrapper by sendfile; anything else by iteration, chunked
 * when its length is unknown), close the result, then m0_exchange_finish as the
 * very last step: the net layer may dispatch the next pipelined request from
 * inside it, so nothing of this request is touched after it.
 *
 * Re-entrancy: the connection may go away during any call into Python (a
 * signal handler aborting the server): on_event(M0_CONN_CLOSED) clears sr->x
 * and the input's c, and every step re-checks them.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "../../net/workq.h"
#include "internal.h"

static int lookup_attr(PyObject *obj, PyObject *name, PyObject **out)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(obj, name, out);
#else
    return _PyObject_LookupAttr(obj, name, out);
#endif
}

/* --- the per-request trio --- */

static m0_wsgi_input *input_new(m0_wsgi_state *st)
{
    m0_wsgi_input *in = PyObject_New(m0_wsgi_input, st->input_type);
    if (in == NULL)
        return NULL;
    memset((char *)in + sizeof(PyObject), 0, sizeof(*in) - sizeof(PyObject));
    return in;
}

/* Whether the server's own trio may serve the next request: the previous
 * request is over and nothing but the bridge holds any of the three (an app
 * that kept one must never see a later request through it).
 *
 * With the GIL, the refcounts prove it: the bridge holds sr three times
 * (w->sr, write's and early_hints'), early_hints twice (w->hints and the
 * environ template's wsgi.early_hints) and the others once, and no other thread can take a reference
 * while this one holds the GIL. On a free-threaded build a refcount read is
 * no proof of ownership (another thread may be taking a reference from a
 * container, or the count is split between the owner thread's local field
 * and the shared one): there the trio is never reused, each request gets
 * objects no other request ever sees, and the app's references keep them
 * alive as long as it likes. */
static int trio_reusable(const m0_wsgi *w)
{
#ifdef Py_GIL_DISABLED
    (void)w;
    return 0;
#else
    /* The start_response is held by the server and by its wsgi.early_hints. */
    return w->sr != NULL && !w->sr->active && Py_REFCNT(w->sr) == 3 && Py_REFCNT(w->write) == 1 &&
           Py_REFCNT(w->hints) == 2 && Py_REFCNT(w->input) == 1;
#endif
}

/* New references to a start_response, its write() and a wsgi.input for one
 * request: the server's own trio when trio_reusable, else a new one (which
 * becomes the server's). Its wsgi.early_hints (w->hints, which holds the
 * start_response too) goes with it, and into the environ template: every
 * environ copied from it has the new one, with no per-request insert. */
static int trio_acquire(m0_wsgi *w, m0_wsgi_sr **sr, PyObject **wr, m0_wsgi_input **in)
{
    if (!trio_reusable(w)) {
        m0_wsgi_sr *nsr = m0_wsgi_sr_new(w->st);
        PyObject *nwr = nsr != NULL ? m0_wsgi_write_new(w->st, nsr) : NULL;
        PyObject *nh = nwr != NULL ? m0_wsgi_hints_new(w->st, nsr) : NULL;
        m0_wsgi_input *nin = nh != NULL ? input_new(w->st) : NULL;
        if (nin == NULL || PyDict_SetItem(w->template, M0_WSGI_STR(w->st, wsgi_early_hints), nh) < 0) {
            Py_XDECREF(nin);
            Py_XDECREF(nh);
            Py_XDECREF(nwr);
            Py_XDECREF(nsr);
            return -1;
        }
        Py_XSETREF(w->sr, nsr);
        Py_XSETREF(w->write, nwr);
        Py_XSETREF(w->hints, nh);
        Py_XSETREF(w->input, nin);
    }
    *sr = (m0_wsgi_sr *)Py_NewRef(w->sr);
    *wr = Py_NewRef(w->write);
    *in = (m0_wsgi_input *)Py_NewRef(w->input);
    return 0;
}

static void sr_begin(m0_wsgi_sr *sr, m0_wsgi *w, m0_exchange *x, const m0_request *req, PyObject *wr, m0_wsgi_input *in)
{
    sr->w = w;
    sr->x = x;
    sr->input = in;
    sr->write = wr;
    __atomic_store_n(&sr->owner, m0_wsgi_thread(), __ATOMIC_RELAXED);
    __atomic_store_n(&sr->active, 1, __ATOMIC_RELAXED);
    sr->minor_version = req->minor_version;
    sr->informational = (req->flags & M0_REQ_INFORMATIONAL) != 0;
    sr->framed = (req->flags & M0_REQ_FRAMED) != 0;
    sr->is_head = (req->flags & M0_REQ_HEAD) != 0;
    sr->status = 0;
    sr->head_len = 0;
    sr->content_length = -1;
    sr->app_flags = 0;
    sr->head_sent = 0;
    sr->no_body = 0;
    sr->chunked = 0;
    sr->keep_alive = 0;
    sr->overflow = 0;
    sr->write_error = 0;
    sr->sent = 0;
    m0_wsgi_input_reset(in, x, req);
}

static void sr_end(m0_wsgi_sr *sr)
{
    __atomic_store_n(&sr->active, 0, __ATOMIC_RELAXED);
    sr->x = NULL;
    if (sr->input != NULL)
        sr->input->x = NULL;
    sr->input = NULL;
    sr->write = NULL;
    sr->w = NULL;
}

/* Set aside (owner 0: no thread runs it until a resume takes it), or taken
 * by the thread resuming it, which may be another pool thread. Cleared before
 * the connection is set aside: the thread that resumes it may start at once. */
static void sr_own(m0_wsgi_sr *sr, unsigned long owner)
{
    __atomic_store_n(&sr->owner, owner, __ATOMIC_RELAXED);
}

int m0_wsgi_sr_refused(const m0_wsgi_sr *sr, const char *what)
{
    if (!__atomic_load_n(&sr->active, __ATOMIC_RELAXED))
        PyErr_Format(PyExc_RuntimeError, "%s called after its request finished", what);
    else
        PyErr_Format(PyExc_RuntimeError,
                     "%s called from a thread that is not running its request: WSGI's start_response, "
                     "write() and wsgi.early_hints may be called only from the thread that called the "
                     "application (or iterates its response)",
                     what);
    return -1;
}

/* --- the bridge --- */

m0_wsgi *m0_wsgi_new(PyObject *module, const m0_wsgi_options *opts)
{
    m0_module_state *ms = m0_module_state_get(module); // borrowed
    PyObject *script_name = NULL;
    m0_wsgi *w = NULL;

    if (ms->wsgi == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the WSGI bridge is not initialised");
        return NULL;
    }
    if (!PyCallable_Check(opts->app)) {
        PyErr_SetString(PyExc_TypeError, "the WSGI application must be callable");
        return NULL;
    }
    if (!PyUnicode_Check(opts->root_path) || !PyUnicode_Check(opts->url_scheme)) {
        PyErr_SetString(PyExc_TypeError, "root_path and url_scheme must be str");
        return NULL;
    }
    w = PyMem_Calloc(1, sizeof(*w));
    if (w != NULL)
        m0_head_init(&w->head, NULL, 0);
    if (w == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    w->module = Py_NewRef(module);
    w->st = ms->wsgi;
    w->app = Py_NewRef(opts->app);
    w->logger = Py_NewRef(opts->logger != NULL ? opts->logger : Py_None);
    if (opts->errors != NULL && opts->errors != Py_None) {
        w->errors = Py_NewRef(opts->errors);
    } else {
        PyObject *err = PySys_GetObject("stderr"); // borrowed
        w->errors = Py_NewRef(err != NULL ? err : Py_None);
    }
    w->server_header = opts->server_header;
    w->multithread = opts->multithread;
    w->early_hints = opts->early_hints;

    /* root_path as UTF-8 bytes without trailing '/'; SCRIPT_NAME is their
     * latin-1 tunnel, like PATH_INFO. */
    Py_ssize_t rlen;
    const char *root = PyUnicode_AsUTF8AndSize(opts->root_path, &rlen);
    if (root == NULL)
        goto error;
    while (rlen > 0 && root[rlen - 1] == '/')
        rlen--;
    if (rlen > 0 && root[0] != '/') {
        PyErr_SetString(PyExc_ValueError, "root_path must be empty or start with '/'");
        goto error;
    }
    if (rlen > 0) {
        w->root = PyMem_Malloc((size_t)rlen);
        if (w->root == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        memcpy(w->root, root, (size_t)rlen);
        w->root_len = (size_t)rlen;
    }
    script_name = PyUnicode_DecodeLatin1(root, rlen, NULL);
    if (script_name == NULL)
        goto error;
    w->template = m0_wsgi_template_new(w, opts->url_scheme, script_name);
    if (w->template == NULL)
        goto error;
    Py_DECREF(script_name);
    return w;
error:
    Py_XDECREF(script_name);
    m0_wsgi_free(w);
    return NULL;
}

m0_wsgi *m0_wsgi_clone(const m0_wsgi *src)
{
    m0_wsgi *w = PyMem_Calloc(1, sizeof(*w));
    if (w != NULL)
        m0_head_init(&w->head, NULL, 0);
    if (w == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    w->module = Py_NewRef(src->module);
    w->st = src->st;
    w->app = Py_NewRef(src->app);
    w->logger = Py_NewRef(src->logger);
    w->errors = Py_NewRef(src->errors);
    /* A copy of its own: each request copies the template, and on a
     * free-threaded build copying one dict from several threads at once
     * serialises them on the dict's lock. */
    w->template = PyDict_Copy(src->template);
    /* Not src's wsgi.early_hints: this one's first trio puts its own there
     * (trio_acquire), and src's stays reusable (trio_reusable). */
    if (w->template == NULL ||
        PyDict_SetItem(w->template, M0_WSGI_STR(w->st, wsgi_early_hints), M0_WSGI_STR(w->st, empty)) < 0) {
        m0_wsgi_free(w);
        return NULL;
    }
    w->server_header = src->server_header;
    w->multithread = src->multithread;
    w->early_hints = src->early_hints;
    w->pooled = 1;
    if (src->root_len) {
        w->root = PyMem_Malloc(src->root_len);
        if (w->root == NULL) {
            PyErr_NoMemory();
            m0_wsgi_free(w);
            return NULL;
        }
        memcpy(w->root, src->root, src->root_len);
        w->root_len = src->root_len;
    }
    return w;
}

void m0_wsgi_free(m0_wsgi *w)
{
    if (w == NULL)
        return;
    if (w->sr != NULL && w->sr->active)
        sr_end(w->sr);
    Py_CLEAR(w->sr);
    Py_CLEAR(w->write);
    Py_CLEAR(w->hints);
    Py_CLEAR(w->input);
    m0_wsgi_environ_clear_cache(w);
    Py_CLEAR(w->template);
    Py_CLEAR(w->app);
    Py_CLEAR(w->logger);
    Py_CLEAR(w->errors);
    Py_CLEAR(w->module);
    PyMem_Free(w->root);
    m0_head_reset(&w->head);
    PyMem_Free(w);
}

/* --- logging --- */

/* Log msg (a printf-free literal) with the request line and, when exc is not
 * NULL, its traceback: logger.error(msg + " %s %s", method, target,
 * exc_info=exc), or a line and traceback.print_exception on wsgi.errors. */
static void log_error(m0_wsgi *w, const char *msg, const m0_request *req, PyObject *exc)
{
    m0_wsgi_state *st = w->st;
    PyObject *saved = m0_exc_fetch(); /* do not disturb an exception in flight */
    PyObject *fmt = NULL, *method = NULL, *target = NULL, *r = NULL, *line = NULL, *tbmod = NULL;
    PyObject *logger = Py_NewRef(w->logger), *errors = Py_NewRef(w->errors);

    method = PyUnicode_DecodeLatin1(req->method.base, (Py_ssize_t)req->method.len, NULL);
    target = PyUnicode_DecodeLatin1(req->target.base, (Py_ssize_t)req->target.len, NULL);
    if (method == NULL || target == NULL)
        goto error;
    if (logger != Py_None) {
        fmt = PyUnicode_FromFormat("%s: %%s %%s", msg);
        if (fmt == NULL)
            goto error;
        PyObject *args[5] = {logger, fmt, method, target, exc};
        r = PyObject_VectorcallMethod(M0_WSGI_STR(st, error), args, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                      exc != NULL ? st->exc_info_kwnames : NULL);
        if (r == NULL)
            goto error;
    } else if (errors != Py_None) {
        line = PyUnicode_FromFormat("%s: %U %U\n", msg, method, target);
        if (line == NULL)
            goto error;
        r = PyObject_CallMethod(errors, "write", "O", line);
        if (r == NULL)
            goto error;
        Py_CLEAR(r);
        if (exc != NULL) {
            tbmod = PyImport_ImportModule("traceback");
            if (tbmod == NULL)
                goto error;
            PyObject *args[3] = {tbmod, exc, errors};
            r = PyObject_VectorcallMethod(M0_WSGI_STR(st, print_exception), args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                          st->file_kwnames);
            if (r == NULL)
                goto error;
        }
    }
    goto done;
error:
    PyErr_WriteUnraisable(logger);
done:
    Py_XDECREF(r);
    Py_XDECREF(fmt);
    Py_XDECREF(line);
    Py_XDECREF(tbmod);
    Py_XDECREF(method);
    Py_XDECREF(target);
    Py_DECREF(logger);
    Py_DECREF(errors);
    if (saved != NULL)
        m0_exc_restore(saved);
}

/* --- the response --- */

/* result.close() when it has one. -1 with an exception when close raised. */
static int result_close(m0_wsgi *w, PyObject *result)
{
    PyObject *close = NULL, *r = NULL;
    if (PyList_CheckExact(result) || PyTuple_CheckExact(result) || PyBytes_CheckExact(result))
        return 0;
    if (lookup_attr(result, M0_WSGI_STR(w->st, close), &close) < 0)
        return -1;
    if (close == NULL)
        return 0;
    r = PyObject_CallNoArgs(close);
    Py_DECREF(close);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Whether the iterator's response must wait for its peer before the app
 * runs again (its next item): neither the loop thread (inline) nor a pool
 * thread waits on one client, and no byte the app produced stays queued
 * while it runs (nothing would send it). An item's write waits while the
 * peer keeps up (M0_WRITE_PARK); whatever it left queued sets the response
 * aside, and the app is called again once the queue is empty
 * (M0_CONN_WRITABLE after m0_exchange_park). */
static int can_park(const m0_wsgi_sr *sr)
{
    return sr->x != NULL && m0_exchange_write_pending(sr->x) > 0;
}

/* An iterator's turn on the loop's thread (inline): after this many body
 * bytes in one call it is set aside even when the socket took them all (a
 * peer whose window is wide open, on loopback or a LAN, takes megabytes
 * without a pause), and runs again at M0_CONN_WRITABLE, in the loop's next
 * pass: every connection of the loop is served between two turns, as a
 * static file's (M0_FILE_TURN). Sixteen clients downloading an 8 MiB
 * streamed body (64 KiB items) kept a 13-byte request on the same loop
 * waiting 100-180 ms at the 99th percentile without it, 17-22 ms with a
 * turn of 1 MiB, 6-8 ms with 256 KiB; the server's CPU per download rose
 * by about 8% with 256 KiB, 4% with 1 MiB. An HTTP/2 stream has its turn
 * too (a client may open its windows as wide as a socket's); set aside with
 * nothing queued, it goes on in the loop's next pass, its send timeout
 * running meanwhile (h2_int.h, H2_WAKE_PASS). The same sixteen over h2c
 * (h2load): 54-61 ms without a turn, 17-20 ms with 1 MiB, 5-6 ms with
 * 256 KiB, for about 14% more CPU per download (4% with 1 MiB; on
 * loopback the server's sends also pay for waking the client, which a
 * stream sent whole woke less often). A pool thread has no turn: the loop
 * does not wait for it. */
#define M0_WSGI_ITER_TURN (1u << 18)

/* Set the connection aside until its peer reads: parked by the loop thread
 * itself (inline), or handed back to the loop by a pool thread. */
static void conn_set_aside(m0_wsgi *w, m0_exchange *x)
{
    if (w->pooled)
        m0_exchange_set_aside(x);
    else
        m0_exchange_park(x);
}

/* Send the items of it. 0 when it is exhausted (or the peer is gone, or the
 * response overflowed: sr says), 1 when sending stopped for a slow peer (it
 * is kept by the caller), -1 with an exception when the app failed. */
static int iter_send(m0_wsgi_sr *sr, PyObject *it)
{
    PyObject *item = NULL;
    /* An iterator over a list or a tuple (Django's HttpResponse) says in C,
     * running no app code, when it has no item left: the last item is then
     * sent as the response's end (framed with a Content-Length when it is
     * the only one, and left for the loop to send with its batch on a pool
     * thread, m0_exchange_writev_final). */
    int sized = Py_IS_TYPE(it, &PyListIter_Type) || Py_IS_TYPE(it, &PyTupleIter_Type);
    int ended = 0;
    size_t turn = sr->w->pooled ? SIZE_MAX : M0_WSGI_ITER_TURN;
    size_t sent = 0;
    while ((item = PyIter_Next(it)) != NULL) {
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "the application's iterable yielded %.100s, not bytes",
                         Py_TYPE(item)->tp_name);
            goto error;
        }
        size_t len = (size_t)PyBytes_GET_SIZE(item);
        if (len) {
            if (!sr->status) {
                PyErr_SetString(PyExc_RuntimeError,
                                "the application yielded body bytes before calling start_response()");
                goto error;
            }
            struct iovec iov = {PyBytes_AS_STRING(item), len};
            ended = sized && PyObject_LengthHint(it, 1) == 0;
            int rc = m0_wsgi_send(sr, &iov, 1, len, ended, M0_WRITE_PARK);
            if (rc < 0 || sr->overflow || ended)
                break; /* peer gone, past the Content-Length, or sent whole */
            sent += len;
        }
        Py_CLEAR(item);
        if (sr->x == NULL) /* closed while the iterator ran */
            break;
        if (can_park(sr) || sent >= turn)
            return 1;
    }
    Py_CLEAR(item);
    if (PyErr_Occurred())
        return -1;
    if (!sr->status) {
        PyErr_SetString(PyExc_RuntimeError, "the application returned without calling start_response()");
        return -1;
    }
    if (!ended && !sr->write_error && !sr->overflow && sr->x != NULL)
        m0_wsgi_send(sr, NULL, 0, 0, 1, M0_WRITE_PARK);
    return 0;
error:
    Py_XDECREF(item);
    return -1;
}

/* Drop result_send's snapshot of a list or tuple result: the tuple, or
 * (snap NULL) the n item references it holds. */
static void snapshot_release(PyObject *snap, PyObject *const *held, Py_ssize_t n)
{
    if (snap != NULL) {
        Py_DECREF(snap);
        return;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        Py_DECREF(held[i]);
}

/* Send the app's result. 0 when sent, 1 when sending waits for a slow peer
 * (park says how to go on), -1 with an exception when the app failed (raised
 * while iterating, yielded a non-bytes, never called start_response); a
 * write error is not an exception: it is left in sr->write_error. */
static int result_send(m0_wsgi *w, m0_wsgi_sr *sr, PyObject *result, m0_wsgi_resume *park)
{
    if ((PyList_CheckExact(result) || PyTuple_CheckExact(result)) && sr->status) {
        /* All bytes: the total is known, so Content-Length, and groups of
         * pieces per writev (the first with the head). A blocking write
         * drops the GIL while it waits for the peer, and another thread may
         * then change the list (a cache refreshed): the pieces are sent from
         * a snapshot that holds its own references (a tuple, which nothing
         * can change; a tuple result is one already, held by the caller), so
         * the response is the list as the app returned it. A list that one
         * writev takes whole (the common one item) needs no tuple: its items'
         * own references, taken before any write, are the snapshot. */
        PyObject *held[M0_WSGI_SEND_PIECES_MAX];
        PyObject *snap = NULL;
        PyObject *const *items;
        Py_ssize_t n;
        if (PyList_CheckExact(result) && PyList_GET_SIZE(result) <= M0_WSGI_SEND_PIECES_MAX) {
            n = PyList_GET_SIZE(result);
            for (Py_ssize_t i = 0; i < n; i++)
                held[i] = Py_NewRef(PyList_GET_ITEM(result, i));
            items = held;
        } else {
            snap = PyList_CheckExact(result) ? PyList_AsTuple(result) : Py_NewRef(result);
            if (snap == NULL)
                return -1;
            n = PyTuple_GET_SIZE(snap);
            items = &PyTuple_GET_ITEM(snap, 0);
        }
        size_t total = 0;
        int all_bytes = 1;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *b = items[i]; // borrowed from the snapshot
            if (!PyBytes_Check(b)) {
                all_bytes = 0;
                break;
            }
            total += (size_t)PyBytes_GET_SIZE(b);
        }
        if (all_bytes) {
            struct iovec iov[M0_WSGI_SEND_PIECES_MAX];
            int k = 0;
            size_t len = 0;
            if (n > M0_WSGI_SEND_PIECES_MAX && !sr->head_sent && sr->content_length < 0 &&
                !(sr->status < 200 || sr->status == 204 || sr->status == 304))
                m0_wsgi_declare_length(sr, total);
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *b = items[i]; // borrowed from the snapshot
                size_t blen = (size_t)PyBytes_GET_SIZE(b);
                if (blen) {
                    iov[k].iov_base = PyBytes_AS_STRING(b);
                    iov[k].iov_len = blen;
                    k++;
                    len += blen;
                }
                if (k == M0_WSGI_SEND_PIECES_MAX && i + 1 < n) {
                    /* only a tuple snapshot has more than one group */
                    if (m0_wsgi_send(sr, iov, k, len, 0, M0_WRITE_PARK) < 0 || sr->overflow) {
                        snapshot_release(snap, held, n);
                        return 0;
                    }
                    k = 0;
                    len = 0;
                }
            }
            m0_wsgi_send(sr, iov, k, len, 1, M0_WRITE_PARK);
            snapshot_release(snap, held, n);
            return 0;
        }
        snapshot_release(snap, held, n);
    } else if (Py_IS_TYPE(result, w->st->file_wrapper_type)) {
        int rc = m0_wsgi_file_wrapper_send(sr, (m0_wsgi_file_wrapper *)result, park);
        if (rc != 0)
            return rc < 0 ? -1 : rc == 2 ? 1 : 0;
    }

    PyObject *it = PyObject_GetIter(result);
    if (it == NULL)
        return -1;
    int rc = iter_send(sr, it);
    if (rc == 1) {
        park->it = it;
        return 1;
    }
    Py_DECREF(it);
    return rc;
}

/* The status of the canned response for a failure before the head, 0 when
 * none can be sent. */
static int error_status(m0_wsgi_sr *sr, const m0_wsgi_input *in)
{
    switch (in->err) {
    case 0:
        return 500;
    case -EFBIG:
        return 413;
    case -EBADMSG:
        return 400;
    case -ETIMEDOUT:
        return 408;
    default:
        (void)sr;
        return 0; /* the peer is gone */
    }
}

/* A request whose response waits for its peer (inline mode), kept as the
 * connection's data until it is finished or the connection closes. */
typedef struct {
    m0_wsgi *w;
    m0_wsgi_sr *sr;    /* strong */
    PyObject *wr;      /* strong */
    m0_wsgi_input *in; /* strong */
    PyObject *result;  /* strong */
    m0_wsgi_resume resume;
    int running; /* resuming: a close during it only clears sr->x */
} m0_wsgi_parked;

/* The end of every request: close the result, log what went wrong, send the
 * canned error when nothing was sent, release the per-request objects and
 * finish the connection (m0_exchange_finish, or m0_exchange_complete on a pool
 * thread). failed: an exception is set (the app failed). Steals sr, wr, in
 * and result (which may be NULL). */
static void request_end(m0_wsgi *w, m0_exchange *x, const m0_request *req, m0_wsgi_sr *sr, PyObject *wr,
                        m0_wsgi_input *in, PyObject *result, int failed, m0_wsgi_sr *outer)
{
    PyObject *exc = NULL, *close_exc = NULL;
    int keep_alive = 0, status = 500, interrupted = 0, cut = 0;

    if (!failed) {
        if (result_close(w, result) < 0) {
            exc = m0_exc_fetch();
            log_error(w, "Exception in the close() of a WSGI response", req, exc);
            Py_CLEAR(exc);
        }
        if (sr->overflow)
            log_error(w, "WSGI response longer than its Content-Length: truncated, connection closed", req, NULL);
        else if (sr->head_sent && !sr->write_error && sr->x != NULL && !m0_wsgi_keep_alive(sr) && !sr->no_body &&
                 sr->content_length >= 0 && sr->sent < (uint64_t)sr->content_length)
            log_error(w, "WSGI response shorter than its Content-Length: connection closed", req, NULL);
        status = sr->status;
        keep_alive = m0_wsgi_keep_alive(sr);
    } else {
        exc = m0_exc_fetch();
        if (result != NULL && result_close(w, result) < 0)
            close_exc = m0_exc_fetch();
        status = sr->head_sent ? sr->status : error_status(sr, in);
        if (exc != NULL && !sr->write_error && in->err == 0 && sr->x != NULL) {
            log_error(w,
                      sr->head_sent
                          ? "Exception in WSGI application after the response head was sent: connection closed"
                          : "Exception in WSGI application",
                      req, exc);
        }
        if (close_exc != NULL) {
            log_error(w, "Exception in the close() of a WSGI response", req, close_exc);
            Py_CLEAR(close_exc);
        }
        if (exc != NULL && PyErr_GivenExceptionMatches(exc, PyExc_KeyboardInterrupt))
            interrupted = 1;
        if (!sr->head_sent && sr->x != NULL && !sr->write_error && status) {
            m0_canned_response out;
            int n = m0_error_response(&out, status, w->server_header);
            if (n > 0) {
                struct iovec iov = {out.buf, (size_t)n};
                if (m0_exchange_writev_final(sr->x, &out.head, &iov, 1, M0_WRITE_PARK) < 0) /* the whole response */
                    sr->write_error = -EPIPE;
            }
        }
        keep_alive = 0;
        cut = sr->head_sent; /* the body stops short: not a response's end (m0_exchange_cut) */
    }
    uint64_t body_bytes = sr->no_body ? 0 : sr->sent;
    Py_CLEAR(exc);
    Py_XDECREF(result);
    m0_exchange *live = sr->x; /* NULL when the peer went away during the request */
    sr_end(sr);
    w->active = outer;
    Py_DECREF(in);
    Py_DECREF(wr);
    Py_DECREF(sr);
    if (interrupted)
        PyErr_SetInterrupt(); /* re-deliver Ctrl-C to the serve loop */
    if (w->pooled) {
        /* The connection is this thread's until it is handed back, closed
         * or not: the loop closes it (no M0_CONN_CLOSED while detached). */
        if (cut)
            m0_exchange_cut(x);
        m0_exchange_complete(x, live != NULL ? keep_alive : 0, status, body_bytes);
    } else if (live != NULL) {
        if (cut)
            m0_exchange_cut(live);
        m0_exchange_finish(live, keep_alive, status, body_bytes);
    }
}

static void parked_free(m0_wsgi_parked *p)
{
    Py_CLEAR(p->resume.it);
    m0_wsgi_resume_release(&p->resume);
    PyMem_Free(p);
}

static int wsgi_on_request(void *ctx, m0_exchange *x, const m0_request *req)
{
    m0_wsgi *w = ctx;
    m0_wsgi_sr *sr = NULL;
    PyObject *wr = NULL;
    m0_wsgi_input *in = NULL;
    PyObject *env = NULL, *result = NULL, *app = NULL;
    m0_wsgi_sr *outer = w->active;
    m0_wsgi_resume resume = {NULL, -1, 0, 0};

    if (trio_acquire(w, &sr, &wr, &in) < 0) {
        PyErr_WriteUnraisable(w->app);
        m0_canned_response out;
        int n = m0_error_response(&out, 500, w->server_header);
        if (n > 0) {
            struct iovec iov = {out.buf, (size_t)n};
            m0_exchange_writev(x, &out.head, &iov, 1, 1);
        }
        if (w->pooled)
            m0_exchange_complete(x, 0, 500, 0);
        else
            m0_exchange_finish(x, 0, 500, 0);
        return 0;
    }
    sr_begin(sr, w, x, req, wr, in);
    w->active = sr;

    env = m0_wsgi_environ_build(w, x, req, (PyObject *)in);
    int failed = env == NULL;
    if (!failed) {
        app = Py_NewRef(w->app);
        PyObject *args[3] = {NULL, env, (PyObject *)sr};
        result = PyObject_Vectorcall(app, args + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_CLEAR(app);
        failed = result == NULL;
    }
    Py_CLEAR(env);
    if (!failed) {
        int rc = result_send(w, sr, result, &resume);
        if (rc == 1 && sr->x != NULL) {
            m0_wsgi_parked *p = PyMem_Calloc(1, sizeof(*p));
            if (p != NULL) {
                p->w = w;
                p->sr = sr;
                p->wr = wr;
                p->in = in;
                p->result = result;
                p->resume = resume;
                w->active = outer;
                sr_own(sr, 0);
                m0_exchange_set_data(x, p);
                conn_set_aside(w, x);
                return 1;
            }
            /* No memory to wait: the rest of the response is dropped. */
            Py_CLEAR(resume.it);
            m0_wsgi_resume_release(&resume);
            sr->write_error = -ENOMEM;
            rc = 0;
        }
        Py_CLEAR(resume.it);
        failed = rc < 0;
    }
    request_end(w, x, req, sr, wr, in, result, failed, outer);
    return 0;
}

/* The peer read enough of a parked response: send more, park again or end. */
static void wsgi_resume(m0_wsgi *w, m0_exchange *x, m0_wsgi_parked *p)
{
    m0_wsgi_sr *sr = p->sr;
    m0_wsgi_sr *outer = w->active;
    w->active = sr;
    sr_own(sr, m0_wsgi_thread());
    p->running = 1;
    int rc = p->resume.it != NULL ? iter_send(sr, p->resume.it) : m0_wsgi_file_send_more(sr, &p->resume);
    p->running = 0;
    if (rc == 2)
        rc = 1;
    if (rc == 1 && sr->x != NULL) {
        w->active = outer;
        sr_own(sr, 0);
        conn_set_aside(w, x);
        return;
    }
    m0_exchange *live = sr->x;
    m0_exchange_set_data(x, NULL); /* c stays allocated while this callback runs, closed or not */
    PyObject *result = p->result;
    m0_wsgi_input *in = p->in;
    PyObject *wr = p->wr;
    parked_free(p);
    request_end(w, live != NULL ? live : x, m0_exchange_request(x), sr, wr, in, result, rc < 0, outer);
}

static void wsgi_on_event(void *ctx, m0_exchange *x, int what)
{
    m0_wsgi *w = ctx;
    m0_wsgi_parked *p = m0_exchange_data(x);
    if (what == M0_CONN_WRITABLE) {
        if (p != NULL && !p->running)
            wsgi_resume(w, x, p);
        return;
    }
    if (what != M0_CONN_CLOSED)
        return;
    m0_wsgi_sr *sr = w->active;
    if (sr != NULL && sr->x == x) {
        sr->x = NULL;
        if (sr->input != NULL)
            sr->input->x = NULL;
    }
    if (p != NULL) {
        /* The peer of a parked response went away. */
        p->sr->x = NULL;
        if (p->sr->input != NULL)
            p->sr->input->x = NULL;
        if (p->running)
            return; /* the resume in progress ends it */
        m0_exchange_set_data(x, NULL);
        m0_wsgi_sr *psr = p->sr;
        PyObject *result = p->result, *wr = p->wr;
        m0_wsgi_input *in = p->in;
        parked_free(p);
        request_end(w, x, m0_exchange_request(x), psr, wr, in, result, 0, w->active);
    }
}

const m0_handler m0_wsgi_handler = {wsgi_on_request, wsgi_on_event, NULL};

/* A pool thread: a queued request, or a set-aside response whose peer read
 * its queue (resumed by whichever thread is free) or went away (its
 * objects released here, with the GIL). */
void m0_wsgi_serve_detached(m0_wsgi *w, m0_exchange *x)
{
    m0_wsgi_parked *p = m0_exchange_data(x);
    if (p == NULL) {
        wsgi_on_request(w, x, m0_exchange_request(x));
        return;
    }
    if (!m0_exchange_closed(x)) {
        wsgi_resume(w, x, p);
        return;
    }
    p->sr->x = NULL;
    if (p->sr->input != NULL)
        p->sr->input->x = NULL;
    m0_exchange_set_data(x, NULL);
    m0_wsgi_sr *psr = p->sr;
    PyObject *result = p->result, *wr = p->wr;
    m0_wsgi_input *in = p->in;
    parked_free(p);
    request_end(w, x, m0_exchange_request(x), psr, wr, in, result, 0, w->active); /* hands c back */
}

/* Inside a pass, on the leader's thread, with or without the GIL
 * (net/workq.h): no Python here. Queue the request for a pool thread. */
static int wsgi_pool_on_request(void *ctx, m0_exchange *x, const m0_request *req)
{
    (void)req;
    m0_workq *q = ctx;
    m0_exchange_detach(x);
    if (m0_workq_push(q, x) < 0) {
        /* No memory for the queue: answer 503 from here and hand it back. */
        m0_canned_response out;
        int n = m0_error_response(&out, 503, 1);
        if (n > 0) {
            struct iovec iov = {out.buf, (size_t)n};
            m0_exchange_writev(x, &out.head, &iov, 1, 0); /* what the socket does not take, the loop flushes */
        }
        m0_exchange_complete(x, 0, 503, 0);
    }
    return 1;
}

/* Loop thread, without the GIL: a set-aside response (its m0_wsgi_parked
 * is the connection's data) goes back to the pool when its peer drained the
 * queue, or when the connection closed (its objects need the GIL). */
static void wsgi_pool_on_event(void *ctx, m0_exchange *x, int what)
{
    m0_workq *q = ctx;
    if (m0_exchange_data(x) == NULL || (what != M0_CONN_WRITABLE && what != M0_CONN_CLOSED))
        return;
    if (what == M0_CONN_CLOSED)
        m0_exchange_hand_closed(x);
    else
        m0_exchange_detach(x);
    if (m0_workq_push(q, x) < 0) {
        /* No memory for the queue: the response's objects stay (a leak),
         * the connection is given up. */
        m0_exchange_set_data(x, NULL);
        m0_exchange_complete(x, 0, 500, 0);
    }
}

const m0_handler m0_wsgi_pool_handler = {wsgi_pool_on_request, wsgi_pool_on_event, NULL};

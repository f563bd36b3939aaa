/* Private to the WSGI bridge (wsgi*.c): module state, the per-server bridge,
 * the per-request objects and the functions the bridge's files share.
 *
 * Per-request objects. start_response (m0_wsgi_sr), its write() callable
 * (m0_wsgi_write) and wsgi.input (m0_wsgi_input) are Python objects created
 * once per server and reused for the next request when nothing but the bridge
 * still references them (refcount check, GIL builds only: see trio_reusable in
 * wsgi.c); otherwise, and always on a free-threaded build, a fresh trio is
 * made, so an app that keeps them never sees a later request. When a request
 * ends the bridge marks its objects inactive: a stale start_response or
 * write() raises, a stale wsgi.input reads b"". start_response, write() and
 * wsgi.early_hints also raise when called from another thread than the one
 * running the request (m0_wsgi_sr_owned).
 *
 * Error convention: NULL or -1 with a Python exception set, unless a comment
 * says otherwise.
 */
#ifndef M0_BRIDGE_WSGI_INTERNAL_H
#define M0_BRIDGE_WSGI_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "../../http/response.h"
#include "../head.h"
#include "../pyerr.h"
#include "../state.h"
#include "../tls_info.h"
#include "wsgi.h"

/* Interned strings: environ keys, constant values and method names. */
#define M0_WSGI_STRINGS(X)                                                                                             \
    X(REQUEST_METHOD, "REQUEST_METHOD")                                                                                \
    X(SCRIPT_NAME, "SCRIPT_NAME")                                                                                      \
    X(PATH_INFO, "PATH_INFO")                                                                                          \
    X(QUERY_STRING, "QUERY_STRING")                                                                                    \
    X(RAW_URI, "RAW_URI")                                                                                              \
    X(SERVER_PROTOCOL, "SERVER_PROTOCOL")                                                                              \
    X(SERVER_NAME, "SERVER_NAME")                                                                                      \
    X(SERVER_PORT, "SERVER_PORT")                                                                                      \
    X(SERVER_SOFTWARE, "SERVER_SOFTWARE")                                                                              \
    X(REMOTE_ADDR, "REMOTE_ADDR")                                                                                      \
    X(REMOTE_PORT, "REMOTE_PORT")                                                                                      \
    X(wsgi_version, "wsgi.version")                                                                                    \
    X(wsgi_url_scheme, "wsgi.url_scheme")                                                                              \
    X(wsgi_input, "wsgi.input")                                                                                        \
    X(wsgi_errors, "wsgi.errors")                                                                                      \
    X(wsgi_multithread, "wsgi.multithread")                                                                            \
    X(wsgi_multiprocess, "wsgi.multiprocess")                                                                          \
    X(wsgi_run_once, "wsgi.run_once")                                                                                  \
    X(wsgi_file_wrapper, "wsgi.file_wrapper")                                                                          \
    X(wsgi_input_terminated, "wsgi.input_terminated")                                                                  \
    X(wsgi_early_hints, "wsgi.early_hints")                                                                            \
    X(empty, "")                                                                                                       \
    X(slash, "/")                                                                                                      \
    X(scheme_http, "http")                                                                                             \
    X(scheme_https, "https")                                                                                           \
    X(HTTPS, "HTTPS")                                                                                                  \
    X(on, "on")                                                                                                        \
    X(http11, "HTTP/1.1")                                                                                              \
    X(http10, "HTTP/1.0")                                                                                              \
    X(http2, "HTTP/2")                                                                                                 \
    X(m_GET, "GET")                                                                                                    \
    X(m_POST, "POST")                                                                                                  \
    X(m_HEAD, "HEAD")                                                                                                  \
    X(m_PUT, "PUT")                                                                                                    \
    X(m_DELETE, "DELETE")                                                                                              \
    X(m_PATCH, "PATCH")                                                                                                \
    X(m_OPTIONS, "OPTIONS")                                                                                            \
    X(close, "close")                                                                                                  \
    X(read, "read")                                                                                                    \
    X(fileno, "fileno")                                                                                                \
    X(error, "error")                                                                                                  \
    X(exc_info, "exc_info")                                                                                            \
    X(file, "file")                                                                                                    \
    X(print_exception, "print_exception")                                                                              \
    X(sep_comma, ", ")                                                                                                 \
    X(sep_semicolon, "; ")

enum {
#define M0_WSGI_STR_ENUM(id, text) M0_WSGI_S_##id,
    M0_WSGI_STRINGS(M0_WSGI_STR_ENUM)
#undef M0_WSGI_STR_ENUM
        M0_WSGI_S_COUNT
};

/* REMOTE_PORT strs kept for reuse: keep-alive connections interleave. */
#define M0_WSGI_PORT_CACHE 64

/* Request headers with a prebuilt environ key (environ.c). */
#define M0_WSGI_HDR_MAX 64

struct m0_wsgi_state {
    PyTypeObject *sr_type;
    PyTypeObject *write_type;
    PyTypeObject *input_type;
    PyTypeObject *file_wrapper_type;
    PyTypeObject *hints_type;
    PyObject *str[M0_WSGI_S_COUNT];
    PyObject *hdr_key[M0_WSGI_HDR_MAX];
    PyObject *exc_info_kwnames; /* ("exc_info",) */
    PyObject *file_kwnames;     /* ("file",) */
};

#define M0_WSGI_STR(st, id) ((st)->str[M0_WSGI_S_##id])

typedef struct m0_wsgi_sr m0_wsgi_sr;
typedef struct m0_wsgi_input m0_wsgi_input;

struct m0_wsgi {
    PyObject *module; /* strong: keeps the state and the types alive */
    m0_wsgi_state *st;
    PyObject *app;      /* strong */
    PyObject *logger;   /* strong, Py_None when none */
    PyObject *errors;   /* strong: wsgi.errors */
    PyObject *template; /* strong: environ template, copied per request */
    char *root;         /* root_path as UTF-8, no trailing '/'; root_len 0 when none */
    size_t root_len;
    int server_header;
    int multithread; /* wsgi.multithread: requests run on a pool of threads */
    int pooled;      /* this copy runs on a pool thread: finish with m0_exchange_complete */
    int early_hints; /* wsgi.early_hints sends its 103 (else it only validates) */

    /* Reusable per-request objects (strong) and the request being served. */
    m0_wsgi_sr *sr;
    PyObject *write;
    PyObject *hints; /* wsgi.early_hints */
    m0_wsgi_input *input;
    m0_wsgi_sr *active; /* borrowed, NULL between requests */

    /* Response head (head.h, no inline storage): its buffer is kept across
     * requests. */
    m0_head head;

    /* Value caches: the str built for the previous request, reused when the
     * bytes are the same (strong or NULL). */
    PyObject *hdr_val[M0_WSGI_HDR_MAX];
    PyObject *path_val;
    PyObject *uri_val;
    PyObject *query_val;
    PyObject *peer_host_val;
    PyObject *local_host_val;
    PyObject *peer_port_val[M0_WSGI_PORT_CACHE]; /* direct-mapped by port: one per live connection */
    PyObject *local_port_val;
    int peer_port[M0_WSGI_PORT_CACHE];
    int local_port;
    m0_tls_info_cache tls_vars; /* each TLS session's SSL_* variables, a dict built once (environ.c) */
};

/* start_response: holds the state of the response being produced. */
struct m0_wsgi_sr {
    PyObject_HEAD vectorcallfunc vectorcall;
    m0_wsgi *w;             /* valid while active */
    m0_exchange *x;         /* NULL once the peer is gone */
    m0_wsgi_input *input;   /* borrowed, valid while active */
    PyObject *write;        /* borrowed, valid while active */
    int active;             /* the request is being served (atomic: read by any thread) */
    unsigned long owner;    /* m0_wsgi_thread() of the thread running the request, 0 while
                               its response waits set aside (atomic: read by any thread) */
    int minor_version;      /* of the request */
    int informational;      /* the request's protocol carries 1xx heads (M0_REQ_INFORMATIONAL) */
    int framed;             /* the transport delimits the body (M0_REQ_FRAMED) */
    int is_head;            /* HEAD request */
    int status;             /* 0 until start_response succeeded */
    size_t head_len;        /* status line + app headers in w->head */
    size_t head_nf;         /* ... and their fields' spans */
    int64_t content_length; /* from the app, -1 when absent */
    unsigned app_flags;     /* M0_WSGI_APP_* */
    int head_sent;
    int no_body;     /* HEAD, 1xx, 204, 304: body bytes are counted, not sent */
    int chunked;     /* framing chosen when the head was built */
    int keep_alive;  /* decided when the head was built */
    int overflow;    /* the app produced more than its Content-Length */
    int write_error; /* -errno of a failed write: the peer is gone */
    uint64_t sent;   /* body bytes produced (sent, or counted when no_body) */
};

enum {
    M0_WSGI_APP_CLOSE = 1u << 0,  /* the app sent Connection: close */
    M0_WSGI_APP_DATE = 1u << 1,   /* the app sent Date */
    M0_WSGI_APP_SERVER = 1u << 2, /* the app sent Server */
};

typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    m0_wsgi_sr *sr; /* strong */
} m0_wsgi_write;

/* wsgi.early_hints (early_hints.c) */
typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    m0_wsgi_sr *sr; /* strong */
} m0_wsgi_hints;

struct m0_wsgi_input {
    PyObject_HEAD m0_exchange *x; /* NULL when the request is over or the peer gone */
    int eof;                      /* the body end was read */
    int err;                      /* -errno of the failed body read, 0 if none */
    int64_t remaining;            /* declared body bytes not yet read, -1 when chunked */
    char *buf;                    /* readahead for readline, allocated on first use */
    size_t pos, len, cap;
    int busy; /* a read is running (it may wait without the GIL): another is refused */
};

typedef struct {
    PyObject_HEAD PyObject *filelike;
    Py_ssize_t blksize;
} m0_wsgi_file_wrapper;

/* environ.c */
int m0_wsgi_environ_init(m0_wsgi_state *st);
PyObject *m0_wsgi_template_new(m0_wsgi *w, PyObject *url_scheme, PyObject *root_path);
PyObject *m0_wsgi_environ_build(m0_wsgi *w, m0_exchange *x, const m0_request *req, PyObject *input);
void m0_wsgi_environ_clear_cache(m0_wsgi *w);

/* input.c */
extern PyType_Spec m0_wsgi_input_spec;
void m0_wsgi_input_reset(m0_wsgi_input *in, m0_exchange *x, const m0_request *req);

/* response.c */
extern PyType_Spec m0_wsgi_sr_spec;
extern PyType_Spec m0_wsgi_write_spec;
/* Send body pieces (after the head when it is not sent yet). final: these are
 * the last bytes of the response (the head may then carry their total as
 * Content-Length, and the last chunk is appended). wait: how the write waits
 * for the peer (net/server.h): M0_WRITE_SENT for write(), after which the app
 * runs on; M0_WRITE_PARK for the bytes of a result, whose caller sets the
 * response aside while bytes stay queued (can_park, wsgi.c) or ends it.
 * Returns 0, or -1 WITHOUT an exception when the peer is gone
 * (sr->write_error says why) or no memory was available for the head. */
#define M0_WSGI_SEND_PIECES_MAX 64 /* n <= this */
int m0_wsgi_send(m0_wsgi_sr *sr, const struct iovec *body, int n, size_t len, int final, int wait);
/* Put "Content-Length: len" in the head (before it is sent), for a body whose
 * length is known before its bytes (sendfile). */
void m0_wsgi_declare_length(m0_wsgi_sr *sr, uint64_t len);
m0_wsgi_sr *m0_wsgi_sr_new(m0_wsgi_state *st);
PyObject *m0_wsgi_write_new(m0_wsgi_state *st, m0_wsgi_sr *sr);
/* Whether the connection may be kept after this (finished) response. */
int m0_wsgi_keep_alive(const m0_wsgi_sr *sr);

/* How a response that waits for a slow peer goes on (inline mode): the
 * iterator being sent, or the rest of a file being sent with sendfile. */
typedef struct {
    PyObject *it; /* strong, or NULL when sending a file */
    int fd;       /* our duplicate of the file's fd (m0_wsgi_resume_release), -1 when none */
    off_t off;
    uint64_t left;
} m0_wsgi_resume;

/* early_hints.c */
extern PyType_Spec m0_wsgi_hints_spec;
PyObject *m0_wsgi_hints_new(m0_wsgi_state *st, m0_wsgi_sr *sr);

/* file_wrapper.c */
extern PyType_Spec m0_wsgi_file_wrapper_spec;
/* Send a file_wrapper result with sendfile when its file is a regular file.
 * Returns 1 when sent (or the peer went away: sr->write_error), 2 when the
 * rest waits for the peer (inline mode: park says where it stands), 0 when
 * the caller must iterate it instead, -1 with an exception. */
int m0_wsgi_file_wrapper_send(m0_wsgi_sr *sr, m0_wsgi_file_wrapper *fw, m0_wsgi_resume *park);
/* Go on with a parked sendfile: 0 when done (or failed: sr->write_error), 2
 * when it waits for the peer again. */
int m0_wsgi_file_send_more(m0_wsgi_sr *sr, m0_wsgi_resume *park);
/* Close the descriptor a parked sendfile holds (a response that ends before
 * its file was sent). */
void m0_wsgi_resume_release(m0_wsgi_resume *park);

/* wsgi.c */
/* Whether the calling thread is the one running sr's request: 0, or -1 with a
 * RuntimeError naming what (write(), start_response(), wsgi.early_hints()) when
 * the request is over or another thread runs it. start_response, write() and
 * wsgi.early_hints act on the connection's buffers with no lock (PEP 3333
 * gives them to the request's thread): on a free-threaded build a second
 * thread would run them at the same instant as the request's own, so every
 * build refuses them from any other thread, even one the view joins. */
int m0_wsgi_sr_refused(const m0_wsgi_sr *sr, const char *what); /* the -1 */

/* The calling thread, as sr->owner holds it: pthread_self(), which is what
 * PyThread_get_thread_ident() returns on every pthreads build, without its
 * call (it runs twice per request). */
static inline unsigned long m0_wsgi_thread(void)
{
    return (unsigned long)pthread_self();
}

static inline int m0_wsgi_sr_owned(const m0_wsgi_sr *sr, const char *what)
{
    /* Relaxed loads: the owner field only ever equals this thread's ident
     * when this thread stored it (sr_begin, a resume); a stale value read
     * from another thread is another thread's or 0, refused either way. */
    if (__atomic_load_n(&sr->owner, __ATOMIC_RELAXED) == m0_wsgi_thread() &&
        __atomic_load_n(&sr->active, __ATOMIC_RELAXED))
        return 0;
    return m0_wsgi_sr_refused(sr, what);
}

#endif

/* The event loop: fd watchers, timers and cross-thread wake-ups over an I/O
 * backend (loop_int.h): epoll on Linux, kqueue on macOS and the BSDs, poll(2)
 * anywhere, chosen when the loop is made (M0_IO_BACKEND=epoll|kqueue|poll in
 * the environment; epoll, else kqueue, is the default where it exists). It
 * runs two ways, like libuv's run modes:
 * m0_loop_run_once(loop, -1 or ms) blocks for the next events (the WSGI
 * worker's serve loop), m0_loop_run_once(loop, 0) is one non-blocking pass
 * (the ASGI bridge calls it when asyncio sees m0_loop_fd readable).
 *
 * Error convention of net/: 0 (or a count) on success, -errno on failure.
 * No Python.h here.
 */
#ifndef M0_NET_LOOP_H
#define M0_NET_LOOP_H

#include <stddef.h>
#include <stdint.h>

typedef struct m0_loop m0_loop;
typedef struct m0_io m0_io;
typedef struct m0_timer m0_timer;

typedef void (*m0_io_cb)(m0_loop *loop, m0_io *io, uint32_t events);
typedef void (*m0_timer_cb)(m0_loop *loop, m0_timer *timer);

/* Interest and event bits. Their values are epoll's (on Linux EPOLLIN etc.
 * may be passed as they are); every backend maps them to its own.
 * M0_IO_ET: edge-triggered; the poll backend emulates it by muting the fd
 * after it reported an event, until its interest changes.
 * M0_IO_EXCLUSIVE: wake one waiter of several loops (EPOLLEXCLUSIVE); other
 * backends ignore it, so every loop would wake (accept answers EAGAIN): there
 * the loops are given the inlets of the accept hand-off (acceptor.h) instead
 * of the shared listener. */
#define M0_IO_IN 0x001u
#define M0_IO_OUT 0x004u
#define M0_IO_ERR 0x008u
#define M0_IO_HUP 0x010u
#define M0_IO_RDHUP 0x2000u
#define M0_IO_EXCLUSIVE (1u << 28)
#define M0_IO_ET (1u << 31)

/* An fd watcher; embed it in the owning struct and recover the owner with
 * container_of-style arithmetic. events are M0_IO_* bits. */
struct m0_io {
    int fd;
    uint32_t events; /* currently registered, 0 if not registered */
    m0_io_cb cb;
};

/* A one-shot timer in a binary min-heap keyed by deadline. */
struct m0_timer {
    uint64_t deadline_ms; /* monotonic, in loop-now milliseconds */
    size_t heap_index;    /* private: SIZE_MAX when not armed */
    m0_timer_cb cb;
};

int m0_loop_new(m0_loop **out);
void m0_loop_free(m0_loop *loop);
/* The fd an outer loop watches: epoll's fd; with poll, a pipe a helper
 * thread (started by the first call) makes readable when a pass would find
 * events. */
int m0_loop_fd(m0_loop *loop);
/* "epoll", "kqueue" or "poll". */
const char *m0_loop_backend_name(const m0_loop *loop);
/* The backends this build has, comma-separated, the default first. */
const char *m0_loop_backends(void);

/* Register, change or remove an fd watcher. events == 0 removes it. */
int m0_io_set(m0_loop *loop, m0_io *io, uint32_t events);
void m0_io_close(m0_loop *loop, m0_io *io); /* unregister and close(fd) */

void m0_timer_init(m0_timer *t, m0_timer_cb cb);
void m0_timer_start(m0_loop *loop, m0_timer *t, uint64_t timeout_ms);
void m0_timer_stop(m0_loop *loop, m0_timer *t);
int m0_timer_armed(const m0_timer *t);

/* Cached monotonic milliseconds, refreshed once per pass. */
uint64_t m0_loop_now(const m0_loop *loop);
/* Milliseconds until the earliest timer, or -1 when none is armed. */
int m0_loop_next_timeout(const m0_loop *loop);

/* A cross-thread wake-up (libuv's uv_async): m0_async_send() may be called
 * from any thread; the callback runs on the loop's thread at the end of a
 * pass. Several sends before it coalesce into one callback. A send while the
 * loop is inside a pass costs no syscall: the pass looks at the flag before
 * it ends; otherwise the eventfd (a pipe where there is none) wakes the loop
 * (or whoever watches its fd), unless the loop owns its waits and none is
 * blocked (m0_loop_set_own_waits). */
typedef struct m0_async m0_async;
typedef void (*m0_async_cb)(m0_loop *loop, m0_async *async);
struct m0_async {
    m0_io io; /* an eventfd, or a pipe's read end */
    int wfd;  /* the fd written to wake: io.fd, or the pipe's write end */
    m0_async_cb cb;
    m0_loop *loop;
    int pending;  /* atomic */
    int signaled; /* atomic: the eventfd was written and the loop has not read it yet */
    m0_async *next;
};
int m0_async_init(m0_loop *loop, m0_async *async, m0_async_cb cb);
void m0_async_close(m0_loop *loop, m0_async *async);
void m0_async_send(m0_async *async); /* thread-safe, async-signal-safe */
/* Thread-safe: mark it sent without waking the loop; the callback runs at
 * the end of the loop's next pass, whatever wakes it (at the latest its
 * own wait timeout). */
void m0_async_post(m0_async *async);

/* Hooks run around a blocking backend wait (never around a zero-timeout one):
 * the WSGI bridge releases the GIL in before and takes it back in after, so
 * the GIL is held across a whole batch of ready events, never per syscall. */
void m0_loop_set_wait_hooks(m0_loop *loop, void (*before)(void *), void (*after)(void *), void *arg);

/* on: a pass that may wait first looks without waiting, and calls the wait
 * hooks only when it must block (for a loop whose threads queue for the
 * GIL: the blocking-pool mode). Off by default: a syscall less per pass. */
void m0_loop_set_look_first(m0_loop *loop, int on);
/* on: every wait for this loop's events is inside m0_loop_run_once (no
 * outer loop watches its fd; the blocking-pool mode). A send then writes the
 * wake-up fd only while a pass is blocked in its wait (or about to block):
 * a pass that may block first looks at the asyncs sent, and does not block
 * while one is pending (nor while one is posted: its callback then runs at
 * the end of that pass). So a pool thread that completes a request while
 * nobody waits in the loop costs no syscall, and neither does the read of
 * that wake-up by the next pass. Off by default (ASGI: the asyncio loop
 * watches the loop's fd). */
void m0_loop_set_own_waits(m0_loop *loop, int on);
/* A hook run at the end of each pass, after its ready events were
 * dispatched and before timers expire: the server flushes the output it
 * held back during the pass (net/conn_write.c). */
void m0_loop_set_pass_end(m0_loop *loop, void (*cb)(void *), void *arg);
/* 1 while the loop's thread dispatches a pass's events (callbacks run). */
int m0_loop_dispatching(const m0_loop *loop);
/* 1 inside any event callback of a pass, the last one included: the
 * pass-end hook runs after it. */
int m0_loop_in_events(const m0_loop *loop);

/* Wait up to timeout_ms (-1: until the next timer or forever; 0: do not
 * block) for events, dispatch every ready one, then expire due timers and
 * refresh the Date cache. Returns the number of events dispatched, or -errno
 * (-EINTR when a signal interrupted the wait: the caller checks signals;
 * -EBUSY when called from one of the loop's own callbacks). */
int m0_loop_run_once(m0_loop *loop, int timeout_ms);

#endif

/* Giving the heap back after a fall in open connections. glibc keeps what a
 * process freed in its arenas: after thousands of connections close (an idle
 * TLS keep-alive connection holds about 15 KB, most of it OpenSSL's session)
 * the worker's RSS stays at its peak, though the heap in use is back where it
 * was. When the open connections fell by M0_TRIM_DROP or more and to half
 * their peak or less, malloc_trim(0) runs once from a timer a moment later
 * (after the rest of the burst's closes) and returns the free pages to the
 * kernel. Loop thread only; nothing on the per-request path but a compare at
 * each close. Without glibc (or with the portable build) it does nothing. */
#include "server_int.h"

#if defined(__GLIBC__) && !defined(M0_PORTABLE)
#include <malloc.h>
#define M0_HAVE_MALLOC_TRIM 1
#endif

/* Connections whose memory is worth a trim (about 15 MB of TLS sessions, 1 MB
 * of plaintext connections), and how long after the fall it runs. */
#define M0_TRIM_DROP 1024
#define M0_TRIM_DELAY_MS 1000

static void trim_tick(m0_loop *loop, m0_timer *t)
{
    (void)loop;
    m0_server *srv = (m0_server *)((char *)t - offsetof(m0_server, trim_timer));
#ifdef M0_HAVE_MALLOC_TRIM
    malloc_trim(0);
#endif
    srv->trim_peak = __atomic_load_n(&srv->nconns, __ATOMIC_RELAXED);
}

void m0__trim_init(m0_server *srv)
{
    srv->trim_peak = 0;
    m0_timer_init(&srv->trim_timer, trim_tick);
}

void m0__trim_stop(m0_server *srv)
{
    m0_timer_stop(srv->loop, &srv->trim_timer);
}

void m0__trim_note(m0_server *srv, size_t open)
{
    if (open > srv->trim_peak) {
        srv->trim_peak = open;
        return;
    }
#ifdef M0_HAVE_MALLOC_TRIM
    if (srv->trim_peak - open >= M0_TRIM_DROP && open <= srv->trim_peak / 2 && !m0_timer_armed(&srv->trim_timer) &&
        !srv->draining)
        m0_timer_start(srv->loop, &srv->trim_timer, M0_TRIM_DELAY_MS);
#endif
}

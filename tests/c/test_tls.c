/* The TLS transport (src/net/tls.c, conn_io.c) under ASan/UBSan, through the
 * connection state machine of conn_harness.h: the test's end is an OpenSSL
 * client on the socketpair, the certificate a self-signed one made here.
 * Covered: handshake and keep-alive, 60 pipelined requests in one record
 * (input OpenSSL holds past the read buffer's room), a 300,000-byte response
 * through the write buffer, a client's TCP half-close after pipelined
 * requests (all answered), plain HTTP answered 400 in clear text, a PROXY
 * preface's bytes given to the session, session tickets under the current
 * and the previous keys, a file sent in turns. Built and run by `make test-c`. */
#include "tls_harness.h"
#include "file_harness.h"

#include "check.h"

static void test_keep_alive_pipelining_and_a_big_response(void)
{
    harness h;
    SSL *ssl = tls_open(&h, NULL);
    CHECK(ssl != NULL);
    CHECK(tls_handshake(&h, ssl) == 0);
    CHECK(h.conn != NULL && m0_exchange_tls(&h.conn->x) != NULL);
    static const char one[] = "GET /a HTTP/1.1\r\nHost: t\r\n\r\n";
    tls_send(&h, ssl, one, sizeof(one) - 1);
    tls_drain(&h, ssl);
    const char *why = "";
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    /* 60 requests in one record: more than the 4 KiB read buffer takes at once. */
    char many[60 * 128];
    size_t len = 0;
    for (int i = 0; i < 60; i++)
        len += (size_t)snprintf(many + len, sizeof(many) - len, "GET /p%02d-%s HTTP/1.1\r\nHost: t\r\n\r\n", i,
                                "padding-padding-padding-padding-padding-padding-padding-padding-padding");
    CHECK(len > M0_RBUF_INITIAL);
    h.out_len = 0;
    tls_send(&h, ssl, many, len);
    tls_drain(&h, ssl);
    CHECK(h_responses(h.out, h.out_len, &why) == 60);
    CHECK(h.out_len > 0 && memmem(h.out, h.out_len, "/p59-", 5) != NULL);
    /* A response larger than the socket takes: queued, then flushed on EPOLLOUT. */
    static const char big[] = "GET /big HTTP/1.1\r\nHost: t\r\n\r\n";
    h.out_len = 0;
    tls_send(&h, ssl, big, sizeof(big) - 1);
    tls_drain(&h, ssl);
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    CHECK(h.out_len > H_BIG);
    SSL_free(ssl);
    h_close(&h);
}

static void test_plain_http_gets_a_clear_text_400(void)
{
    harness h;
    SSL *ssl = tls_open(&h, NULL);
    CHECK(ssl != NULL);
    static const char req[] = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    h_send(&h, req, sizeof(req) - 1);
    h_run(&h, 0);
    CHECK(h.out_len > 24 && memcmp(h.out, "HTTP/1.1 400 Bad Request\r\n", 26) == 0);
    /* Its Content-Length is its body's. */
    const char *end = memmem(h.out, h.out_len, "\r\n\r\n", 4);
    const char *cl = memmem(h.out, h.out_len, "Content-Length: ", 16);
    CHECK(end != NULL && cl != NULL && cl < end);
    if (end != NULL && cl != NULL)
        CHECK(strtoul(cl + 16, NULL, 10) == h.out_len - (size_t)(end + 4 - h.out));
    CHECK(h.conn == NULL); /* closed */
    SSL_free(ssl);
    h_close(&h);
}

/* The client's TCP half-close after pipelined requests (a FIN under the
 * session, no close_notify): every response is still sent, then the
 * connection closes, as in plaintext. */
static void test_half_close_after_pipelined_requests(void)
{
    harness h;
    SSL *ssl = tls_open(&h, NULL);
    CHECK(ssl != NULL);
    CHECK(tls_handshake(&h, ssl) == 0);
    static const char reqs[] = "GET /big HTTP/1.1\r\nHost: t\r\n\r\nGET /a HTTP/1.1\r\nHost: t\r\n\r\n";
    tls_send(&h, ssl, reqs, sizeof(reqs) - 1);
    CHECK(shutdown(h.peer, SHUT_WR) == 0);
    tls_drain(&h, ssl);
    const char *why = "";
    CHECK(h_responses(h.out, h.out_len, &why) == 2);
    CHECK(h.out_len > H_BIG);
    CHECK(h.conn == NULL); /* then closed */
    SSL_free(ssl);
    h_close(&h);
}

static void test_proxy_preface(void)
{
    m0_server_config cfg;
    m0_server_config_defaults(&cfg);
    cfg.proxy.protocol = 1; /* v1 */
    cfg.proxy.trust.any = 1;
    harness h;
    SSL *ssl = tls_open(&h, &cfg);
    CHECK(ssl != NULL);
    /* The ClientHello, written to a memory BIO, then sent behind the header in one segment. */
    BIO *mem = BIO_new(BIO_s_mem());
    SSL *probe = SSL_new(client_ctx);
    SSL_set_bio(probe, BIO_new(BIO_s_mem()), mem);
    SSL_set_connect_state(probe);
    (void)SSL_do_handshake(probe);
    char *hello = NULL;
    long hlen = BIO_get_mem_data(mem, &hello);
    CHECK(hlen > 0);
    static const char header[] = "PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n";
    char seg[4096];
    memcpy(seg, header, sizeof(header) - 1);
    memcpy(seg + sizeof(header) - 1, hello, (size_t)hlen);
    h_send(&h, seg, sizeof(header) - 1 + (size_t)hlen);
    h_run(&h, 1);
    /* The server answered that ClientHello: a ServerHello came back. */
    char rec[5];
    CHECK(recv(h.peer, rec, sizeof(rec), MSG_PEEK) == 5 && rec[0] == 0x16);
    CHECK(h.conn != NULL && strcmp(h.conn->addr.peer_host, "203.0.113.7") == 0);
    SSL_free(probe);
    SSL_free(ssl);
    h_close(&h);
}

/* One connection to a server context built with ticket_keys (sets of 80
 * bytes), offering sess (or NULL): whether it resumed, and the session it
 * ended with (*out, the caller frees it). */
static int resumes_with(const unsigned char *keys, int sets, SSL_SESSION *sess, SSL_SESSION **out)
{
    char err[256];
    m0_tls_settings s = {.certfile = cert_path, .keyfile = key_path, .min_version = 12};
    s.ticket_keys = keys;
    s.ticket_key_sets = sets;
    m0_tls *t = NULL;
    CHECK(m0_tls_new(&t, &s, err, sizeof(err)) == 0);
    m0_tls *saved = server_tls;
    server_tls = t;
    harness h;
    SSL *ssl = tls_open(&h, NULL);
    CHECK(ssl != NULL);
    if (sess != NULL)
        SSL_set_session(ssl, sess);
    CHECK(tls_handshake(&h, ssl) == 0);
    static const char req[] = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    tls_send(&h, ssl, req, sizeof(req) - 1);
    tls_drain(&h, ssl); /* and the TLS 1.3 tickets that came before the response */
    const char *why = "";
    CHECK(h_responses(h.out, h.out_len, &why) == 1);
    int reused = SSL_session_reused(ssl);
    if (out != NULL)
        *out = SSL_get1_session(ssl);
    (void)SSL_shutdown(ssl); /* without it OpenSSL marks the session not resumable */
    SSL_free(ssl);
    h_close(&h);
    server_tls = saved;
    m0_tls_free(t);
    return reused;
}

/* The supervisor's rotation: after one HUP the workers get (new, old) and
 * open a ticket of the old keys; after two, (newer, new) do not. */
static void test_ticket_keys_current_and_previous(void)
{
    unsigned char a[80], ba[160], cb[160];
    for (int i = 0; i < 80; i++) {
        a[i] = (unsigned char)i;
        ba[i] = (unsigned char)(0x80 + i);
        cb[i] = (unsigned char)(0xc0 ^ i);
    }
    memcpy(ba + 80, a, 80);
    memcpy(cb + 80, ba, 80);
    SSL_SESSION *first = NULL, *renewed = NULL;
    CHECK(resumes_with(a, 1, NULL, &first) == 0 && first != NULL);
    CHECK(resumes_with(a, 1, first, NULL) == 1);
    CHECK(resumes_with(ba, 2, first, &renewed) == 1 && renewed != NULL); /* one HUP: still resumes */
    CHECK(resumes_with(cb, 2, first, NULL) == 0);                        /* two: a full handshake */
    CHECK(resumes_with(cb, 2, renewed, NULL) == 1);                      /* the ticket it got after the first HUP */
    SSL_SESSION_free(first);
    SSL_SESSION_free(renewed);
}

/* A read that stops on the socket's write side (the TLS 1.3 session ticket
 * after the client's Finished, the socket full) with the request read ahead
 * behind it: the kept record is not "pending" input (the loop would ring
 * the connection, find the same wait, and ring again until the socket
 * drains); EPOLLOUT's read takes it once the socket takes the ticket. */
static void test_no_pending_input_while_a_read_waits_to_write(void)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0 && fcntl(sv[1], F_SETFL, O_NONBLOCK) == 0);
    m0_tls_conn *tc = m0_tls_conn_new(server_tls, sv[0]);
    SSL *c = SSL_new(client_ctx);
    CHECK(tc != NULL && c != NULL);
    SSL_set_fd(c, sv[1]);
    SSL_set_connect_state(c);
    SSL_set_min_proto_version(c, TLS1_3_VERSION);
    char buf[4096];
    CHECK(SSL_do_handshake(c) != 1);                                 /* the ClientHello */
    CHECK(m0_tls_recv(tc, buf, sizeof(buf)) < 0 && errno == EAGAIN); /* the server's flight */
    CHECK(SSL_do_handshake(c) == 1);                                 /* the client's Finished */
    static const char req[] = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    CHECK(SSL_write(c, req, sizeof(req) - 1) == (int)sizeof(req) - 1);
    int small = 4096;
    (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    memset(buf, 'x', sizeof(buf));
    while (send(sv[0], buf, sizeof(buf), MSG_DONTWAIT) > 0) { /* the server's side full */
    }
    errno = 0;
    CHECK(m0_tls_recv(tc, buf, sizeof(buf)) < 0 && errno == EAGAIN);
    CHECK(m0_tls_want_write(tc));
    CHECK(!m0_tls_pending(tc));
    m0_tls_conn_free(tc);
    SSL_free(c);
    close(sv[0]);
    close(sv[1]);
}

static void test_file_turn(void)
{
    /* As over plaintext (test_conn.c): a file's bytes go in turns, of
     * M0_FILE_TURN_TLS, whatever the socket would take; then the whole file. */
    int fd = f_start();
    CHECK(fd >= 0);
    harness h;
    SSL *ssl = tls_open_with(&h, NULL, &f_handler);
    CHECK(ssl != NULL);
    CHECK(tls_handshake(&h, ssl) == 0);
    CHECK(f_room(h.conn) >= 4 * M0_FILE_TURN_TLS); /* else the checks below could not fail */
    static const char req[] = "GET /file HTTP/1.1\r\nHost: t\r\n\r\n";
    int w = SSL_write(ssl, req, sizeof(req) - 1);
    CHECK(w == (int)sizeof(req) - 1);
    for (int i = 0; i < 100 && f_state.calls == 0; i++)
        m0_loop_run_once(h.loop, 0); /* until the request's pass, the peer reading nothing */
    CHECK(f_state.calls == 2);
    CHECK(f_state.ret[0] == M0_FILE_TURN_TLS);
    CHECK(f_state.ret[1] == -EAGAIN);
    tls_drain(&h, ssl);
    CHECK(f_sent_in_turns(M0_FILE_TURN_TLS));
    CHECK(f_arrived_whole(&h));
    SSL_free(ssl);
    h_close(&h);
    close(fd);
}

int main(void)
{
    CHECK(tls_setup() == 0);
    char err[256];
    /* A key that does not match is refused, naming both files. */
    m0_tls *bad = NULL;
    m0_tls_settings wrong = {.certfile = cert_path, .keyfile = cert_path, .min_version = 12};
    CHECK(m0_tls_new(&bad, &wrong, err, sizeof(err)) < 0 && bad == NULL && strstr(err, cert_path) != NULL);
    test_keep_alive_pipelining_and_a_big_response();
    test_plain_http_gets_a_clear_text_400();
    test_half_close_after_pipelined_requests();
    test_proxy_preface();
    test_ticket_keys_current_and_previous();
    test_no_pending_input_while_a_read_waits_to_write();
    test_file_turn();
    (void)h_run_for; /* the harness's, unused here */
    tls_teardown();
    printf("test_tls: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}

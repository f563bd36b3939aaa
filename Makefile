# m0serve build, test, serve and benchmark entry points.
#   make serve            build and serve the demo app on 127.0.0.1:8000
#   make test             build and run every test (C tests under ASan/UBSan or TSan, pytest, the TLS suite
#                         against an ASan/UBSan build of the extension: test-asan-tls, docs check), side
#                         by side (make -j$(TEST_JOBS): test-all)
#   make test-c           the C tests only: each is built here, one clang line per test, and each test is
#                         a target of its own (test-c-conn, ...; make -j test-c; fuzz: one line per driver)
#   make test-poll        the C tests, then the protocol, WSGI, ASGI, slow-client, attack and supervisor
#                         suites on the poll(2) backend (M0_IO_BACKEND=poll; test-poll-py: the suites only)
#   make test-tls-py      the WSGI and ASGI probes again over TLS (https and wss; M0_TEST_TLS=1, tests/servers.py)
#   make test-h2-py       the same probes over HTTP/2: h2c, then h2 over TLS (M0_TEST_H2, tests/h2bridge.py)
#   make test-asan-h2     the HTTP/2 suites against the ASan/UBSan build (test-asan: engine, WSGI, ASGI)
#   make test-portable    the build with every portable fallback (meson -Dportable=true), a few suites on it
#   make test-kqueue LIBKQUEUE_PREFIX=DIR  the kqueue backend on Linux against libkqueue installed in DIR
#                         (built outside the repository; not in CI): the C tests and the test-poll suites
#   make test PY=3.13     the same on another interpreter (any `pyenv versions` entry or a path)
#   make test PY=3.13t    the same on the free-threaded interpreter, built once into FT_PREFIX
#   make python-ft        build that interpreter (Debian 13's python3.13 source, --disable-gil)
#   make tsan-threads PY=3.13t  the extension under ThreadSanitizer, --threads 2 under wrk (tools/tsan_threads.sh)
#   make bench            run the benchmark suites (see bench/README.md)
#   make bench-parser     build and run the parser's microbenchmark (bench/parser/bench_parser.c)
#   make wheel-check      build the sdist and a wheel, auditwheel show/repair it, install it in a venv
#                         with no compiler and serve a request (tools/wheel_check.sh; not part of test)
#   make fuzz             run each libFuzzer driver for FUZZ_SECONDS (default 60) over fuzz/corpus*,
#                         then the misbehaving-apps fuzzer for FUZZ_APPS_SECONDS (make fuzz-apps)

PY ?= 3.11
# The free-threaded interpreter (PY=3.13t): built once, outside the repository, by
# `make python-ft` (tools/build_python_ft.sh; ~5 minutes on 2 cores), then reused.
FT_PREFIX ?= $(HOME)/.cache/m0serve/python3.13t
ifeq ($(PY),3.13t)
PYTHON := $(FT_PREFIX)/bin/python3.13t
FT_DEP := python-ft
REQUIREMENTS := requirements-test-ft.txt
else
REQUIREMENTS := requirements-test.txt
PYTHON := $(shell if [ -x "$(PY)" ]; then echo "$(PY)"; \
	elif command -v pyenv >/dev/null 2>&1 && [ -x "$$(pyenv root)/versions/$$(pyenv versions --bare | grep -E '^$(PY)(\.|$$)' | tail -1)/bin/python" ]; then \
	  echo "$$(pyenv root)/versions/$$(pyenv versions --bare | grep -E '^$(PY)(\.|$$)' | tail -1)/bin/python"; \
	else command -v python$(PY) || command -v python3; fi)
endif
VENV ?= .venv-$(PY)
VPY := $(VENV)/bin/python
BUILD_PACKAGES := gcc pkg-config libssl-dev zlib1g-dev libnghttp2-dev
SYSTEM_PACKAGES := wrk clang clang-format pkg-config openssl curl libclang-rt-14-dev libfuzzer-14-dev libev-dev nginx libnginx-mod-stream haproxy libssl-dev zlib1g-dev libnghttp2-dev nghttp2-client
CFLAGS_TEST := -std=gnu11 -g -O1 -Wall -Wextra -Werror -Wno-missing-field-initializers -D_GNU_SOURCE \
	-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The pool hand-off (threads) under ThreadSanitizer.
CFLAGS_TSAN := -std=gnu11 -g -O1 -Wall -Wextra -Werror -D_GNU_SOURCE -fsanitize=thread -fno-omit-frame-pointer -pthread
CFLAGS_FUZZ := -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_SECONDS ?= 60
# Every file of src/net (the connection tests and fuzzer link the whole layer, and
# with it OpenSSL: the TLS transport is one of its files).
NET_SRCS := $(sort $(wildcard src/net/*.c))
NET_LIBS := -lssl -lcrypto -lnghttp2
# The loop and its backends (each file builds to nothing where its system call is missing).
LOOP_SRCS := src/net/loop.c src/net/loop_epoll.c src/net/loop_kqueue.c src/net/loop_poll.c

PYTEST_ARGS ?=
# The suite runs its files on this many processes (pytest-xdist; a file stays on one, so that
# its module-scoped servers are started once); PYTEST_JOBS=0 runs it in this process alone. More
# processes than cores: most tests wait on their server processes. The TLS probes (test-tls-py) and
# the suites under the sanitizers (test-asan) keep two: their servers use the CPU.
PYTEST_JOBS ?= 4
PYTEST_JOBS_TLS ?= 2
PYTEST_JOBS_ASAN ?= 2
# Files go to the processes in the order tests/conftest.py gives them (the slowest first, so that
# none of them starts last), not by their number of tests (xdist's default).
XDIST := --dist loadfile --no-loadscope-reorder
TSAN_SECONDS ?= 5
# What CI runs on 3.13t (.ci/run): the free-threading tests, the WSGI and ASGI probes, and every
# --threads / --blocking-threads test, and the request's callables used from another thread.
FT_TESTS := engine/test_free_threaded.py asgi/test_asgi_threads.py engine/test_engine.py wsgi/test_wsgi_environ.py wsgi/test_wsgi_response.py \
	wsgi/test_wsgi_input.py wsgi/test_wsgi_errors.py asgi/test_asgi_http.py wsgi/test_wsgi_pool.py \
	engine/test_bridge_edges.py::test_wsgi_callables_from_another_thread_are_refused \
	engine/test_bridge_edges.py::test_wsgi_write_from_a_resumed_response \
	ops/test_log_config.py::test_access_log_through_the_logger_with_pool_and_loop_threads \
	ops/test_readiness.py::test_shutdown_delay_with_threads ops/test_cli.py::test_asgi_threads_with_a_gil_exits_2_with_one_line

.PHONY: all deps build-deps python-ft tsan-threads test-ft venv build serve test test-all test-all-py test-all-asan-tls test-c $(C_TEST_TARGETS) asan-build test-poll test-poll-py test-tls-py test-asan-tls test-asan-h2 test-asan test-portable test-kqueue test-py test-docs wheel-check fuzz fuzz-apps autobahn bench bench-parser format clean

all: build

# Installs the Debian packages named in $(1) that are missing (apt-get; sudo when not root).
define install_missing
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
endef

# System packages the tests and benchmarks need (installed only when missing).
deps:
	$(call install_missing,$(SYSTEM_PACKAGES) $(BUILD_PACKAGES))

# What building the extension needs (make build and make serve on a fresh machine): a C compiler,
# pkg-config and the headers of OpenSSL, libnghttp2 and zlib.
build-deps:
	$(call install_missing,$(BUILD_PACKAGES))

# CPython's build dependencies (the modules the tests use: ssl, sqlite3, ctypes...).
python-ft: SYSTEM_PACKAGES += gcc make libssl-dev zlib1g-dev libffi-dev libsqlite3-dev libbz2-dev liblzma-dev \
	libreadline-dev uuid-dev
python-ft: deps
	tools/build_python_ft.sh $(FT_PREFIX)

$(VENV)/.ok: $(REQUIREMENTS) | $(FT_DEP)
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -r $(REQUIREMENTS)
	touch $@

venv: $(VENV)/.ok

# meson-python builds in a directory of its own per interpreter, kept between builds: a rebuild
# compiles only what changed. (MAKEFLAGS emptied: see ASAN_ENV.)
build: build-deps venv
	MAKEFLAGS= $(VPY) -m pip install -q --no-build-isolation --force-reinstall --no-deps -Cbuild-dir=build/py-$(PY) .

serve: build
	$(VENV)/bin/m0serve m0serve.demo:app --host 127.0.0.1 --port 8000

# Each C test is a target of its own (build, then run), so that `make -j` (make test) builds and runs
# them side by side; `make test-c` runs them all. The compilers run niced: the tests beside them wait
# on their servers, not on the CPU.
NICE ?= nice -n 10
C_BUILD := tests/c/build
# (longest first: the connection and TLS tests take about 13 s each here, most of it clang)
C_TESTS := conn tls handoff h2_pool workq loop http http_nosimd ws ws_deflate proxy workq_wakeup acceptor acceptor_tsan \
	access_log metrics static
C_TEST_TARGETS := $(addprefix test-c-,$(C_TESTS))
CONN_SRCS := $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c
test-c: $(C_TEST_TARGETS)
$(C_BUILD): ; mkdir -p $@
$(C_TEST_TARGETS): | deps $(C_BUILD)
test-c-http:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_http tests/c/test_http.c src/http/parser.c src/http/response.c
	./$(C_BUILD)/test_http
test-c-http_nosimd:
	$(NICE) clang $(CFLAGS_TEST) -DM0_PARSER_NO_SIMD -o $(C_BUILD)/test_http_nosimd tests/c/test_http.c src/http/parser.c src/http/response.c
	./$(C_BUILD)/test_http_nosimd
test-c-loop:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_loop tests/c/test_loop.c $(LOOP_SRCS) src/http/response.c -lpthread
	./$(C_BUILD)/test_loop
	M0_IO_BACKEND=poll ./$(C_BUILD)/test_loop
test-c-ws:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_ws tests/c/test_ws.c src/http/ws.c src/http/parser.c
	./$(C_BUILD)/test_ws
test-c-ws_deflate:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_ws_deflate tests/c/test_ws_deflate.c src/http/ws_deflate.c src/http/ws.c src/http/parser.c -lz
	./$(C_BUILD)/test_ws_deflate
test-c-proxy:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_proxy tests/c/test_proxy.c src/http/forwarded.c src/http/proxy_protocol.c src/http/parser.c
	./$(C_BUILD)/test_proxy
test-c-access_log:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_access_log tests/c/test_access_log.c src/net/access_log.c src/http/response.c
	./$(C_BUILD)/test_access_log
test-c-static:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_static tests/c/test_static.c src/net/static_path.c src/net/static_cond.c src/net/static_mime.c src/net/static_cache.c $(LOOP_SRCS) src/http/response.c -lpthread
	./$(C_BUILD)/test_static
test-c-metrics:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_metrics tests/c/test_metrics.c src/net/metrics.c
	./$(C_BUILD)/test_metrics
test-c-conn:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_conn tests/c/test_conn.c $(CONN_SRCS) -lpthread $(NET_LIBS)
	./$(C_BUILD)/test_conn
	M0_IO_BACKEND=poll ./$(C_BUILD)/test_conn
test-c-tls:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_tls tests/c/test_tls.c $(CONN_SRCS) -lpthread $(NET_LIBS)
	./$(C_BUILD)/test_tls
test-c-workq:
	$(NICE) clang $(CFLAGS_TSAN) -DM0_WORKQ_DEBUG -o $(C_BUILD)/test_workq tests/c/test_workq.c src/net/workq.c $(LOOP_SRCS) src/http/response.c
	./$(C_BUILD)/test_workq
	M0_IO_BACKEND=poll ./$(C_BUILD)/test_workq
test-c-workq_wakeup:
	$(NICE) clang $(CFLAGS_TSAN) -DM0_WORKQ_DEBUG -DM0_WORKQ_TEST_HOOKS -o $(C_BUILD)/test_workq_wakeup tests/c/test_workq_wakeup.c src/net/workq.c
	./$(C_BUILD)/test_workq_wakeup
test-c-handoff:
	$(NICE) clang $(CFLAGS_TSAN) -DM0_WORKQ_DEBUG -o $(C_BUILD)/test_handoff tests/c/test_handoff.c $(CONN_SRCS) $(NET_LIBS)
	./$(C_BUILD)/test_handoff
	M0_IO_BACKEND=poll ./$(C_BUILD)/test_handoff
test-c-h2_pool:
	$(NICE) clang $(CFLAGS_TSAN) -DM0_WORKQ_DEBUG -o $(C_BUILD)/test_h2_pool tests/c/test_h2_pool.c $(CONN_SRCS) $(NET_LIBS)
	./$(C_BUILD)/test_h2_pool
	M0_IO_BACKEND=poll ./$(C_BUILD)/test_h2_pool
test-c-acceptor:
	$(NICE) clang $(CFLAGS_TEST) -o $(C_BUILD)/test_acceptor tests/c/test_acceptor.c src/net/acceptor.c -lpthread
	./$(C_BUILD)/test_acceptor
test-c-acceptor_tsan:
	$(NICE) clang $(CFLAGS_TSAN) -o $(C_BUILD)/test_acceptor_tsan tests/c/test_acceptor.c src/net/acceptor.c
	./$(C_BUILD)/test_acceptor_tsan

# The poll(2) backend (M0_IO_BACKEND=poll): the C tests (test-c runs the loop's on
# both backends) and these suites once more on it.
POLL_TESTS := engine/test_io_backend.py wsgi/test_wsgi_environ.py wsgi/test_wsgi_response.py wsgi/test_wsgi_input.py wsgi/test_wsgi_pool.py \
	asgi/test_asgi_http.py engine/test_protocol_corpus.py engine/test_head_trickle.py engine/test_net_limits.py ../bench/tests/test_bench_attack.py \
	ops/test_supervisor.py ops/test_asgi_supervisor.py ops/test_accept_handoff.py static/test_static.py
test-poll: test-c test-poll-py
test-poll-py: build
	cd tests && M0_IO_BACKEND=poll ../$(VPY) -m pytest -q -x -p no:cacheprovider $(POLL_TESTS)

# The WSGI and ASGI probes again over TLS (tests/servers.py: M0_TEST_TLS=1): every server they
# start serves HTTPS on a certificate made at test time, and their clients speak https and wss.
TLS_TESTS := wsgi/test_wsgi_environ.py wsgi/test_wsgi_response.py wsgi/test_wsgi_input.py wsgi/test_wsgi_errors.py \
	wsgi/test_wsgi_pool.py wsgi/test_wsgi_frameworks.py wsgi/test_wsgi_memory.py asgi/test_asgi_http.py \
	asgi/test_asgi_errors.py asgi/test_asgi_lifespan.py asgi/test_asgi_shutdown.py asgi/test_asgi_frameworks.py \
	asgi/test_asgi_soak.py asgi/test_asgi_ws.py asgi/test_ws_deflate.py asgi/test_ws_deflate_cases.py
test-tls-py: build
	cd tests && M0_TEST_TLS=1 ../$(VPY) -m pytest -q -x -p no:cacheprovider -n $(PYTEST_JOBS_TLS) $(XDIST) $(TLS_TESTS)

# The WSGI and ASGI probes again over HTTP/2 (tests/servers.py, tests/h2bridge.py): M0_TEST_H2=h2c
# (prior knowledge on plaintext), then M0_TEST_H2=h2 (TLS, ALPN h2, the TLS mode's certificates).
# Raw requests go through a translator to one HTTP/2 stream each, httpx speaks HTTP/2 itself. The
# TLS files less the WebSocket ones: the translator carries requests, not an upgraded connection;
# test_asgi_ws.py runs its tests over HTTP/2 itself (RFC 8441 extended CONNECT: h2c and h2).
.PHONY: test-h2-py
H2_TESTS := $(filter-out asgi/test_asgi_ws.py asgi/test_ws_deflate.py asgi/test_ws_deflate_cases.py,$(TLS_TESTS))
test-h2-py: build
	cd tests && M0_TEST_H2=h2c ../$(VPY) -m pytest -q -p no:cacheprovider -n $(PYTEST_JOBS) $(XDIST) $(H2_TESTS); c=$$?; \
	M0_TEST_H2=h2 ../$(VPY) -m pytest -q -p no:cacheprovider -n $(PYTEST_JOBS) $(XDIST) $(H2_TESTS); t=$$?; \
	[ $$c -eq 0 ] && [ $$t -eq 0 ]
# The build with every portable fallback (meson -Dportable=true, src/net/portable.h):
# the loop's C tests, then a few suites against that build (installed apart, first on
# PYTHONPATH).
PORTABLE_DIR := build-portable
PORTABLE_TESTS := engine/test_portable.py engine/test_io_backend.py wsgi/test_wsgi_pool.py asgi/test_asgi_http.py \
	engine/test_protocol_corpus.py ops/test_supervisor.py ops/test_accept_handoff.py
test-portable: venv
	mkdir -p tests/c/build
	clang $(CFLAGS_TEST) -DM0_PORTABLE -DM0_NO_EPOLL -o tests/c/build/test_loop_portable tests/c/test_loop.c $(LOOP_SRCS) src/http/response.c -lpthread
	./tests/c/build/test_loop_portable
	clang $(CFLAGS_TEST) -DM0_PORTABLE -o tests/c/build/test_acceptor_portable tests/c/test_acceptor.c src/net/acceptor.c -lpthread
	./tests/c/build/test_acceptor_portable
	clang $(CFLAGS_TEST) -DM0_PORTABLE -DM0_NO_EPOLL -o tests/c/build/test_conn_portable tests/c/test_conn.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c -lpthread $(NET_LIBS)
	./tests/c/build/test_conn_portable
	rm -rf $(PORTABLE_DIR)
	$(VPY) -m pip install -q --no-build-isolation --no-deps --target $(PORTABLE_DIR) -Csetup-args=-Dportable=true .
	cd tests && PYTHONPATH=$(CURDIR)/$(PORTABLE_DIR) ../$(VPY) -m pytest -q -x -p no:cacheprovider $(PORTABLE_TESTS)

# The kqueue backend (src/net/loop_kqueue.c) tested on Linux against libkqueue
# (github.com/mheily/libkqueue), which emulates kqueue over epoll: built and installed
# outside the repository (cmake -DCMAKE_INSTALL_PREFIX=DIR; docs/ARCHITECTURE.md), never
# vendored, not in CI. The C tests of the loop, the connection, TLS and the pool, then the
# test-poll suites on an extension built against it without epoll (installed apart, first on
# PYTHONPATH), on M0_IO_BACKEND=kqueue.
LIBKQUEUE_PREFIX ?=
KQUEUE_DIR := build-kqueue
KQUEUE_CFLAGS = -DM0_KQUEUE -DM0_NO_EPOLL -I$(LIBKQUEUE_PREFIX)/include/kqueue
KQUEUE_LIBS = -L$(LIBKQUEUE_PREFIX)/lib -Wl,-rpath,$(LIBKQUEUE_PREFIX)/lib -lkqueue
test-kqueue: venv
	@test -n "$(LIBKQUEUE_PREFIX)" -a -f "$(LIBKQUEUE_PREFIX)/include/kqueue/sys/event.h" || \
	  { echo "test-kqueue: set LIBKQUEUE_PREFIX to where libkqueue is installed (docs/ARCHITECTURE.md)"; exit 2; }
	mkdir -p tests/c/build
	clang $(CFLAGS_TEST) $(KQUEUE_CFLAGS) -o tests/c/build/test_loop_kqueue tests/c/test_loop.c $(LOOP_SRCS) src/http/response.c -lpthread $(KQUEUE_LIBS)
	M0_IO_BACKEND=kqueue ./tests/c/build/test_loop_kqueue
	clang $(CFLAGS_TEST) $(KQUEUE_CFLAGS) -o tests/c/build/test_conn_kqueue tests/c/test_conn.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c -lpthread $(NET_LIBS) $(KQUEUE_LIBS)
	M0_IO_BACKEND=kqueue ./tests/c/build/test_conn_kqueue
	clang $(CFLAGS_TEST) $(KQUEUE_CFLAGS) -o tests/c/build/test_tls_kqueue tests/c/test_tls.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c -lpthread $(NET_LIBS) $(KQUEUE_LIBS)
	M0_IO_BACKEND=kqueue ./tests/c/build/test_tls_kqueue
	clang $(CFLAGS_TSAN) $(KQUEUE_CFLAGS) -DM0_WORKQ_DEBUG -o tests/c/build/test_workq_kqueue tests/c/test_workq.c src/net/workq.c $(LOOP_SRCS) src/http/response.c $(KQUEUE_LIBS)
	M0_IO_BACKEND=kqueue ./tests/c/build/test_workq_kqueue
	clang $(CFLAGS_TSAN) $(KQUEUE_CFLAGS) -DM0_WORKQ_DEBUG -o tests/c/build/test_handoff_kqueue tests/c/test_handoff.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c $(NET_LIBS) $(KQUEUE_LIBS)
	M0_IO_BACKEND=kqueue ./tests/c/build/test_handoff_kqueue
	rm -rf $(KQUEUE_DIR)
	$(VPY) -m pip install -q --no-build-isolation --no-deps --target $(KQUEUE_DIR) -Csetup-args=-Dlibkqueue=$(LIBKQUEUE_PREFIX) .
	cd tests && PYTHONPATH=$(CURDIR)/$(KQUEUE_DIR) M0_IO_BACKEND=kqueue ../$(VPY) -m pytest -q -x -p no:cacheprovider $(POLL_TESTS)

# The free-threaded subset CI runs (PY=3.13t; any interpreter works, the free-threading
# tests skip on a GIL build).
test-ft: build
	cd tests && ../$(VPY) -m pytest -q -x -p no:cacheprovider -rs $(FT_TESTS)

# gcc's ThreadSanitizer runtime (libtsan2), preloaded into the interpreter.
tsan-threads: SYSTEM_PACKAGES += libtsan2
tsan-threads: deps build
	tools/tsan_threads.sh $(PYTHON) $(TSAN_SECONDS)

PYTEST_PY = cd tests && ../$(VPY) -m pytest -q -x -p no:cacheprovider -n $(PYTEST_JOBS) $(XDIST) $(or $(PYTEST_ARGS),. ../bench/tests)
test-py: build
	$(PYTEST_PY)

# The benchmark tables in docs/ and the README must match their newest artifacts (stdlib only).
test-docs:
	$(PYTHON) -m bench.render --check

# The TLS suite against the extension built with ASan/UBSan (tests/asan_pytest.sh, a build per
# interpreter): the engine's TLS paths in real server processes under the sanitizers (test-c runs
# tests/c/test_tls.c under them too).
# asan-build: that build alone (make test starts it beside the others).
# (MAKEFLAGS emptied: ninja 1.13 would look for the job server of a `make -j` it was not given)
ASAN_ENV = MAKEFLAGS= VENV=$(CURDIR)/$(VENV) ASAN_BUILD=$(CURDIR)/build/asan-$(PY)
asan-build: venv
	$(ASAN_ENV) tests/asan_pytest.sh --build-only
ASAN_TLS = $(ASAN_ENV) tests/asan_pytest.sh -x -n 0 engine/test_tls.py
test-asan-tls: build asan-build
	$(ASAN_TLS)

# Every test: the system packages and the extension first, then the rest side by side (the pytest
# suite, the longest, first; the ASan build and its TLS suite, the C tests, the docs check), each
# target's output printed when it ends. The extension is built before, and test-all's pytest runs
# depend on nothing else (tests/asan_pytest.sh builds the ASan build itself): with -j, make starts a
# target whose prerequisite is still building only once it has started every later target that can.
TEST_JOBS ?= 4
test: deps
	$(MAKE) build
	$(MAKE) -j$(TEST_JOBS) --output-sync=target test-all
test-all: test-all-py test-all-asan-tls $(C_TEST_TARGETS) test-docs
test-all-py:
	$(PYTEST_PY)
test-all-asan-tls:
	$(ASAN_TLS)

# The HTTP/2 suites against the ASan/UBSan build (in CI: HTTP/2 is where a connection's close frees
# a session that a stream's write still holds, the use after free this found).
H2_ENGINE_TESTS := engine/test_http2.py engine/test_http2_wsgi.py engine/test_http2_pool.py engine/test_http2_attacks.py \
	engine/test_http2_timeouts.py engine/test_http2_dos.py asgi/test_asgi_ws_h2.py
test-asan-h2: build asan-build
	$(ASAN_ENV) tests/asan_pytest.sh -x -n $(PYTEST_JOBS_ASAN) $(XDIST) $(H2_ENGINE_TESTS)

# The engine, WSGI and ASGI suites against the ASan/UBSan build (about 9 minutes here): every
# server process the tests start runs the sanitized engine and bridges; the RSS-bound tests (marker
# rss) are left out there (tests/conftest.py).
test-asan: build asan-build
	$(ASAN_ENV) tests/asan_pytest.sh -n $(PYTEST_JOBS_ASAN) $(XDIST) engine wsgi asgi

# Each libFuzzer driver runs FUZZ_SECONDS over its checked-in seeds (fuzz/run.sh
# prints its executions), then the stateful fuzzer of misbehaving apps runs
# FUZZ_APPS_SECONDS against real servers (tests/engine/test_fuzz_apps.py prints its
# programs); each runs even when another fails.
fuzz: deps
	mkdir -p fuzz/build
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_parser fuzz/fuzz_parser.c fuzz/parser_nosimd.c src/http/parser.c
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_ws fuzz/fuzz_ws.c src/http/ws.c src/http/parser.c
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_conn fuzz/fuzz_conn.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c -lpthread $(NET_LIBS)
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_tls fuzz/fuzz_tls.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c -lpthread $(NET_LIBS)
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_h2 fuzz/fuzz_h2.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c -lpthread $(NET_LIBS)
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_h2_seq fuzz/fuzz_h2_seq.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c -lpthread $(NET_LIBS)
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_proxy fuzz/fuzz_proxy.c src/http/forwarded.c src/http/proxy_protocol.c src/http/parser.c
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_static fuzz/fuzz_static.c src/net/static_path.c src/net/static_cond.c src/net/static_mime.c
	fuzz/run.sh fuzz/build/fuzz_parser $(FUZZ_SECONDS) fuzz/corpus -dict=fuzz/http.dict; p=$$?; \
	fuzz/run.sh fuzz/build/fuzz_ws $(FUZZ_SECONDS) fuzz/corpus_ws; w=$$?; \
	fuzz/run.sh fuzz/build/fuzz_conn $(FUZZ_SECONDS) fuzz/corpus_conn -dict=fuzz/http.dict; c=$$?; \
	fuzz/run.sh fuzz/build/fuzz_proxy $(FUZZ_SECONDS) fuzz/corpus_proxy -dict=fuzz/proxy.dict; x=$$?; \
	fuzz/run.sh fuzz/build/fuzz_tls $(FUZZ_SECONDS) fuzz/corpus_tls -dict=fuzz/http.dict; t=$$?; \
	fuzz/run.sh fuzz/build/fuzz_h2 $(FUZZ_SECONDS) fuzz/corpus_h2; h=$$?; \
	fuzz/run.sh fuzz/build/fuzz_h2_seq $(FUZZ_SECONDS) fuzz/corpus_h2_seq; q=$$?; \
	fuzz/run.sh fuzz/build/fuzz_static $(FUZZ_SECONDS) fuzz/corpus_static; s=$$?; \
	$(MAKE) --no-print-directory fuzz-apps; a=$$?; \
	[ $$p -eq 0 ] && [ $$w -eq 0 ] && [ $$c -eq 0 ] && [ $$x -eq 0 ] && [ $$t -eq 0 ] && [ $$h -eq 0 ] && [ $$q -eq 0 ] && [ $$s -eq 0 ] && [ $$a -eq 0 ]

# The stateful fuzzer of misbehaving WSGI/ASGI apps (Hypothesis, real server
# processes); the test suite runs it too, for its default 20 s.
FUZZ_APPS_SECONDS ?= 60
fuzz-apps: build
	cd tests && FUZZ_APPS_SECONDS=$(FUZZ_APPS_SECONDS) ../$(VPY) -m pytest -q -p no:cacheprovider engine/test_fuzz_apps.py

# The Autobahn|Testsuite fuzzing client against a WebSocket echo, deflate on (all 517 cases:
# about 45 minutes here, most of it sections 12-13; CASES='["13.*"]' for some). Needs a Python
# 2.7 (pyenv's, or PY27=...): see tests/autobahn/run.sh. tests/asgi/test_ws_deflate_cases.py runs
# the cases of sections 12-13 with a Python 3 client on every test run. TLS=1: over wss.
autobahn: build
	TLS=$(TLS) PY=$(VPY) tests/autobahn/run.sh --ws-per-message-deflate on

# The release check (about a minute, network to PyPI for the build tools): see tools/wheel_check.sh.
# musl-tools: its musl-gcc checks that every source compiles against musl's headers (Alpine wheels).
wheel-check: SYSTEM_PACKAGES += musl-tools
wheel-check: deps
	PYTHON=$(PYTHON) tools/wheel_check.sh

# The threads suite (run by default, when SUITES is empty) runs m0serve on 3.13t, 3.13 and 3.11: their
# venvs are built first (3.13t's interpreter too, once: python-ft), each with m0serve installed.
BENCH_PYS := $(if $(or $(filter threads,$(SUITES)),$(if $(strip $(SUITES)),,all)),$(filter-out $(PY),3.13t 3.13 3.11))
bench: deps build
	@for p in $(BENCH_PYS); do $(MAKE) --no-print-directory build PY=$$p || exit 1; done
	$(VPY) -m bench $(SUITES) $(BENCH_ARGS)
	$(VPY) -m bench.render

# ns per parse of a browser-shaped GET and of three trickled 80 KB heads. BENCH_PARSER_FLAGS=
# "-DWITH_HTTP_PARSER -lhttp_parser" (libhttp-parser-dev) times nodejs's http_parser beside it.
bench-parser:
	mkdir -p build
	clang -O2 -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -o build/bench_parser \
		bench/parser/bench_parser.c src/http/parser.c $(BENCH_PARSER_FLAGS)
	./build/bench_parser

# Debian names the binary after its version; the newest one installed wins.
CLANG_FORMAT ?= $(shell command -v clang-format || ls /usr/bin/clang-format-[0-9]* 2>/dev/null | sort -V | tail -1)

format:
	$(CLANG_FORMAT) -i $$(find src tests/c fuzz bench -name '*.[ch]')

clean:
	rm -rf build tests/c/build fuzz/build .venv-* .bench-venv bench/floor/build

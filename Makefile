# m0serve build, test, serve and benchmark entry points.
#   make serve            build and serve the demo app on 127.0.0.1:8000
#   make test             build and run every test (C tests under ASan/UBSan or TSan, pytest, docs check)
#   make test-c           the C tests only: each is built here, one clang line per test (fuzz: the same for drivers)
#   make test PY=3.13     the same on another interpreter (any `pyenv versions` entry or a path)
#   make bench            run the benchmark suites (see bench/README.md)
#   make wheel-check      build the sdist and a wheel, auditwheel show/repair it, install it in a venv
#                         with no compiler and serve a request (tools/wheel_check.sh; not part of test)
#   make fuzz             run each libFuzzer driver for FUZZ_SECONDS (default 60) over fuzz/corpus*

PY ?= 3.11
PYTHON := $(shell if [ -x "$(PY)" ]; then echo "$(PY)"; \
	elif command -v pyenv >/dev/null 2>&1 && [ -x "$$(pyenv root)/versions/$$(pyenv versions --bare | grep -E '^$(PY)(\.|$$)' | tail -1)/bin/python" ]; then \
	  echo "$$(pyenv root)/versions/$$(pyenv versions --bare | grep -E '^$(PY)(\.|$$)' | tail -1)/bin/python"; \
	else command -v python$(PY) || command -v python3; fi)
VENV ?= .venv-$(PY)
VPY := $(VENV)/bin/python
SYSTEM_PACKAGES := wrk clang clang-format libclang-rt-14-dev libfuzzer-14-dev libev-dev nginx libnginx-mod-stream haproxy zlib1g-dev
CFLAGS_TEST := -std=gnu11 -g -O1 -Wall -Wextra -Werror -Wno-missing-field-initializers -D_GNU_SOURCE \
	-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The pool hand-off (threads) under ThreadSanitizer.
CFLAGS_TSAN := -std=gnu11 -g -O1 -Wall -Wextra -Werror -D_GNU_SOURCE -fsanitize=thread -fno-omit-frame-pointer -pthread
CFLAGS_FUZZ := -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_SECONDS ?= 60
# Every file of src/net (the connection tests and fuzzer link the whole layer).
NET_SRCS := $(sort $(wildcard src/net/*.c))

.PHONY: all deps venv build serve test test-c test-py test-docs wheel-check fuzz bench format clean

all: build

# System packages the tests and benchmarks need (installed only when missing).
deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(VENV)/.ok: requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -r requirements-test.txt
	touch $@

venv: $(VENV)/.ok

build: venv
	$(VPY) -m pip install -q --no-build-isolation --force-reinstall --no-deps .

serve: build
	$(VENV)/bin/m0serve m0serve.demo:app --host 127.0.0.1 --port 8000

test-c: deps
	mkdir -p tests/c/build
	clang $(CFLAGS_TEST) -o tests/c/build/test_http tests/c/test_http.c src/http/parser.c src/http/response.c
	./tests/c/build/test_http
	clang $(CFLAGS_TEST) -DM0_PARSER_NO_SIMD -o tests/c/build/test_http_nosimd tests/c/test_http.c src/http/parser.c src/http/response.c
	./tests/c/build/test_http_nosimd
	clang $(CFLAGS_TEST) -o tests/c/build/test_loop tests/c/test_loop.c src/net/loop.c src/http/response.c
	./tests/c/build/test_loop
	clang $(CFLAGS_TEST) -o tests/c/build/test_ws tests/c/test_ws.c src/http/ws.c src/http/parser.c
	./tests/c/build/test_ws
	clang $(CFLAGS_TEST) -o tests/c/build/test_ws_deflate tests/c/test_ws_deflate.c src/http/ws_deflate.c src/http/ws.c src/http/parser.c -lz
	./tests/c/build/test_ws_deflate
	clang $(CFLAGS_TEST) -o tests/c/build/test_proxy tests/c/test_proxy.c src/http/forwarded.c src/http/proxy_protocol.c src/http/parser.c
	./tests/c/build/test_proxy
	clang $(CFLAGS_TEST) -o tests/c/build/test_access_log tests/c/test_access_log.c src/net/access_log.c
	./tests/c/build/test_access_log
	clang $(CFLAGS_TEST) -o tests/c/build/test_metrics tests/c/test_metrics.c src/net/metrics.c
	./tests/c/build/test_metrics
	clang $(CFLAGS_TEST) -o tests/c/build/test_conn tests/c/test_conn.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c -lpthread
	./tests/c/build/test_conn
	clang $(CFLAGS_TSAN) -DM0_WORKQ_DEBUG -o tests/c/build/test_workq tests/c/test_workq.c src/net/workq.c src/net/loop.c src/http/response.c
	./tests/c/build/test_workq
	clang $(CFLAGS_TSAN) -DM0_WORKQ_DEBUG -DM0_WORKQ_TEST_HOOKS -o tests/c/build/test_workq_wakeup tests/c/test_workq_wakeup.c src/net/workq.c
	./tests/c/build/test_workq_wakeup
	clang $(CFLAGS_TSAN) -DM0_WORKQ_DEBUG -o tests/c/build/test_handoff tests/c/test_handoff.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c
	./tests/c/build/test_handoff

test-py: build
	cd tests && ../$(VPY) -m pytest -q -x --timeout=300 -p no:cacheprovider .

# The benchmark tables in docs/ and the README must match their newest artifacts (stdlib only).
test-docs:
	$(PYTHON) -m bench.render --check

test: deps test-c test-py test-docs

# Each libFuzzer driver runs FUZZ_SECONDS over its checked-in seeds (fuzz/run.sh
# prints its executions); each runs even when another fails.
fuzz: deps
	mkdir -p fuzz/build
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_parser fuzz/fuzz_parser.c fuzz/parser_nosimd.c src/http/parser.c
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_ws fuzz/fuzz_ws.c src/http/ws.c src/http/parser.c
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_conn fuzz/fuzz_conn.c $(NET_SRCS) src/http/parser.c src/http/response.c src/http/forwarded.c src/http/proxy_protocol.c -lpthread
	clang $(CFLAGS_FUZZ) -o fuzz/build/fuzz_proxy fuzz/fuzz_proxy.c src/http/forwarded.c src/http/proxy_protocol.c src/http/parser.c
	fuzz/run.sh fuzz/build/fuzz_parser $(FUZZ_SECONDS) fuzz/corpus -dict=fuzz/http.dict; p=$$?; \
	fuzz/run.sh fuzz/build/fuzz_ws $(FUZZ_SECONDS) fuzz/corpus_ws; w=$$?; \
	fuzz/run.sh fuzz/build/fuzz_conn $(FUZZ_SECONDS) fuzz/corpus_conn -dict=fuzz/http.dict; c=$$?; \
	fuzz/run.sh fuzz/build/fuzz_proxy $(FUZZ_SECONDS) fuzz/corpus_proxy -dict=fuzz/proxy.dict; x=$$?; \
	[ $$p -eq 0 ] && [ $$w -eq 0 ] && [ $$c -eq 0 ] && [ $$x -eq 0 ]

# The release check (about a minute, network to PyPI for the build tools): see tools/wheel_check.sh.
# musl-tools: its musl-gcc checks that every source compiles against musl's headers (Alpine wheels).
wheel-check: SYSTEM_PACKAGES += musl-tools
wheel-check: deps
	PYTHON=$(PYTHON) tools/wheel_check.sh

bench: deps build
	$(VPY) -m bench $(SUITES) $(BENCH_ARGS)
	$(VPY) -m bench.render

# Debian names the binary after its version; the newest one installed wins.
CLANG_FORMAT ?= $(shell command -v clang-format || ls /usr/bin/clang-format-[0-9]* 2>/dev/null | sort -V | tail -1)

format:
	$(CLANG_FORMAT) -i $$(find src tests/c fuzz bench -name '*.[ch]')

clean:
	rm -rf build tests/c/build fuzz/build .venv-* .bench-venv bench/floor/build

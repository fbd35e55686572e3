# Two commands do everything on a fresh Debian machine:
#   make serve   build the wasm engine, fetch the default model and serve the page on http://127.0.0.1:$(PORT)
#   make test    every test: native (cargo test) and in headless Chromium (wasm-bindgen-test, Playwright)
# Each installs what it needs first (apt packages, the wasm target, wasm-bindgen-cli, npm packages).
# `make models` fetches the models of models/catalog.json from PyPI (pinned by version and
# sha-256) into models/cache/; the small ones ship in models/.

PORT ?= 8080
MODELS ?= models
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The wasm builds have their own target dir, so native and wasm builds never wait on each other.
WASM_TARGET_DIR := target/wasm
# The `web` profile (Cargo.toml): dependencies built for size, tokenometer for speed.
WASM := $(WASM_TARGET_DIR)/wasm32-unknown-unknown/web/tokenometer.wasm
# wasm-bindgen-cli must be the exact version of the wasm-bindgen crate in Cargo.lock.
WASM_BINDGEN_VERSION := $(shell awk '/^name = "wasm-bindgen"$$/ {getline; gsub(/version = |"/, ""); print}' Cargo.lock)
export CHROMEDRIVER ?= /usr/bin/chromedriver
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: test-size serve site test test-fuzz fuzz-tools lint-quick format test-browsers browser-packages test-native test-wasm test-wasm-threads test-e2e pkg models nightly-tools bench bench-browser bench-lab lint fuzz setup setup-serve apt-packages wasm-tools npm-packages

# Without PyPI the page still serves: its default is then stories260K (shipped), and it says why.
# It serves the folder `make site` writes (the page a static host publishes), with every model.
serve: setup-serve pkg
	python3 models/fetch.py --all || echo "make serve: a model could not be fetched; the page lists it as missing (without SmolLM2 it opens with stories260K)"
	SITE_MODELS=all MODELS=$(MODELS) node www/site.mjs site
	PORT=$(PORT) node www/serve.mjs site

# The page for any static host, in one folder: site/ (docs/site.md says how to publish it).
# SITE_MODELS=all adds Gemma 3 270M; SITE_EXTRA=FILE.json adds models kept on another host.
SITE_MODELS ?= default
site: setup-serve pkg
	python3 models/fetch.py $(if $(filter all,$(SITE_MODELS)),--all) || echo "make site: a model could not be fetched; the site goes without it"
	SITE_MODELS=$(SITE_MODELS) MODELS=$(MODELS) node www/site.mjs site

# Every model of models/catalog.json: SmolLM2-135M-Instruct (98 MB) and Gemma 3 270M (253 MB), and
# its vocabularies: llama.cpp's Qwen2 and Llama 3 vocabulary files out of llama-cpp-python's sdist
# (a 77 MB download, 13.7 MB kept), which the tests need.
models:
	python3 models/fetch.py --all

# Each part is timed into target/test-parts.tsv (tests/ci/part.sh); .ci/run prints the table.
# Lint is part of it: `lint-quick` first (formatting and the JavaScript's types, seconds), and
# clippy's lints with warnings as errors inside every build that follows (below), the fuzz
# build's among them.
PART := tests/ci/part.sh
test: export RUSTC_WORKSPACE_WRAPPER := $(CLIPPY_WRAPPER)
test: export CLIPPY_ARGS := $(CLIPPY_ARGS)
test:
	@rm -f target/test-parts.tsv
	$(PART) setup $(MAKE) setup models
	$(PART) lint $(MAKE) lint-quick
	$(PART) native-compile cargo test --no-run --timings
	$(PART) native-tests cargo test
	$(PART) wasm-tests $(MAKE) test-wasm
	$(PART) pkg $(MAKE) pkg test-size
	$(PART) e2e $(MAKE) test-e2e
	$(PART) fuzz $(MAKE) test-fuzz

# clippy without a second compile: in `make test`, clippy-driver stands in for rustc on
# tokenometer's own units only (cargo's RUSTC_WORKSPACE_WRAPPER; the dependencies are compiled by
# rustc as before), so the native tests, the wasm tests, the page's three builds and the fuzz
# build are each linted as they compile, with warnings as errors: the same lints as `cargo clippy
# -- -D warnings` on those targets, where a separate `cargo clippy` would compile every
# dependency again in check mode (minutes on 2 cores). A plain `cargo test` afterwards recompiles
# tokenometer's own units once, without the wrapper. The tools `make test` installs (cargo install
# wasm-bindgen-cli, cargo-fuzz) are built without it: their code is not ours to lint.
CLIPPY_WRAPPER := clippy-driver
CLIPPY_ARGS := -Dwarnings

# The page's download budget: each wasm engine a visitor may fetch at most 2,500,000 bytes
# gzipped (gzip -9; docs/build.md says what it holds and what was cut to stay under).
WASM_BUDGET := 2500000
test-size:
	@for f in pkg/tokenometer_bg.wasm pkg/relaxed/tokenometer_bg.wasm pkg/threads/tokenometer_bg.wasm; do \
		[ -f $$f ] || continue; s=$$(gzip -9c $$f | wc -c); echo "$$f: $$s bytes gzipped"; \
		[ $$s -le $(WASM_BUDGET) ] || { echo "$$f is $$s bytes gzipped, over the page's budget of $(WASM_BUDGET): see docs/build.md"; exit 1; }; done

test-native:
	cargo test

# wasm-bindgen-test in headless Chromium (CPU backend and WebGPU); the same as
# `wasm-pack test --headless --chrome --profile web --test web`.
test-wasm: test-wasm-threads
	WASM_BINDGEN_TEST_TIMEOUT=600 CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
		CARGO_TARGET_DIR=$(WASM_TARGET_DIR) cargo test --profile web --target wasm32-unknown-unknown --test web --test web_crash

# The threaded build's own test (tests/web_threads.rs: 2 and 3 threads give one thread's bits), in a
# dedicated worker of a cross-origin isolated page, as the page runs it.
test-wasm-threads: nightly-tools
	@if $(HAVE_NIGHTLY); then set -x; WASM_BINDGEN_TEST_TIMEOUT=600 CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
		$(THREADS_CARGO) test $(THREADS_FLAGS) --test web_threads; \
	else $(call NO_THREADS,make test-wasm-threads: no nightly Rust with rust-src here$(comma) so the threaded build and its test are skipped); fi

# The page's third build, pkg/threads/: the CPU engine on several threads, Web Workers sharing the
# module's memory (crate/cpu/threads/). Its std is rebuilt with atomics (-Z build-std), which takes
# nightly Rust and its rust-src; it has no WebGPU (wgpu does not build with wasm threads), so it is
# built without the `gpu` feature. Without nightly the page runs one thread and says why.
NIGHTLY ?= nightly
comma := ,
THREADS_TARGET_DIR := target/wasm-threads
THREADS_RUSTFLAGS := -C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128,+relaxed-simd \
	-C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296 \
	-C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size -C link-arg=--export=__tls_align \
	-C link-arg=--export=__tls_base
THREADS_CARGO := RUSTFLAGS="$(THREADS_RUSTFLAGS)" CARGO_TARGET_DIR=$(THREADS_TARGET_DIR) cargo +$(NIGHTLY)
THREADS_FLAGS := -Z build-std=panic_abort,std --profile web --target wasm32-unknown-unknown --no-default-features
HAVE_NIGHTLY := rustup component list --toolchain $(NIGHTLY) --installed 2>/dev/null | grep -q '^rust-src'
# CI (.ci/run) sets REQUIRE_THREADS=1: CI has nightly and rust-src, so there a skipped threaded build
# or threads test is a failure; for a user without nightly, `make test` skips them with a line.
REQUIRE_THREADS ?=
export REQUIRE_THREADS
NO_THREADS = { echo "$(1)"; if [ -n "$(REQUIRE_THREADS)" ]; then echo "REQUIRE_THREADS is set (CI, which has nightly Rust): what needs nightly is required, so this is a failure"; exit 1; fi; }

# nightly and its rust-src where rustup can get them; where it cannot, a line says so and the
# threaded build is skipped (nothing fails).
nightly-tools:
	@if rustup toolchain list | grep -q '^$(NIGHTLY)'; then \
		rustup component add rust-src --toolchain $(NIGHTLY) >/dev/null 2>&1 || echo "no rust-src for $(NIGHTLY): the threaded build is skipped"; \
		rustup component add clippy --toolchain $(NIGHTLY) >/dev/null 2>&1 || echo "no clippy for $(NIGHTLY): make test's nightly builds (threads, fuzz) cannot be linted"; \
	else rustup toolchain install $(NIGHTLY) --profile minimal --component rust-src,clippy >/dev/null 2>&1 \
		|| echo "rustup could not install $(NIGHTLY) Rust: the threaded build is skipped (the page runs one thread)"; fi

# The page's SmolLM2 entry is tested with a SmolLM2-shaped GGUF of 2 layers (synthetic weights,
# the shipped StarCoder vocabulary made SmolLM2-like) answering its Hugging Face URL.
E2E_SMOLLM2 := target/e2e/smollm2-135m-2layers-q8_0.gguf

# The static-host tests (tests/e2e/site.test.mjs) run on a site of their own, target/e2e/site/.
test-e2e: $(E2E_SMOLLM2)
	SITE_MODELS=default MODELS=$(MODELS) node www/site.mjs target/e2e/site
	MODELS=$(MODELS) node --test tests/e2e/

# The page in Firefox ESR and WebKitGTK (tests/browsers/): not in `make test`, for CI's time.
test-browsers: setup-serve pkg browser-packages
	python3 models/fetch.py --all
	SITE_MODELS=all MODELS=$(MODELS) node www/site.mjs target/e2e/site
	xvfb-run -a node --test tests/browsers/

browser-packages:
	@missing=""; for p in firefox-esr webkit2gtk-driver xvfb; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends $$missing; fi

$(E2E_SMOLLM2): crate/loading/synth.rs crate/loading/gguf_writer.rs examples/smollm2_vocab.rs tests/common/vocab_copies.rs
	mkdir -p target/e2e
	cargo run --quiet --example smollm2_vocab -- $(MODELS)/gguf-vocab/ggml-vocab-starcoder.gguf target/e2e/smollm2-vocab.gguf
	cargo run --quiet -- synth --shape smollm2-135M --layers 2 --q8 --vocab target/e2e/smollm2-vocab.gguf --out $@

# Three builds of the engine; the worker picks one (www/worker.js). pkg/: baseline SIMD128, which
# every browser with WebAssembly SIMD runs. pkg/relaxed/: tokenometer's own code also with relaxed
# SIMD (faster Q4_0 kernels), the dependencies as they are (`cargo rustc` passes the flag to this
# crate only, so they are not built twice).
pkg: nightly-tools
	CARGO_TARGET_DIR=$(WASM_TARGET_DIR) cargo build --profile web --target wasm32-unknown-unknown --lib
	wasm-bindgen --target web --remove-name-section --out-dir pkg $(WASM)
	CARGO_TARGET_DIR=$(WASM_TARGET_DIR) cargo rustc --profile web --target wasm32-unknown-unknown --lib \
		-- -C target-feature=+relaxed-simd
	wasm-bindgen --target web --remove-name-section --out-dir pkg/relaxed $(WASM)
	@if $(HAVE_NIGHTLY); then set -x; $(THREADS_CARGO) build $(THREADS_FLAGS) --lib && \
		wasm-bindgen --target web --remove-name-section --out-dir pkg/threads $(THREADS_TARGET_DIR)/wasm32-unknown-unknown/web/tokenometer.wasm; \
	else rm -rf pkg/threads; $(call NO_THREADS,make pkg: no nightly Rust with rust-src here$(comma) so no threaded build (pkg/threads/): the page runs the CPU engine on one thread and says so); fi

bench: setup-serve
	cargo build --release
	mkdir -p target/synth
	[ -f target/synth/stories15M.bin ] || target/release/tokenometer synth --shape stories15M --out target/synth/stories15M.bin
	for q in f32 q8 q4; do target/release/tokenometer bench --model target/synth/stories15M.bin \
		--tokenizer $(MODELS)/llama2-tokenizer/tokenizer.bin --backend cpu --quant $$q --runs 5; done
	for q in f32 q8 q4; do target/release/tokenometer bench --model target/synth/stories15M.bin \
		--tokenizer $(MODELS)/llama2-tokenizer/tokenizer.bin --backend cpu --quant $$q --concurrency 1,2,4,8,16; done

# The concurrency lab in headless Chromium: the page's worker (CPU, wasm) at 1 and 8 users.
bench-lab: setup-serve pkg
	cargo build --release
	mkdir -p target/synth
	[ -f target/synth/stories15M.bin ] || target/release/tokenometer synth --shape stories15M --out target/synth/stories15M.bin
	node tests/bench/lab.mjs target/synth/stories15M.bin $(MODELS)/llama2-tokenizer/tokenizer.bin

# The page's worker beside llama.cpp compiled to wasm (@wllama/wllama, one thread) in headless
# Chromium: synthetic stories15M as llama2.c .bin for us and as GGUF F32/Q8_0/Q4_0 for wllama,
# written by llama.cpp's own writer (PyPI `gguf`) with the converter in models/stories260K/.
PEERS := target/peers
bench-browser: setup-serve pkg
	cargo build --release
	mkdir -p target/synth $(PEERS)
	[ -f target/synth/stories15M.bin ] || target/release/tokenometer synth --shape stories15M --out target/synth/stories15M.bin
	python3 -c 'import gguf' 2>/dev/null || pip install gguf==0.19.0
	for q in f32 q8_0 q4_0; do [ -f $(PEERS)/stories15M-$$q.gguf ] || python3 $(MODELS)/stories260K/convert_llama2c_to_gguf.py \
		target/synth/stories15M.bin $(PEERS)/stories15M-$$q.gguf --outtype $$q --tokenizer-bin $(MODELS)/llama2-tokenizer/tokenizer.bin; done
	node tests/bench/browser.mjs target/synth/stories15M.bin $(MODELS)/llama2-tokenizer/tokenizer.bin \
		$(PEERS)/stories15M-f32.gguf $(PEERS)/stories15M-q8_0.gguf $(PEERS)/stories15M-q4_0.gguf

# Coverage-guided fuzzing of every parser (nightly + cargo-fuzz), from the committed seeds
# (fuzz/seeds/, written by fuzz/seeds.py). `make fuzz`: each target for FUZZ_SECONDS, optimized,
# its corpus growing in fuzz/corpus/. `make test-fuzz` (the last part of `make test`): each target
# for FUZZ_TEST_SECONDS, two at a time (one a core), in fuzz/Cargo.toml's quicker-to-build dev
# profile (overflow checks on), from the seeds alone. Either fails on a crash, an input that takes
# over FUZZ_TIMEOUT seconds or one that makes it hold over FUZZ_RSS_MB; the input is left in
# fuzz/artifacts/<target>/ and `cargo +nightly fuzz run <target> <input>` replays it.
FUZZ_SECONDS ?= 600
FUZZ_TEST_SECONDS ?= 30
FUZZ_TIMEOUT ?= 10
FUZZ_RSS_MB ?= 3072
export FUZZ_TIMEOUT FUZZ_RSS_MB NIGHTLY
FUZZ_TARGETS ?= llama2c llama2c_sized huggingface tokenizer_bin tokenizer_json gguf sse requests
CARGO_FUZZ_VERSION := 0.13.2
fuzz-tools: nightly-tools
	@cargo fuzz --version 2>/dev/null | grep -q ' $(CARGO_FUZZ_VERSION)$$' || env -u RUSTC_WORKSPACE_WRAPPER cargo install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked

fuzz: fuzz-tools
	for t in $(FUZZ_TARGETS); do FUZZ_PROFILE=--release tests/ci/fuzz.sh $$t $(FUZZ_SECONDS) || exit 1; done

test-fuzz: fuzz-tools
	@if $(HAVE_NIGHTLY); then set -x; cargo +$(NIGHTLY) fuzz build --dev --sanitizer none && \
		printf '%s\n' $(FUZZ_TARGETS) | FUZZ_PROFILE=--dev xargs -P 2 -I{} tests/ci/fuzz.sh {} $(FUZZ_TEST_SECONDS); \
	else $(call NO_THREADS,make test-fuzz: no nightly Rust here$(comma) so the fuzz targets are not run); fi

# The page's JavaScript and the Node scripts beside it, formatted by Prettier (pinned in
# package.json, configured in .prettierrc.json): `make format` applies it and rustfmt.
JS_FILES := 'www/*.{js,mjs}' 'tests/e2e/*.mjs' 'tests/browsers/*.mjs' 'tests/bench/*.{js,mjs}'
format:
	cargo fmt
	cd fuzz && cargo fmt
	node_modules/.bin/prettier --write --log-level warn $(JS_FILES)

# The quick part of lint, run first in `make test`: rustfmt (the crate and the fuzz crate),
# TypeScript's checker over every script of www/ in its own globals (the page's, the worker's, the
# service worker's, Node's: www/tsconfig*.json) and Prettier.
lint-quick:
	cargo fmt --check
	cd fuzz && cargo fmt --check
	for c in www/tsconfig.json www/tsconfig.worker.json www/tsconfig.sw.json www/tsconfig.node.json; do \
		node_modules/.bin/tsc -p $$c || exit 1; done
	node_modules/.bin/prettier --check --log-level warn $(JS_FILES)

# All of it with `cargo clippy` (each target, the build without the GPU too) and rustdoc's links.
lint: lint-quick
	cargo clippy --all-targets -- -D warnings
	CARGO_TARGET_DIR=$(WASM_TARGET_DIR) cargo clippy --target wasm32-unknown-unknown --lib --tests -- -D warnings
	CARGO_TARGET_DIR=$(WASM_TARGET_DIR) cargo clippy --target wasm32-unknown-unknown --lib --tests -- -D warnings \
		-C target-feature=+relaxed-simd
	# The build without the GPU (the threaded one's features), natively and threaded.
	cargo clippy --no-default-features --lib -- -D warnings
	@if $(HAVE_NIGHTLY); then set -x; $(THREADS_CARGO) clippy $(THREADS_FLAGS) --lib --tests -- -D warnings; fi
	RUSTDOCFLAGS="-D warnings" cargo doc --lib --no-deps --document-private-items
	RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR=$(WASM_TARGET_DIR) cargo doc --target wasm32-unknown-unknown \
		--lib --no-deps --document-private-items
	# The fuzz crate compiles the parsers from crate/ by path: check that it still builds.
	cd fuzz && cargo clippy --quiet -- -D warnings

setup: apt-packages wasm-tools npm-packages nightly-tools
setup-serve: wasm-tools npm-packages nightly-tools

apt-packages:
	@missing=""; for p in mesa-vulkan-drivers chromium chromium-driver; do \
		dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	command -v python3 >/dev/null || missing="$$missing python3"; \
	if [ -n "$$missing" ]; then $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends $$missing; fi

wasm-tools:
	rustup target add wasm32-unknown-unknown
	@if ! wasm-bindgen --version 2>/dev/null | grep -q " $(WASM_BINDGEN_VERSION)$$"; then \
		command -v node >/dev/null || ($(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends nodejs npm); \
		env -u RUSTC_WORKSPACE_WRAPPER cargo install wasm-bindgen-cli --version $(WASM_BINDGEN_VERSION) --force; fi

npm-packages:
	@command -v npm >/dev/null || ($(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends nodejs npm)
	npm ci --no-audit --no-fund

//! `tokenometer serve`: the engine behind OpenAI's HTTP API, every connected user in one
//! continuously batched decode (`worker.rs`), and the page served beside it so that a room's
//! phones can open it from a laptop. docs/serve.md is the user's guide.
//!
//! HTTP is axum on tokio and hyper. The accept loop is our own (hyper-util) so that a client that
//! sends half a request is cut off ([`HEADER_TIMEOUT`], [`BODY_TIMEOUT`]) and connections are
//! capped ([`MAX_CONNECTIONS`]: past it, new ones wait in the kernel's backlog).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::services::ServeDir;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::decode::Engine;
use crate::error::Error;

mod http;
mod metrics;
mod worker;

pub use http::{BODY_TIMEOUT, HEADER_TIMEOUT, KEEP_ALIVE, MAX_BODY_BYTES, MAX_CONNECTIONS};
pub use worker::Limits;

/// The share of the machine's memory `serve` lets KV caches hold unless told (`--kv-memory`).
pub const KV_MEMORY_SHARE: u64 = 4;
/// The KV budget where the machine's memory cannot be read.
const KV_MEMORY_FALLBACK: u64 = 2_000_000_000;

/// The KV budget `serve` holds unless told: a quarter of the machine's memory (Linux's
/// `/proc/meminfo`), else 2 GB; with the sentence that says where it came from.
pub fn default_kv_memory() -> (u64, String) {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    });
    match total {
        Some(total) => (
            total / KV_MEMORY_SHARE,
            format!(
                "a quarter of this machine's {}; --kv-memory to change it",
                bytes_said(total)
            ),
        ),
        None => (
            KV_MEMORY_FALLBACK,
            "this machine's memory could not be read; --kv-memory to change it".into(),
        ),
    }
}

/// Each connection's send buffer, in bytes.
pub const SEND_BUFFER: usize = 256 << 10;

/// Files the process keeps for itself beside its connections (the model, the page's files,
/// the runtime's own descriptors).
pub const RESERVED_FILES: usize = 64;

/// The most connections served at once: [`MAX_CONNECTIONS`], or fewer where the process's open
/// file limit (Linux's `/proc/self/limits`, the soft one) leaves room for fewer, keeping
/// [`RESERVED_FILES`] for itself; with the limit it read, if any. Past the cap new connections
/// wait in the kernel's backlog instead of failing the accept loop with "too many open files".
pub fn connection_cap() -> (usize, Option<usize>) {
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            let line = l.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse::<usize>().ok()
        });
    let cap = limit.map_or(MAX_CONNECTIONS, |files| {
        MAX_CONNECTIONS.min(files.saturating_sub(RESERVED_FILES).max(1))
    });
    (cap, limit)
}

/// Bytes as a person reads them: `64.0 MB`, `2.1 GB`.
pub fn bytes_said(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else {
        format!("{:.1} MB", b / 1e6)
    }
}

/// Whether `root` is a folder `make site` wrote (the page whole, `index.html` at its top), not a
/// checkout (`www/`, `pkg/` and the models beside each other).
pub fn is_site(root: &std::path::Path) -> bool {
    root.join("index.html").is_file()
}

/// Whether `root` holds a page to serve: a checkout's `www/index.html` or a site (`is_site`).
pub fn is_page(root: &std::path::Path) -> bool {
    root.join("www").join("index.html").is_file() || is_site(root)
}

/// What `tokenometer serve` was asked for.
pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    pub limits: Limits,
    /// Origins allowed to call the API from another page (`*` for any); none by default.
    pub cors: Option<String>,
    /// The checkout whose www/ and pkg/ are the page, or a folder `make site` wrote (none: the
    /// API alone).
    pub page: Option<PathBuf>,
    /// The models folder the page's model list reads.
    pub models: PathBuf,
    /// Stop by itself after this long (tests).
    pub exit_after: Option<Duration>,
    /// How long a client may take to send its headers ([`HEADER_TIMEOUT`]) and its body
    /// ([`BODY_TIMEOUT`]).
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    /// The most bytes the request bodies being read may hold together (`http::BodyBudget`).
    pub body_memory: usize,
}

/// Load the engine (on its own thread), listen, and serve until Ctrl-C (or `exit_after`).
pub fn serve(
    load: impl FnOnce() -> Result<Engine, Error> + Send + 'static,
    options: ServeOptions,
) -> Result<(), Error> {
    if let Some(s) = &options.limits.speculation
        && !matches!(s.source, crate::decode::DraftSource::Lookup)
    {
        return Err(Error::Unsupported(
            "serve speculates with lookup only (--speculate lookup)".into(),
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Unsupported(format!("cannot start the HTTP runtime: {e}")))?;
    runtime.block_on(async move {
        // Bind first: a port in use is said before the model loads.
        let listener = listen(&options.host, options.port).await.map_err(|e| {
            Error::Unsupported(format!(
                "cannot listen on {}:{} ({e}); choose another --port or --host",
                options.host, options.port
            ))
        })?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::Unsupported(format!("cannot read the listening address: {e}")))?;
        let limits = options.limits.clone();
        let (commands, shared, info, chat, encoder) =
            tokio::task::spawn_blocking(move || worker::start(load, limits))
                .await
                .map_err(|e| Error::Unsupported(format!("the engine's start failed: {e}")))??;
        let app = Arc::new(http::App {
            commands,
            shared,
            info,
            chat,
            encoder: Arc::new(encoder),
            body_timeout: options.body_timeout,
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        });
        let router = router(app.clone(), &options);
        announce(&app, address, &options);
        let (exit_after, header_timeout) = (options.exit_after, options.header_timeout);
        let stop = async move {
            match exit_after {
                Some(after) => {
                    tokio::select! {
                        _ = tokio::time::sleep(after) => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                }
                None => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        };
        accept(listener, router, header_timeout, stop).await;
        Ok(())
    })
}

/// The API, CORS where asked, the page's files with the headers its threads need.
fn router(app: Arc<http::App>, options: &ServeOptions) -> Router {
    let budget = http::BodyBudget::new(options.body_memory, bytes_said(options.body_memory as u64));
    let mut api = http::api(app)
        .layer(axum::middleware::from_fn_with_state(
            budget,
            http::BodyBudget::admit,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(RequestBodyTimeoutLayer::new(options.body_timeout));
    if let Some(origins) = &options.cors {
        let allow = if origins.trim() == "*" {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(
                origins
                    .split(',')
                    .filter_map(|o| HeaderValue::from_str(o.trim()).ok()),
            )
        };
        api = api.layer(
            CorsLayer::new()
                .allow_origin(allow)
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION]),
        );
    }
    let server = HeaderValue::from_static(concat!("tokenometer/", env!("CARGO_PKG_VERSION")));
    let api = api.layer(SetResponseHeaderLayer::overriding(header::SERVER, server));
    let Some(root) = &options.page else {
        return api;
    };
    // Cross-origin isolated (precise timers, the CPU threads' shared memory), as www/serve.mjs.
    let isolated = |name: &'static str, value: &'static str| {
        SetResponseHeaderLayer::overriding(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        )
    };
    // `make site`'s folder is the page whole; a checkout's page is www/ with pkg/ and the models
    // beside it, at the same URLs.
    let page = if is_site(root) {
        Router::new().fallback_service(ServeDir::new(root))
    } else {
        Router::new()
            .nest_service("/pkg", ServeDir::new(root.join("pkg")))
            .nest_service("/models", ServeDir::new(&options.models))
            .fallback_service(ServeDir::new(root.join("www")))
    };
    let page = page
        .layer(isolated("cross-origin-opener-policy", "same-origin"))
        .layer(isolated("cross-origin-embedder-policy", "require-corp"))
        .layer(isolated("cross-origin-resource-policy", "same-origin"))
        .layer(isolated("cache-control", "no-cache"));
    api.merge(page)
}

/// Say where the server is, and who can reach it.
fn announce(app: &http::App, address: SocketAddr, options: &ServeOptions) {
    let url = format!("http://{address}/");
    println!(
        "tokenometer: serving {} ({}, {}) on {url} (API: {url}v1, room: {url}room)",
        app.info.name, app.info.quant, app.info.backend
    );
    {
        let shared = app.shared.lock().unwrap();
        println!(
            "tokenometer: that KV budget holds {} positions of {:.1} KB over the batch ({}'s \
             context: {})",
            shared.kv_positions,
            shared.kv_bytes_per_position as f64 / 1e3,
            app.info.name,
            app.info.context_length
        );
    }
    match connection_cap() {
        (cap, Some(files)) => println!(
            "tokenometer: at most {cap} connections at once (this process may open {files} \
             files; ulimit -n raises it); more wait to be accepted"
        ),
        (cap, None) => println!("tokenometer: at most {cap} connections at once"),
    }
    if options.page.is_none() {
        println!("tokenometer: the page's files were not found, so only the API is served");
    }
    if address.ip().is_loopback() {
        println!(
            "tokenometer: only this machine can connect; --host 0.0.0.0 opens it to the network \
             (a room's phones)"
        );
    } else {
        println!(
            "tokenometer: anyone who can reach this machine on port {} can use it: open \
             http://THIS-MACHINE'S-ADDRESS:{}/ on the phones",
            address.port(),
            address.port()
        );
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
}

/// Connections the kernel holds for the server until it accepts them. Rust's standard listener
/// asks for 128: a room's phones connecting at once, or a flood of idle connections, overflowed
/// it, and each connection past it waited for its client to send again (1 s, then 2 s, 4 s):
/// 5,000 connections took 25-30 s to open against a stories260K server, about 200 a second, with
/// the server idle between the client's retries. The kernel caps it at `net.core.somaxconn`.
const BACKLOG: u32 = 4096;

/// A listener on `host`:`port` (the first address `host` names) with a backlog of [`BACKLOG`].
async fn listen(host: &str, port: u16) -> std::io::Result<TcpListener> {
    let mut last = None;
    for address in tokio::net::lookup_host((host, port)).await? {
        let socket = if address.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(address).and_then(|()| socket.listen(BACKLOG)) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("the host names no address")))
}

/// Serve connections until `stop` ends: each on its own task, at most [`MAX_CONNECTIONS`] at once,
/// each cut off when its headers do not come within `header_timeout`.
async fn accept(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    stop: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(connection_cap().0));
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            _ = &mut stop => return,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of file descriptors, say: wait and try again rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => return,
        };
        let _ = stream.set_nodelay(true);
        // A fixed send buffer (Linux would grow it to 4 MiB): a client that stops reading fills
        // it within seconds, and then `--write-timeout` ends its request. 256 KiB still moves a
        // model file at 25 MB/s over a 10 ms round trip.
        let _ = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER);
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let mut http1 = hyper::server::conn::http1::Builder::new();
            http1
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let _ = http1.serve_connection(TokioIo::new(stream), service).await;
            drop(permit);
        });
    }
}

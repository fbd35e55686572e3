//! One error type for the whole engine: every bad input ends here with a sentence a user can act on.

use std::fmt;

/// What went wrong, in words a user of the CLI or the page can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A file could not be read at all.
    Io(String),
    /// A file could not be written (a missing folder, no permission, a full disk).
    Write(String),
    /// The model file is truncated, foreign, or has an impossible header.
    BadModel(String),
    /// The tokenizer file cannot be parsed, or does not fit the model.
    BadTokenizer(String),
    /// The prompt cannot be run (empty, or longer than the context).
    BadPrompt(String),
    /// A setting that this backend cannot run (q4 on the CPU backend, say).
    Unsupported(String),
    /// The compute device could not be created, or failed.
    Device(String),
    /// An endpoint elsewhere could not be reached, refused the request, or broke its stream.
    Endpoint(String),
    /// The GPU device was lost (driver reset, GPU removed, browser reclaimed it). Nothing more runs
    /// on it in this process: the page restarts its worker, the CLI has to be run again.
    DeviceLost(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(m) => write!(f, "cannot read file: {m}"),
            Error::Endpoint(m) => write!(f, "endpoint: {m}"),
            Error::Write(m) => write!(f, "cannot write file: {m}"),
            Error::BadModel(m) => write!(f, "bad model file: {m}"),
            Error::BadTokenizer(m) => write!(f, "bad tokenizer: {m}"),
            Error::BadPrompt(m) => write!(f, "bad prompt: {m}"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Device(m) => write!(f, "device error: {m}"),
            Error::DeviceLost(m) => write!(f, "the GPU device was lost ({m})"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// `n` and its noun, singular or plural as `n` asks: "1 token", "2 tokens", for messages.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// At most 64 characters of text that came from outside (a file's name field, a client's
/// string), for an error message: a hostile file or request may hold a megabyte there.
pub fn clip(text: &str) -> String {
    clip_to(text, 64)
}

/// At most `chars` characters of `text` (a server's error message, which says more than a name).
pub fn clip_to(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((i, _)) => format!("{}... ({} bytes)", &text[..i], text.len()),
        None => text.to_string(),
    }
}

#[cfg(panic = "unwind")]
thread_local! {
    static CONTAINING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run a call into a third-party library that is known to panic on some malformed input (the
/// `tokenizers` crate's JSON loader does, found by fuzzing), turning a panic into `Err(message)`.
/// Where panics unwind (natively) it is caught; in wasm a panic aborts, and the page's worker
/// reports it and restarts. Callers validate what they can first, so this is the last line.
pub fn contain_panic<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    #[cfg(panic = "unwind")]
    {
        CONTAINING.with(|c| c.set(true));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        CONTAINING.with(|c| c.set(false));
        result.map_err(|payload| {
            payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into())
        })
    }
    #[cfg(not(panic = "unwind"))]
    {
        Ok(f())
    }
}

/// Keep panics that [`contain_panic`] catches off stderr (the CLI prints one line per error);
/// every other panic still goes to the previous hook.
#[cfg(panic = "unwind")]
pub fn quiet_contained_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !CONTAINING.with(|c| c.get()) {
            previous(info);
        }
    }));
}

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
    /// The GPU device was lost (driver reset, GPU removed, browser reclaimed it). Nothing more runs
    /// on it in this process: the page restarts its worker, the CLI has to be run again.
    DeviceLost(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(m) => write!(f, "cannot read file: {m}"),
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

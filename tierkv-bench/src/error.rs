//! The bench's error type: every failure is a message a person can act on.
//!
//! `Refused` is special: a configuration that cannot run here (an engine not
//! built in, options the engine rejects, not enough free space). `compare`
//! reports it for that configuration and goes on with the others.

use std::fmt;

/// What went wrong.
#[derive(Debug)]
pub enum Error {
    /// This configuration cannot run (invalid options, engine not built in,
    /// not enough space); other configurations may.
    Refused(String),
    /// Bad command-line input.
    Usage(String),
    /// An I/O error, with what we were doing.
    Io {
        /// What we were doing.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An engine returned an error during a run.
    Engine(String),
    /// Anything else (JSON, plotting).
    Other(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Refused(m) => write!(f, "refused: {m}"),
            Error::Usage(m) => write!(f, "usage: {m}"),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Engine(m) => write!(f, "engine error: {m}"),
            Error::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

/// The bench's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Wraps an I/O error with what we were doing.
pub fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

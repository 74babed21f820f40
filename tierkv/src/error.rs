//! The one error type of the engine.
//!
//! Every fallible operation returns [`Result`]. Data read back from disk or
//! PM that fails a check is [`Error::Corruption`] naming *where* (file or
//! region, and byte offset); invalid options are [`Error::InvalidOptions`]
//! naming the option. Nothing that comes from disk or a caller panics.

use std::fmt;
use std::io;

/// Where a piece of corrupt data was found: a file or PM region, and an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// File path or PM region name (e.g. `pm:/dev/shm/db/pm.region`).
    pub source: String,
    /// Byte offset inside the file or region.
    pub offset: u64,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at offset {}", self.source, self.offset)
    }
}

/// Every error tierkv reports.
#[derive(Debug)]
pub enum Error {
    /// An I/O error from the operating system, with what was being done.
    Io {
        /// What the engine was doing (e.g. `append to 000012.log`).
        context: String,
        /// The underlying OS error.
        source: io::Error,
    },
    /// Stored data failed a checksum, a magic number or a structural check.
    Corruption {
        /// Where the corrupt bytes are.
        at: Location,
        /// What was wrong.
        what: String,
    },
    /// An option or combination of options is invalid; the message names it.
    InvalidOptions(String),
    /// A caller-supplied argument is invalid (e.g. an empty or oversized key).
    InvalidArgument(String),
    /// The database directory is locked by another opener.
    Locked(String),
    /// The directory is not a tierkv database, or has an incompatible version.
    NotADatabase(String),
    /// The database was stopped by an earlier background error and only
    /// accepts reads until it is reopened. Holds that error's message.
    Background(String),
    /// The database is closed.
    Closed,
}

impl Error {
    /// A corruption error at `source`:`offset`.
    pub fn corruption(source: impl Into<String>, offset: u64, what: impl Into<String>) -> Self {
        Error::Corruption {
            at: Location {
                source: source.into(),
                offset,
            },
            what: what.into(),
        }
    }

    /// An I/O error with context.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// True if this is an I/O error caused by a full device (ENOSPC / EDQUOT).
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::Io { source, .. } => matches!(source.raw_os_error(), Some(28) | Some(122)),
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "I/O error: {context}: {source}"),
            Error::Corruption { at, what } => write!(f, "corruption in {at}: {what}"),
            Error::InvalidOptions(m) => write!(f, "invalid options: {m}"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Locked(m) => write!(f, "database is locked: {m}"),
            Error::NotADatabase(m) => write!(f, "not a tierkv database: {m}"),
            Error::Background(m) => write!(f, "database stopped by a background error: {m}"),
            Error::Closed => write!(f, "database is closed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Clone for Error {
    fn clone(&self) -> Self {
        match self {
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: match source.raw_os_error() {
                    Some(code) => io::Error::from_raw_os_error(code),
                    None => io::Error::new(source.kind(), source.to_string()),
                },
            },
            Error::Corruption { at, what } => Error::Corruption {
                at: at.clone(),
                what: what.clone(),
            },
            Error::InvalidOptions(m) => Error::InvalidOptions(m.clone()),
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::Locked(m) => Error::Locked(m.clone()),
            Error::NotADatabase(m) => Error::NotADatabase(m.clone()),
            Error::Background(m) => Error::Background(m.clone()),
            Error::Closed => Error::Closed,
        }
    }
}

/// The engine's result type.
pub type Result<T> = std::result::Result<T, Error>;

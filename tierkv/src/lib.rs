//! tierkv: an LSM-tree key-value engine for DRAM, persistent memory and SSD.
//!
//! See `docs/` and DESIGN.md for the architecture: the storage seam
//! ([`storage`]), the design seam ([`design`]), versions ([`version`]) and
//! tables ([`sst`]).

#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod batch;
pub mod coding;
pub mod compaction;
pub mod db;
pub mod design;
pub mod error;
pub mod inspect;
pub mod iter;
pub mod key;
pub mod lost;
pub mod memtable;
pub mod options;
pub mod sched;
pub mod sst;
pub mod stats;
pub mod storage;
pub mod version;
pub mod wal;

pub use batch::WriteBatch;
pub use db::{
    CheckpointOptions, CheckpointStats, Db, MigrateReport, Range, ReadOptions, RepairReport,
    Snapshot, WriteOptions,
};
pub use error::{Error, Result};
pub use iter::DbIterator;
pub use options::{NvAppend, NvRelink, Options, PmBackend, Preset, WalPlacement, WalRecovery};
pub use sst::Compression;

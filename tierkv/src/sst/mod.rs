//! Sorted string tables: the immutable SSD files of the LSM tree.
//!
//! docs/format/sst.md has the whole layout with a worked example; in short:
//!
//! ```text
//! ┌──────────────┬─────────┐
//! │ data block 0 │ trailer │  entries with shared-prefix keys, restarts (block.rs)
//! ├──────────────┼─────────┤
//! │     …        │         │
//! ├──────────────┼─────────┤
//! │ filter       │ trailer │  bloom over user keys (bloom.rs)
//! ├──────────────┼─────────┤
//! │ properties   │ trailer │  counts, key range, seqno range (builder.rs)
//! ├──────────────┼─────────┤
//! │ index        │ trailer │  separator key → data block handle (index.rs)
//! ├──────────────┴─────────┤
//! │ footer (64 B)          │  3 handles, version, crc, magic "tierkSST"
//! └────────────────────────┘
//! trailer = type u8 ‖ masked crc32c(stored ‖ type) u32le
//!           type 0 none, 1 LZ4, 2 Zstd (data blocks only; compress.rs)
//! ```
//!
//! Writing: [`TableBuilder`] (flush and compaction output). Reading:
//! [`Table`] implements [`crate::iter::TableReader`] (bloom → index → one
//! data block per get) and a two-level iterator; data blocks are shared
//! through the sharded LRU [`BlockCache`].
//!
//! Invariants: keys in a table are strictly increasing internal keys
//! ([`crate::key::compare_internal`]); every block is checksummed; a table
//! is immutable once `finish` returned. Corrupt bytes are reported as
//! `Error::Corruption` naming the file and the block's offset.

pub mod block;
pub mod bloom;
pub mod builder;
pub mod cache;
pub mod compress;
pub mod index;
pub mod reader;

pub use builder::{TableBuilder, TableOptions, TableProps};
pub use cache::{BlockCache, Lookup};
pub use compress::Compression;
pub use reader::{DataBlockInfo, ReadConfig, Table, TableCounters, TableIter};

/// The file name of SST `id` in the database directory.
pub fn sst_file_name(id: u64) -> String {
    format!("{id:06}.sst")
}

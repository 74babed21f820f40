//! `tierkv-bench`: db_bench and YCSB workloads on tierkv and RocksDB side by
//! side, open-loop tail latency, JSON records and plots (BENCH.md).
//!
//! ```text
//! tierkv-bench                                   # tiny fillrandom + readrandom on tierkv:classic
//! tierkv-bench --benchmarks=fillrandom,readrandom --config rocksdb-ssd --scale small --histogram
//! tierkv-bench compare --configs tierkv:classic,rocksdb-ssd --benchmarks fillrandom,readrandom \
//!              --scale medium --json out.json
//! tierkv-bench compare --configs tierkv:classic,rocksdb-ssd --benchmarks ycsb-load,ycsb-a \
//!              --scale small --rate_fraction 0.8 --rate_of rocksdb-ssd --json ycsb.json
//! tierkv-bench report out.json                   # PNG + SVG plots and summary.md
//! ```

#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod db_bench;
pub mod engines;
pub mod error;
pub mod keys;
pub mod metrics;
pub mod open_loop;
pub mod report;
pub mod runner;
pub mod scale;
pub mod suite;
pub mod sys;
pub mod workload;

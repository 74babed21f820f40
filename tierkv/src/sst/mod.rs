//! Sorted string tables (in progress).

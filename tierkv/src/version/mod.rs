//! Versions: the immutable set of tables, the edits that change it, and the
//! MANIFEST that records them.

pub mod edit;

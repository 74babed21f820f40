//! tierkv-bench (in progress).
fn main() {}

//! The replicated-write bench (see README).

/// Bench flags.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

pub async fn run(_a: BenchArgs) -> Result<(), String> {
    Err("bench: not yet".into())
}

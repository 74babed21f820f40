//! What each design contributes to `tierkv pm` and `tierkv verify`: one
//! function to describe its PM structures and one to check them,
//! dispatched on the preset. A design that adds PM structures adds its arm
//! to both (the page allocator and the PM WALs, common to every design, are
//! [`crate::inspect`]'s).
//!
//! | preset | PM structures |
//! |---|---|
//! | `classic`, `vlsm` | none (SSTs only; a WAL on PM is the allocator's) |
//! | `triangle`, `matrix` | the rows (RowTables) of the PM container and its MANIFEST state ([`super::container::inspect`]) |
//! | `rangetab` | the layout, the buffers' records and every buffer table ([`super::rangetab::inspect`]) |
//! | `nvcache` | its logs (which are the design's, not PM WALs) and every NVTable ([`super::nvcache::inspect`]) |
//! | `tlsm` | every skip list and the data runs it links into ([`super::tlsm::inspect`]) |

use std::sync::Arc;

use crate::error::Result;
use crate::inspect::{Check, ManifestState, Node};
use crate::iter::TableReader;
use crate::options::Preset;
use crate::storage::alloc::PageRun;
use crate::storage::PmRegion;

/// Whether the logs the MANIFEST lists in PM are the design's own (its
/// [`super::Design::log`]) rather than the engine's PM WAL extent chains.
pub fn owns_pm_logs(design: Preset) -> bool {
    design == Preset::NvCache
}

/// PM the design owns beyond its tables' `pm_pages` and the engine's PM
/// WALs (the read-only twin of [`super::Design::live_pm_runs`]), each with
/// what owns it.
pub fn live_runs(
    design: Preset,
    region: &Arc<dyn PmRegion>,
    state: &ManifestState,
) -> Vec<(String, PageRun)> {
    match design {
        Preset::Classic | Preset::Vlsm | Preset::Triangle | Preset::Matrix => Vec::new(),
        Preset::RangeTab => super::rangetab::inspect::live_runs(state),
        Preset::NvCache => super::nvcache::inspect::live_runs(region.as_ref(), state),
        Preset::Tlsm => super::tlsm::inspect::live_runs(region, state),
    }
}

/// Reads every entry of `table` (checking what its reader checks: with
/// `verify_checksums` readers, every checksum); returns the entry count.
pub fn scan(table: Arc<dyn TableReader>) -> Result<u64> {
    let mut it = table.iter(false);
    it.seek_to_first();
    let mut n = 0u64;
    while it.valid() {
        n += 1;
        it.next();
    }
    it.status()?;
    Ok(n)
}

/// Describes the design's structures in the PM region, as the manifest
/// state lists them.
pub fn describe_pm(
    design: Preset,
    region: &Arc<dyn PmRegion>,
    state: &ManifestState,
) -> Result<Vec<Node>> {
    match design {
        Preset::Classic | Preset::Vlsm => Ok(Vec::new()),
        Preset::Triangle | Preset::Matrix => super::container::inspect::describe(region, state),
        Preset::RangeTab => super::rangetab::inspect::describe(region, state),
        Preset::NvCache => super::nvcache::inspect::describe(region, state),
        Preset::Tlsm => super::tlsm::inspect::describe(region, state),
    }
}

/// Checks every checksum of the design's structures in the PM region.
pub fn verify_pm(design: Preset, region: &Arc<dyn PmRegion>, state: &ManifestState) -> Vec<Check> {
    match design {
        Preset::Classic | Preset::Vlsm => Vec::new(),
        Preset::Triangle | Preset::Matrix => super::container::inspect::verify(region, state),
        Preset::RangeTab => super::rangetab::inspect::verify(region, state),
        Preset::NvCache => super::nvcache::inspect::verify(region, state),
        Preset::Tlsm => super::tlsm::inspect::verify(region, state),
    }
}

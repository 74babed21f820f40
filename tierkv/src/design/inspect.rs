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
//! | `rangetab`, `nvcache`, `tlsm` | not in this build |

use std::sync::Arc;

use crate::error::Result;
use crate::inspect::{Check, ManifestState, Node};
use crate::options::Preset;
use crate::storage::PmRegion;

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
        Preset::RangeTab | Preset::NvCache | Preset::Tlsm => Ok(vec![Node::new(format!(
            "design `{design}`: its PM structures are not described by this build"
        ))]),
    }
}

/// Checks every checksum of the design's structures in the PM region.
pub fn verify_pm(design: Preset, region: &Arc<dyn PmRegion>, state: &ManifestState) -> Vec<Check> {
    match design {
        Preset::Classic | Preset::Vlsm => Vec::new(),
        Preset::Triangle | Preset::Matrix => super::container::inspect::verify(region, state),
        Preset::RangeTab | Preset::NvCache | Preset::Tlsm => vec![Check::new(
            format!("design `{design}`"),
            Err(crate::Error::InvalidOptions(format!(
                "design `{design}` is not available in this build: its PM structures cannot be checked"
            ))),
        )],
    }
}

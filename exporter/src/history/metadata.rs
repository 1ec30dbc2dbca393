//! The unit of a DCGM family whose name does not prove it (a percent or a 0..1 ratio), from
//! Prometheus' metadata API: `GET /api/v1/metadata?metric=NAME` lists the `# HELP` text of
//! each target that exposes the family, as the scrapes saw it. A history holds no help
//! text, and a window whose values are only 0 and 1 cannot tell 1 % from 100 % by them.

use super::api::Client;
use serde::Deserialize;
use std::collections::BTreeMap;
use truthscale_core::parse::dcgm_text;
use truthscale_core::parse::names::Units;

/// The most targets' entries asked for each family: their texts agree or decide nothing.
const ENTRIES_PER_FAMILY: u32 = 64;

/// One target's metadata of a family.
#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(default)]
    help: String,
}

/// The units the help texts of `names` decide: those of the DCGM families whose unit their
/// name does not prove ([`dcgm_text::is_percent_or_ratio`]), one request each. A server
/// that does not answer (an older one, a proxy that does not pass the API) or whose targets'
/// texts disagree decides nothing: the values decide then, as before.
pub(super) fn units_of(client: &Client, names: &[String]) -> Units {
    let mut units = Units::default();
    for name in names.iter().filter(|n| dcgm_text::is_percent_or_ratio(n)) {
        let path = format!("/api/v1/metadata?metric={name}&limit_per_metric={ENTRIES_PER_FAMILY}");
        match client.get_once::<BTreeMap<String, Vec<Entry>>>(&path) {
            Ok(metadata) => {
                let texts = metadata.values().flatten().map(|e| e.help.as_str());
                let decided = units.help_texts(name, texts);
                tracing::debug!(family = %name, decided, "help text from the metadata API");
            }
            Err(e) => {
                tracing::debug!(family = %name, "no metadata, the values decide the unit: {e:#}");
            }
        }
    }
    units
}

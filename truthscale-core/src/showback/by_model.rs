//! The showback split by GPU model: each part's GPU-hours have one price, as a FOCUS row's
//! unit price needs.

use super::{
    FleetInput, Fractions, GpuTracks, Holders, MeasuredUse, Showback, ShowbackConfig, gpus_of,
    model_price, of_gpus, window,
};
use std::collections::BTreeMap;

/// One model's part of a showback: the GPUs whose first series reports `model`, charged as
/// [`showback_with`](super::showback_with) charges them, and the price of one of their GPU-hours.
#[derive(Debug, Clone)]
pub struct ModelPart {
    /// The model as reported (`None`: not reported).
    pub model: Option<String>,
    /// Its price of one GPU-hour ([`model_price`]); `None` without one.
    pub price: Option<f64>,
    /// The showback of its GPUs alone: groups, what no pod held, and what is unknown, each
    /// its part of the whole showback's (requests are not split by model and are left out).
    pub showback: Showback,
}

/// [`showback_with`](super::showback_with) split by GPU model, the models in order (not reported last): the parts'
/// GPU-hours and costs add up to the whole showback's, since each GPU is charged on its own.
/// Each part's GPU-hours have one price, so a cost is exactly its hours at that price.
#[must_use]
pub fn showback_by_model(
    input: &FleetInput,
    group: &[Option<String>],
    holders: &Holders,
    shares: (&Fractions, &MeasuredUse),
    cfg: &ShowbackConfig,
) -> Vec<ModelPart> {
    let w = window(input, group, holders, shares, cfg);
    // Keyed so that the models not reported (`None`) sort last.
    let mut by_model: BTreeMap<(bool, Option<&str>), Vec<GpuTracks<'_>>> = BTreeMap::new();
    for (gpu, members) in gpus_of(input) {
        let model = input.tracks[members[0]].model.as_deref();
        by_model
            .entry((model.is_none(), model))
            .or_default()
            .push((gpu, members));
    }
    by_model
        .into_iter()
        .map(|((_, model), gpus)| ModelPart {
            model: model.map(str::to_owned),
            price: model_price(model, &cfg.prices, cfg.default_price),
            showback: of_gpus(&w, &gpus, &BTreeMap::new()),
        })
        .collect()
}
